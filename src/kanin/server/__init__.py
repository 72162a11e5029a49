"""The asyncio edge: listener, per-connection protocol, handshake, heartbeats."""
