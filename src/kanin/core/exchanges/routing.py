"""Routing a message through a vhost's exchanges to the queues it reaches.

A function of the vhost's exchange table rather than a VirtualHost method: it runs for
every publish, and here it is compiled with the exchanges it calls (docs/mypyc.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kanin.core.exchanges.base import Exchange

if TYPE_CHECKING:
    from kanin.core.queues import Queue


def route_keys(
    exchanges: dict[str, Exchange],
    exchange: Exchange,
    routing_keys: tuple[str, ...],
    headers: dict[str, Any],
) -> list[Queue]:
    """Route by several keys at once (CC/BCC), each queue once."""
    if len(routing_keys) == 1:
        return route(exchanges, exchange, routing_keys[0], headers)
    queues: dict[int, Queue] = {}
    for key in routing_keys:
        for queue in route(exchanges, exchange, key, headers):
            queues[id(queue)] = queue
    return list(queues.values())


def route(
    exchanges: dict[str, Exchange], exchange: Exchange, routing_key: str, headers: dict[str, Any]
) -> list[Queue]:
    """Every queue a message reaches, each once, following exchange-to-exchange bindings
    and alternate exchanges (looked up by name in `exchanges`)."""
    first = list(exchange.route(routing_key, headers))
    if len(first) == 1 and not isinstance(only := first[0], Exchange):
        return [only]  # the most usual case of all: one queue
    # Destinations are queues or exchanges; Exchange is a plain class, so testing for
    # it is cheaper on every publish than testing for the Queue ABC.
    direct: list[Queue] = [d for d in first if not isinstance(d, Exchange)]
    if direct and len(direct) == len(first):
        # The usual case, on every publish: only queues (no e2e bindings, no AE).
        # A queue bound twice (say, by two keys to a fanout) is listed twice.
        return direct if len(direct) == 1 else list({id(q): q for q in direct}.values())
    queues: dict[int, Queue] = {}
    visited: set[int] = set()
    pending: list[Exchange] = [exchange]
    while pending:
        current = pending.pop()
        if id(current) in visited:
            continue
        visited.add(id(current))
        destinations = first if current is exchange else current.route(routing_key, headers)
        routed = False
        for destination in destinations:
            routed = True
            if isinstance(destination, Exchange):
                pending.append(destination)
            else:
                queues[id(destination)] = destination
        if not routed:
            alternate = current.alternate_exchange
            if alternate is not None and alternate in exchanges:
                pending.append(exchanges[alternate])
    return list(queues.values())
