"""What /metrics reports, read from the broker when asked (nothing is kept between
scrapes). Figures the management API computes come from it (mgmt/overview.py,
mgmt/shapes.py); the counters are the broker's running totals (core/counters.py).

/metrics has queue figures summed over every queue; /metrics/per-object has them per
queue, labelled `vhost` and `queue`, as rabbitmq_prometheus does, and kanin's own
per-exchange and per-stream figures."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kanin.core.exchanges.dedup import DedupExchange
from kanin.core.exchanges.delayed import DelayedExchange
from kanin.core.queues.stream import StreamQueue
from kanin.mgmt.context import MgmtContext
from kanin.mgmt.live_shapes import open_sessions
from kanin.mgmt.overview import node_shape, totals
from kanin.mgmt.shapes import NODE, queue_shape
from kanin.prometheus.text import Family, counter, gauge


def collect(ctx: MgmtContext, per_object: bool) -> list[Family]:
    broker = ctx.broker
    vhosts = list(broker.vhosts.values())
    summary = totals(ctx, vhosts)
    objects, node = summary["object_totals"], node_shape(ctx)
    families = [
        Family("rabbitmq_identity_info", "untyped", "The node and its cluster").add(
            1, rabbitmq_node=NODE, rabbitmq_cluster=NODE
        ),
        gauge("rabbitmq_connections", "Connections open", objects["connections"]),
        gauge("rabbitmq_channels", "Channels open", objects["channels"]),
        gauge("rabbitmq_consumers", "Consumers on all queues", objects["consumers"]),
        gauge("rabbitmq_queues", "Queues in all vhosts", objects["queues"]),
        *_counters(ctx),
        *_channel_gauges(ctx),
        *_node(node),
        *_queues(ctx, summary["queue_totals"], per_object),
        *_exchanges(ctx, per_object),
    ]
    return [family for family in families if family.samples]


def _counters(ctx: MgmtContext) -> list[Family]:
    counts = ctx.broker.counters
    return [
        counter(
            "rabbitmq_connections_opened_total",
            "Connections accepted since the broker started",
            counts.connections_opened,
        ),
        counter(
            "rabbitmq_connections_closed_total",
            "Connections closed or lost since the broker started",
            counts.connections_closed,
        ),
        counter(
            "rabbitmq_channel_messages_published_total",
            "Messages published to an exchange on any channel",
            counts.published,
        ),
        counter(
            "rabbitmq_channel_messages_confirmed_total",
            "Publisher confirms sent as basic.ack",
            counts.confirmed,
        ),
        counter(
            "rabbitmq_channel_messages_delivered_total",
            "Messages delivered to consumers that do not acknowledge (no-ack)",
            counts.delivered_auto_ack,
        ),
        counter(
            "rabbitmq_channel_messages_delivered_ack_total",
            "Messages delivered to consumers that acknowledge",
            counts.delivered_manual_ack,
        ),
        counter(
            "rabbitmq_channel_messages_acked_total",
            "Deliveries acknowledged by clients",
            counts.acked,
        ),
    ]


def _channel_gauges(ctx: MgmtContext) -> list[Family]:
    unacked = unconfirmed = 0
    for session in open_sessions(ctx.broker):
        for channel in list(session.channels.values()):
            unacked += len(channel.unacked)
            if channel.confirms is not None:
                unconfirmed += channel.confirms.pending_count
    return [
        gauge("rabbitmq_channel_messages_unacked", "Deliveries not yet acknowledged", unacked),
        gauge(
            "rabbitmq_channel_messages_unconfirmed",
            "Publishes not yet confirmed (kanin: including those an end-to-end queue holds)",
            unconfirmed,
        ),
    ]


def _node(node: dict[str, Any]) -> list[Family]:
    families = [
        gauge(
            "rabbitmq_resident_memory_limit_bytes",
            "Memory high watermark in bytes",
            node["mem_limit"],
        ),
        gauge(
            "rabbitmq_disk_space_available_limit_bytes",
            "Free disk space below which publishers are blocked, in bytes",
            node["disk_free_limit"],
        ),
        Family(
            "rabbitmq_alarms_memory_used_watermark",
            "untyped",
            "1 while the memory alarm is raised",
        ).add(int(node["mem_alarm"])),
        Family(
            "rabbitmq_alarms_free_disk_space_watermark",
            "untyped",
            "1 while the free disk space alarm is raised",
        ).add(int(node["disk_free_alarm"])),
        gauge("rabbitmq_process_max_fds", "File descriptor limit", node["fd_total"]),
        gauge("rabbitmq_erlang_uptime_seconds", "Broker uptime", node["uptime"] / 1000),
        gauge(
            "kanin_held_message_bytes",
            "Bytes of messages the broker holds in memory, as it counts them",
            node["kanin_held_message_bytes"],
        ),
    ]
    # Measured only where the server measures them: absent rather than a made-up 0.
    if "mem_used" in node:
        families.append(
            gauge(
                "rabbitmq_process_resident_memory_bytes",
                "Resident memory of the broker process in bytes",
                node["mem_used"],
            )
        )
    if "disk_free" in node:
        families.append(
            gauge(
                "rabbitmq_disk_space_available_bytes",
                "Free disk space of the data directory in bytes",
                node["disk_free"],
            )
        )
    if "fd_used" in node:
        families.append(
            gauge("rabbitmq_process_open_fds", "Open file descriptors", node["fd_used"])
        )
    return families


def _queues(ctx: MgmtContext, queue_totals: dict[str, int], per_object: bool) -> list[Family]:
    ready = gauge("rabbitmq_queue_messages_ready", "Messages ready for consumers")
    unacked = gauge(
        "rabbitmq_queue_messages_unacked", "Messages delivered but not yet acknowledged"
    )
    total = gauge("rabbitmq_queue_messages", "Ready plus unacknowledged messages")
    consumers = gauge("rabbitmq_queue_consumers", "Consumers on a queue")
    first = gauge("kanin_stream_first_offset", "Offset of the first message a stream keeps")
    committed = gauge(
        "kanin_stream_committed_offset", "Offset the next message published to a stream gets"
    )
    queues = [queue for vhost in ctx.broker.vhosts.values() for queue in vhost.queues.values()]
    if not per_object:
        ready.add(queue_totals["messages_ready"])
        unacked.add(queue_totals["messages_unacknowledged"])
        total.add(queue_totals["messages"])
        consumers.add(sum(len(queue.consumers) for queue in queues))
        return [ready, unacked, total, consumers]
    held: Counter[int] = ctx.unacked_by_queue()
    for queue in queues:
        shape = queue_shape(queue, held[id(queue)])
        labels = {"vhost": queue.vhost, "queue": queue.name}
        ready.add(shape["messages_ready"], **labels)
        unacked.add(shape["messages_unacknowledged"], **labels)
        total.add(shape["messages"], **labels)
        consumers.add(shape["consumers"], **labels)
        if isinstance(queue, StreamQueue):
            first.add(shape["kanin_first_offset"], **labels)
            committed.add(shape["kanin_committed_offset"], **labels)
    return [ready, unacked, total, consumers, first, committed]


def _exchanges(ctx: MgmtContext, per_object: bool) -> list[Family]:
    delayed = gauge("kanin_delayed_messages", "Messages a delayed exchange holds for later")
    dedup = gauge("kanin_dedup_cache_entries", "Message ids a deduplicating exchange remembers")
    delayed_sum = dedup_sum = 0
    have_delayed = have_dedup = False
    for vhost in ctx.broker.vhosts.values():
        for exchange in vhost.exchanges.values():
            labels = {"vhost": vhost.name, "exchange": exchange.name}
            if isinstance(exchange, DelayedExchange):
                have_delayed, delayed_sum = True, delayed_sum + exchange.pending
                if per_object:
                    delayed.add(exchange.pending, **labels)
            if isinstance(exchange, DedupExchange) and exchange.cache is not None:
                have_dedup, dedup_sum = True, dedup_sum + len(exchange.cache)
                if per_object:
                    dedup.add(len(exchange.cache), **labels)
    if not per_object:
        if have_delayed:
            delayed.add(delayed_sum)
        if have_dedup:
            dedup.add(dedup_sum)
    return [delayed, dedup]
