"""The management HTTP API: RabbitMQ 3.10's `/api/...` over aiohttp, on the broker's loop.

It reads the broker's state (vhosts, queues, connections, users) and changes it through
the same vhost and broker methods the AMQP handlers use, so permissions, equivalence
checks and the durability of definitions are applied in one place. `server.py` starts
and stops the listener, `app.py` builds the routes and the error and auth middleware;
each resource family has its module, and the JSON shapes live in `shapes.py` and
`live_shapes.py`.
"""
