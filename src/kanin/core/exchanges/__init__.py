"""Exchange types: small classes with one routing hook each."""

from __future__ import annotations

from kanin.core.exchanges.base import ABSORBED, ROUTE, STORED, Binding, Destination, Exchange
from kanin.core.exchanges.dedup import DedupExchange
from kanin.core.exchanges.delayed import DelayedExchange
from kanin.core.exchanges.direct import DefaultExchange, DirectExchange
from kanin.core.exchanges.fanout import FanoutExchange
from kanin.core.exchanges.headers import HeadersExchange
from kanin.core.exchanges.topic import TopicExchange

EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    cls.type_name: cls
    for cls in (
        DirectExchange,
        FanoutExchange,
        TopicExchange,
        HeadersExchange,
        DedupExchange,
        DelayedExchange,
    )
}

__all__ = [
    "ABSORBED",
    "EXCHANGE_TYPES",
    "ROUTE",
    "STORED",
    "Binding",
    "DefaultExchange",
    "Destination",
    "DirectExchange",
    "Exchange",
    "FanoutExchange",
    "HeadersExchange",
    "TopicExchange",
]
