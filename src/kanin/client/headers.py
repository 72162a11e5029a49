"""The headers the reliable client puts on every message."""

# The inner id: one per business message, the same on every retransmit, for the broker's
# deduplication (rabbitmq-message-deduplication's header name).
INNER_ID_HEADER = "x-deduplication-header"
# The business id: the receiver processes each one once.
BIZ_ID_HEADER = "x-biz-id"
