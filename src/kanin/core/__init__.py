"""Broker semantics: vhosts, exchanges, queues, channels, consumers and the two ledgers.

Nothing here touches sockets; a channel writes frames through the small
`ConnectionPort` interface that its connection implements, and gets what it uses of
the broker (`ChannelServices`, both in ports.py) when it is made.
"""
