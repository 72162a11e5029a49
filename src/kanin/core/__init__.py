"""Broker semantics: vhosts, exchanges, queues, channels, consumers and the two ledgers.

Nothing here touches sockets; a channel writes frames through the small
`ConnectionPort` interface that the server layer implements.
"""
