"""Where the order pipeline's messages go, declared once (idempotently) before anything runs.

order service --Sender--> exchange "orders" (x-message-deduplication)
                              |
                              v
                      stream "order-events" --Spark--> Parquet (processed orders,
                                                                revenue per minute)
                                                |
                          Spark's kanin sink    v
              exchange "reminders" (x-delayed-message) --x-delay--> queue
              "rate-this-order" (x-message-deduplication) --Receiver--> rating service
"""

from __future__ import annotations

import pika

ORDERS_EXCHANGE = "orders"
ORDER_EVENTS = "order-events"
REMINDERS_EXCHANGE = "reminders"
REMINDER_QUEUE = "rate-this-order"
REMINDER_KEY = "rate"


def declare(url: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        # A retransmit of a message the broker already has (same x-deduplication-header,
        # which kanin.client.Sender sets) is confirmed and not routed again.
        channel.exchange_declare(
            ORDERS_EXCHANGE,
            "x-message-deduplication",
            durable=True,
            arguments={"x-cache-size": 1_000_000},
        )
        channel.queue_declare(ORDER_EVENTS, durable=True, arguments={"x-queue-type": "stream"})
        channel.queue_bind(ORDER_EVENTS, ORDERS_EXCHANGE)
        channel.exchange_declare(
            REMINDERS_EXCHANGE,
            "x-delayed-message",
            durable=True,
            arguments={"x-delayed-type": "direct"},
        )
        # A reminder Spark publishes again (a retried task, a replayed batch) has the same
        # id; while the first copy waits in the queue the second is not queued.
        channel.queue_declare(
            REMINDER_QUEUE, durable=True, arguments={"x-message-deduplication": True}
        )
        channel.queue_bind(REMINDER_QUEUE, REMINDERS_EXCHANGE, REMINDER_KEY)
    finally:
        connection.close()
