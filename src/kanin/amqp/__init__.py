"""The AMQP 0-9-1 codec: bytes in, frames out; frames in, bytes out.

Rules of this package: no asyncio, socket, os or time imports. Everything here is
a pure function of its input, so it can be tested and fuzzed without a network.
"""
