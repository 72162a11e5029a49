"""The order service: four producers publishing order events with kanin's reliable client.

Each producer writes every order to its outbox file (the ledger the audit reconciles)
before sending it with `Sender.send`, which returns once the broker has confirmed it and
retransmits until then. Three of them misbehave the way real ones do, so the audit has
something to find:
- web-shop: a customer double-clicks now and then, and the order is sent twice, two
  separate sends of one order id (the deduplicating exchange drops retransmits, not a
  second order);
- pos-terminal: now and then it crashes after writing an order to its outbox and before
  sending it, and nothing sends it later: lost;
- mobile-app: it was offline, and first uploads the orders it took then (10-15 minutes
  old);
- partner-api: behaves.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from kanin.client import Sender
from orders.topology import ORDERS_EXCHANGE

DOUBLE_CLICK_EVERY = 10  # web-shop: every 10th order is sent twice
CRASH_EVERY = 15  # pos-terminal: every 15th order never leaves the outbox
OFFLINE_ORDERS = 8  # mobile-app: orders taken while offline, uploaded first
OFFLINE_AGE_S = (600.0, 900.0)  # how old they are when uploaded


@dataclass
class Injected:
    """What each producer did wrong, for checking the audit against."""

    double_sent: dict[str, int] = field(default_factory=dict)
    never_sent: dict[str, int] = field(default_factory=dict)
    uploaded_late: dict[str, int] = field(default_factory=dict)


PRODUCERS = ("web-shop", "pos-terminal", "mobile-app", "partner-api")


class Producer:
    def __init__(self, name: str, url: str, ledger: Path, injected: Injected) -> None:
        self.name = name
        self.url = url
        self.outbox = ledger / f"{name}.jsonl"
        self.injected = injected
        self.count = 0
        self.random = random.Random(name)

    def order(self, created_at: float) -> dict[str, object]:
        self.count += 1
        amount = round(self.random.uniform(5, 120), 2)
        return {
            "order_id": f"{self.name}-{self.count}",
            "producer": self.name,
            "amount": amount,
            "created_at": created_at,
        }

    def record(self, order: dict[str, object]) -> None:
        with self.outbox.open("a") as outbox:
            outbox.write(json.dumps(order) + "\n")

    async def run(self, orders: int, rate: float) -> None:
        async with Sender(self.url, exchange=ORDERS_EXCHANGE) as sender:
            send = self._sender(sender)
            if self.name == "mobile-app":
                await self._upload_offline_orders(send)
            for _ in range(orders):
                order = self.order(time.time())
                self.record(order)
                await self._deliver(order, send)
                await asyncio.sleep(self.random.expovariate(rate))

    def _sender(self, sender: Sender) -> Callable[[dict[str, object]], Awaitable[None]]:
        async def send(order: dict[str, object]) -> None:
            await sender.send(json.dumps(order).encode(), biz_id=str(order["order_id"]))

        return send

    async def _deliver(
        self, order: dict[str, object], send: Callable[[dict[str, object]], Awaitable[None]]
    ) -> None:
        if self.name == "pos-terminal" and self.count % CRASH_EVERY == 0:
            self._note(self.injected.never_sent)
            return  # crashed between the outbox and the send; nobody resends it
        await send(order)
        if self.name == "web-shop" and self.count % DOUBLE_CLICK_EVERY == 0:
            self._note(self.injected.double_sent)
            await send(order)

    async def _upload_offline_orders(
        self, send: Callable[[dict[str, object]], Awaitable[None]]
    ) -> None:
        now = time.time()
        ages = sorted(
            (self.random.uniform(*OFFLINE_AGE_S) for _ in range(OFFLINE_ORDERS)), reverse=True
        )
        for age in ages:
            order = self.order(now - age)
            self.record(order)
            await send(order)
            self._note(self.injected.uploaded_late)

    def _note(self, counts: dict[str, int]) -> None:
        counts[self.name] = counts.get(self.name, 0) + 1


async def run_order_service(url: str, ledger: Path, orders: int, rate: float) -> Injected:
    """Every producer takes `orders` orders, at `rate` a second on average."""
    ledger.mkdir(parents=True, exist_ok=True)
    injected = Injected()
    producers = [Producer(name, url, ledger, injected) for name in PRODUCERS]
    await asyncio.gather(*(producer.run(orders, rate) for producer in producers))
    return injected
