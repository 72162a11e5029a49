"""Broker-wide running totals, for the Prometheus metrics and the management API's message
rates: plain integers that the code already on the path bumps (one attribute increment;
no allocation per message). They count since the broker started, so they only grow, as
Prometheus counters must. Queues and exchanges keep a few of their own (`msg_*`
attributes, see Queue and Exchange), bumped beside these."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class BrokerCounters:
    __slots__ = (
        "acked",
        "confirmed",
        "connections_closed",
        "connections_opened",
        "delivered_auto_ack",
        "delivered_manual_ack",
        "dropped_unroutable",
        "got_auto_ack",
        "got_empty",
        "got_manual_ack",
        "published",
        "redelivered",
        "returned_unroutable",
    )

    def __init__(self) -> None:
        self.published = 0  # basic.publish received (with its content) on any channel
        self.confirmed = 0  # publisher confirms sent as basic.ack
        self.delivered_auto_ack = 0  # basic.deliver to consumers that do not ack
        self.delivered_manual_ack = 0  # basic.deliver to consumers that ack
        self.acked = 0  # deliveries acknowledged by clients
        self.redelivered = 0  # deliveries and get-oks flagged redelivered
        self.got_manual_ack = 0  # basic.get-ok, the message awaiting an ack
        self.got_auto_ack = 0  # basic.get-ok with no-ack
        self.got_empty = 0  # basic.get-empty
        self.returned_unroutable = 0  # mandatory and routed nowhere: basic.return
        self.dropped_unroutable = 0  # not mandatory and routed nowhere: dropped
        self.connections_opened = 0
        self.connections_closed = 0


class ConnectionSet:
    """The broker's open connections, counting every one that comes and goes.

    It holds a set rather than being one: compiled with mypyc, code that holds it typed as
    a set calls set.add directly, past an override, and no connection was counted."""

    __slots__ = ("_members", "counters")

    def __init__(self, counters: BrokerCounters) -> None:
        self._members: set[Any] = set()
        self.counters = counters

    def add(self, element: Any) -> None:
        if element not in self._members:
            self.counters.connections_opened += 1
        self._members.add(element)

    def discard(self, element: Any) -> None:
        if element in self._members:
            self.counters.connections_closed += 1
        self._members.discard(element)

    def __contains__(self, element: object) -> bool:
        return element in self._members

    def __iter__(self) -> Iterator[Any]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)
