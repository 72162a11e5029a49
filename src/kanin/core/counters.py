"""Broker-wide running totals, for the Prometheus metrics: plain integers that the code
already on the path bumps (one attribute increment; no allocation per message). They
count since the broker started, so they only grow, as Prometheus counters must."""

from __future__ import annotations

from typing import Any


class BrokerCounters:
    __slots__ = (
        "acked",
        "confirmed",
        "connections_closed",
        "connections_opened",
        "delivered_auto_ack",
        "delivered_manual_ack",
        "published",
    )

    def __init__(self) -> None:
        self.published = 0  # basic.publish received (with its content) on any channel
        self.confirmed = 0  # publisher confirms sent as basic.ack
        self.delivered_auto_ack = 0  # basic.deliver to consumers that do not ack
        self.delivered_manual_ack = 0  # basic.deliver to consumers that ack
        self.acked = 0  # deliveries acknowledged by clients
        self.connections_opened = 0
        self.connections_closed = 0


class ConnectionSet(set[Any]):
    """The broker's open connections, counting every one that comes and goes."""

    def __init__(self, counters: BrokerCounters) -> None:
        super().__init__()
        self.counters = counters

    def add(self, element: Any) -> None:
        if element not in self:
            self.counters.connections_opened += 1
        super().add(element)

    def discard(self, element: Any) -> None:
        if element in self:
            self.counters.connections_closed += 1
        super().discard(element)
