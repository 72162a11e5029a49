"""kanin.client: every business message processed exactly once, over AMQP 0-9-1.

Two halves, each retransmitting until the other acknowledges (on aio-pika):
- `Sender.send(body, biz_id=...)` resolves when the broker confirms the message (with an
  end-to-end queue, x-confirm-on-ack: when a consumer has acked it). Unconfirmed within
  its timeout, nacked, returned or cut off by a lost connection, it is sent again after
  an exponential backoff, up to a limit; then `send` raises SendFailed. Every copy
  carries the same inner id (the `x-deduplication-header` header and the message id), so
  a deduplicating exchange or queue keeps one. The connection comes back by itself.
- `Receiver` hands each message to the handler and acks it only after the handler's work
  and the record of its biz-id (`x-biz-id`) have committed together (`ProcessedIds`;
  SQLite by default): a message delivered again, whatever the reason, is acked without
  running the handler twice. A handler that raises leaves nothing recorded, and the
  message goes back to its queue (nack with requeue; the queue's backoff and delivery
  limit apply).
"""

from kanin.client.headers import BIZ_ID_HEADER, INNER_ID_HEADER
from kanin.client.processed import ProcessedIds, SqliteProcessedIds
from kanin.client.receiver import Delivery, Receiver
from kanin.client.sender import RetryPolicy, Sender, SendFailed

__all__ = [
    "BIZ_ID_HEADER",
    "INNER_ID_HEADER",
    "Delivery",
    "ProcessedIds",
    "Receiver",
    "RetryPolicy",
    "SendFailed",
    "Sender",
    "SqliteProcessedIds",
]
