"""The rating service: asks customers to rate their order when a reminder comes due.

It consumes the reminder queue with kanin's `Receiver`: each reminder is handled once and
acked only after the handler's row and the record of its id (the message id, rate-<order>)
have committed together in SQLite, so a reminder delivered again is acked and not handled
twice. What it handled, and when, is what the audit reads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kanin.client import Delivery, Receiver, SqliteProcessedIds
from orders.topology import REMINDER_QUEUE

TABLE = "reminders_sent"


class RatingService:
    def __init__(self, url: str, database: Path) -> None:
        self.processed = SqliteProcessedIds(database, synchronous="NORMAL")
        self.processed.connection.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} "
            "(order_id TEXT, producer TEXT, due_at REAL, received_at REAL)"
        )
        self.receiver = Receiver(
            url, REMINDER_QUEUE, self._ask_for_rating, processed=self.processed
        )

    async def _ask_for_rating(self, delivery: Delivery) -> None:
        reminder = json.loads(delivery.body)
        # (Here the service would e-mail the customer.) Written in the transaction that
        # also records this reminder's id as handled.
        delivery.transaction.execute(
            f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?)",
            (reminder["order_id"], reminder["producer"], reminder["due_at"], time.time()),
        )

    async def start(self) -> None:
        await self.receiver.start()

    async def close(self) -> None:
        await self.receiver.close()

    def handled(self) -> int:
        return int(self.processed.connection.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])

    def export(self, path: Path) -> None:
        """The handled reminders as JSON lines, for the audit."""
        rows: list[Any] = self.processed.connection.execute(f"SELECT * FROM {TABLE}").fetchall()
        with path.open("w") as out:
            for order_id, producer, due_at, received_at in rows:
                record = {"order_id": order_id, "producer": producer}
                out.write(
                    json.dumps({**record, "due_at": due_at, "received_at": received_at}) + "\n"
                )
