"""The broker: vhosts, users, and what spans connections (direct reply-to)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kanin.config import BrokerConfig
from kanin.core.auth import Permission, UserStore
from kanin.core.queue import Queue
from kanin.core.scheduling import Scheduler
from kanin.core.vhost import VirtualHost

if TYPE_CHECKING:
    from kanin.core.channel import Channel

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig, scheduler: Scheduler) -> None:
        self.config = config
        self.scheduler = scheduler
        self.users = UserStore()
        self.vhosts: dict[str, VirtualHost] = {}
        # Channels holding a direct reply-to consumer, by the key in their reply-to address.
        self.reply_channels: dict[str, Channel] = {}
        self.add_vhost(config.default_vhost)
        for spec in config.default_users:
            self.users.add_user(spec.name, spec.password, spec.tags)
            self.users.set_permissions(spec.name, config.default_vhost, Permission())

    def add_vhost(self, name: str) -> VirtualHost:
        vhost = VirtualHost(name, self.scheduler)
        vhost.on_queue_deleted = self._cancel_consumers
        self.vhosts[name] = vhost
        return vhost

    @staticmethod
    def _cancel_consumers(queue: Queue) -> None:
        for consumer in list(queue.consumers):
            consumer.channel.consumer_cancelled_by_broker(consumer)
