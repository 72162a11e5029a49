"""The broker: vhosts, users, and what spans connections (direct reply-to)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kanin.config import BrokerConfig, PermissionSpec
from kanin.core.alarms import Alarms
from kanin.core.auth import Permission, UserStore
from kanin.core.counters import BrokerCounters, ConnectionSet
from kanin.core.memory import MemoryMonitor, RssReader
from kanin.core.queues import Queue
from kanin.core.reply_to import ReplyRegistry
from kanin.core.scheduling import Scheduler, Soon
from kanin.core.vhost import VirtualHost

if TYPE_CHECKING:
    from kanin.store.api import MessageStore, StreamLogs

log = logging.getLogger(__name__)


class DefinitionsSink(Protocol):
    """Where durable definition changes go to be saved (core/definitions_saver.py)."""

    def changed(self) -> None: ...

    def when_saved(self, callback: Callable[[str | None], None]) -> bool:
        """False if nothing is unsaved; else callback(None) once the definitions as they
        are now are on disk, or callback(problem) if that save failed."""
        ...


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        scheduler: Scheduler,
        store: MessageStore | None = None,
        read_rss: RssReader | None = None,
        streams: StreamLogs | None = None,
    ) -> None:
        self.config = config
        # Queue dispatches and connection writes go through Soon, so a connection can run
        # them right after its frames (see Soon); timers and the clock are the loop's.
        self.soon = Soon(scheduler)
        self.scheduler: Scheduler = self.soon
        # The loop's own: a connection reads its next slice of frames on a later turn,
        # after the others have had theirs (Soon would run it within this one).
        self.loop_scheduler = scheduler
        self.store = store
        self.streams = streams  # where stream queues keep their logs (None: no streams)
        # Set by the server when the broker keeps its definitions on disk.
        self.definitions: DefinitionsSink | None = None
        self.users = UserStore()
        self.alarms = Alarms()
        self.alarms.on_change = self._on_alarm_change
        self.memory = MemoryMonitor(config.memory_high_watermark_bytes, read_rss)
        self.memory.on_alarm_change = lambda raised: self.alarms.set("memory", raised)
        self.counters = BrokerCounters()  # running totals, for the metrics
        # Open AMQP connections (the server layer adds and removes them).
        self.connections = ConnectionSet(self.counters)
        self.vhosts: dict[str, VirtualHost] = {}
        # Direct reply-to consumers: a reply may come from any connection.
        self.replies = ReplyRegistry()
        for vhost_name in (config.default_vhost, *config.vhosts):
            self.add_vhost(vhost_name)
        for spec in config.default_users:
            self.users.add_user(spec.name, spec.password, spec.tags)
            grants = spec.permissions
            if grants is None:
                grants = (PermissionSpec(config.default_vhost),)
            for grant in grants:
                permission = Permission(grant.configure, grant.write, grant.read)
                self.users.set_permissions(spec.name, grant.vhost, permission)

    def add_vhost(self, name: str) -> VirtualHost:
        vhost = VirtualHost(
            name, self.scheduler, self.memory, self.store, self.config.queue_memory_budget_bytes
        )
        vhost.streams = self.streams
        vhost.counters = self.counters
        vhost.on_queue_deleted = self._cancel_consumers
        vhost.on_definitions_changed = self.definitions_changed
        self.vhosts[name] = vhost
        return vhost

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost and everything in it, as RabbitMQ does: its connections are
        closed (320), its queues deleted with their messages, and every user's
        permissions in it dropped."""
        vhost = self.vhosts[name]
        for connection in list(self.connections):
            if getattr(connection, "vhost", None) is vhost:
                connection.close_forced(f"vhost '{name}' is deleted")
        for queue in list(vhost.queues.values()):
            vhost.remove_queue(queue)
        for exchange in list(vhost.exchanges.values()):
            exchange.detach()  # its own records (delayed messages, dedup ids) go too
        del self.vhosts[name]
        for user in self.users.users.values():
            user.permissions.pop(name, None)
        self.definitions_changed()

    def definitions_changed(self) -> None:
        """A durable definition (vhost, user, permission, exchange, queue, binding)
        changed: have it saved."""
        if self.definitions is not None:
            self.definitions.changed()

    def _on_alarm_change(self, blocked: bool, reason: str) -> None:
        for connection in list(self.connections):
            connection.on_alarm(blocked, reason)

    @staticmethod
    def _cancel_consumers(queue: Queue) -> None:
        for consumer in list(queue.consumers):
            consumer.channel.consumer_cancelled_by_broker(consumer)
