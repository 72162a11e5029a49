"""A virtual host: its exchanges, queues and bindings, and routing through them.

The methods here are the semantic operations behind exchange.* and queue.*; they
raise AMQPError with RabbitMQ's reply codes and texts, and know nothing of frames.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kanin.amqp import constants as C
from kanin.amqp.errors import AMQPError, ChannelError, ConnectionError_
from kanin.core import queues
from kanin.core.counters import BrokerCounters
from kanin.core.dead_letter import dead_letter
from kanin.core.equivalence import check_equivalent_args, check_equivalent_flags
from kanin.core.exchanges import (
    EXCHANGE_TYPES,
    Binding,
    DefaultExchange,
    Destination,
    Exchange,
    HeadersExchange,
)
from kanin.core.exchanges.headers import check_x_match
from kanin.core.field_values import wire_type_name
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry
from kanin.core.paging import DEFAULT_MEMORY_BUDGET_BYTES
from kanin.core.permissions import Authorize
from kanin.core.policy_args import VhostPolicies, queue_args_under
from kanin.core.queue_args import QUEUE_TYPE, parse_queue_args, same_queue_type
from kanin.core.queues import Queue
from kanin.core.scheduling import Scheduler

if TYPE_CHECKING:
    from kanin.store.api import MessageStore, StreamLogs

PREDECLARED = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)


class VirtualHost:
    def __init__(
        self,
        name: str,
        scheduler: Scheduler,
        memory: MemoryMonitor,
        store: MessageStore | None = None,
        queue_memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    ) -> None:
        self.name = name
        self.scheduler = scheduler
        self.memory = memory
        self.store = store
        self.streams: StreamLogs | None = None  # set by the broker
        self.counters = BrokerCounters()  # the broker's, which it sets
        self.queue_memory_budget_bytes = queue_memory_budget_bytes
        # Called when a durable definition changes, so it can be saved.
        self.on_definitions_changed: Callable[[], None] | None = None
        self.queues: dict[str, Queue] = {}
        self.policies = VhostPolicies()  # set and cleared through core/policy_args.py
        # Queues that settle confirms themselves: while there are none, publishing skips their path.
        self.ticket_queues = 0
        self.default_exchange = DefaultExchange(self.queues.get)
        self.exchanges: dict[str, Exchange] = {"": self.default_exchange}
        for name_, type_ in PREDECLARED:
            self.exchanges[name_] = EXCHANGE_TYPES[type_](name_, durable=True)
        # Called with (queue, consumers) when a queue is deleted, to notify the consumers.
        self.on_queue_deleted: Callable[[Queue], None] | None = None

    # -- names ------------------------------------------------------------------

    def _where(self) -> str:
        return f"in vhost '{self.name}'"

    def exchange_not_found(self, name: str) -> AMQPError:
        return ChannelError(C.NOT_FOUND, f"no exchange '{name}' {self._where()}")

    def queue_not_found(self, name: str) -> AMQPError:
        return ChannelError(C.NOT_FOUND, f"no queue '{name}' {self._where()}")

    def get_exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise self.exchange_not_found(name)
        return exchange

    def get_queue(self, name: str, connection: object | None = None) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise self.queue_not_found(name)
        if connection is not None:
            self.check_exclusive(queue, connection)
        return queue

    def check_exclusive(self, queue: Queue, connection: object) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner is not connection:
            raise self._locked(queue.name)

    def _locked(self, name: str) -> AMQPError:
        return ChannelError(
            C.RESOURCE_LOCKED,
            f"cannot obtain exclusive access to locked queue '{name}' {self._where()}. "
            "It could be originally declared on another connection or the exclusive "
            "property value does not match that of the original declaration.",
        )

    # -- exchanges --------------------------------------------------------------

    def declare_exchange(
        self,
        name: str,
        type_: str,
        *,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
        authorize: Authorize | None = None,
    ) -> Exchange:
        """Checks in rabbit_channel's order: type, default exchange, configure permission,
        then equivalence (existing) or name, alternate exchange and its permissions (new)."""
        if passive:
            self._refuse_default_exchange(name)
            return self.get_exchange(name)
        cls = EXCHANGE_TYPES.get(type_)
        if cls is None:
            raise ConnectionError_(C.COMMAND_INVALID, f"unknown exchange type '{type_}'")
        self._refuse_default_exchange(name)
        if authorize is not None:
            authorize("configure", "exchange", name)
        existing = self.exchanges.get(name)
        if existing is not None:
            self._check_equivalent_exchange(
                existing, type_, durable, auto_delete, internal, arguments
            )
            return existing
        if name.startswith("amq."):
            raise ChannelError(
                C.ACCESS_REFUSED, f"exchange name '{name}' contains reserved prefix 'amq.*'"
            )
        alternate = self._exchange_arg(arguments, "alternate-exchange", f"exchange '{name}'")
        if alternate is not None and authorize is not None:
            # Messages unroutable here go to the alternate: publishing here is writing there.
            authorize("read", "exchange", name)
            authorize("write", "exchange", alternate)
        exchange = cls(name, durable, auto_delete, internal, arguments)
        exchange.policy = self.policies.matching("exchange", name)
        exchange.attach(self)
        self.exchanges[name] = exchange
        if durable:
            self._definitions_changed()
        return exchange

    def _refuse_default_exchange(self, name: str) -> None:
        if name == "":
            raise ChannelError(C.ACCESS_REFUSED, "operation not permitted on the default exchange")

    def _exchange_arg(self, arguments: dict[str, Any], key: str, what: str) -> str | None:
        """An argument naming an exchange (alternate or dead-letter); 406 unless a string."""
        value = arguments.get(key)
        if value is not None and not isinstance(value, str):
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"invalid type '{wire_type_name(value)}' for arg '{key}' in {what} {self._where()}",
            )
        return value

    def _check_equivalent_exchange(
        self,
        existing: Exchange,
        type_: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> None:
        what = f"for exchange '{existing.name}' {self._where()}"
        if existing.type_name != type_:
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"inequivalent arg 'type' {what}: received '{type_}' but current is "
                f"'{existing.type_name}'",
            )
        check_equivalent_flags(
            what,
            ("durable", durable, existing.durable),
            ("auto_delete", auto_delete, existing.auto_delete),
            ("internal", internal, existing.internal),
        )
        check_equivalent_args(existing.arguments, arguments, what, ("alternate-exchange",))

    def delete_exchange(
        self, name: str, if_unused: bool, authorize: Authorize | None = None
    ) -> None:
        self._refuse_default_exchange(name)
        if name.startswith("amq.") and name in self.exchanges:
            raise ChannelError(
                C.ACCESS_REFUSED,
                f"deletion of system exchange '{name}' {self._where()} not allowed",
            )
        if authorize is not None:
            authorize("configure", "exchange", name)
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # deleting what is not there is fine, as in RabbitMQ 3.x
        if if_unused and exchange.bindings:
            raise ChannelError(C.PRECONDITION_FAILED, f"exchange '{name}' {self._where()} in use")
        self._remove_exchange(exchange)

    def _definitions_changed(self) -> None:
        if self.on_definitions_changed is not None:
            self.on_definitions_changed()

    def _remove_exchange(self, exchange: Exchange) -> None:
        del self.exchanges[exchange.name]
        exchange.detach()
        if exchange.durable:
            self._definitions_changed()
        for binding in list(exchange.bindings.values()):
            self._drop_binding(binding)
        for binding in list(exchange.bound_from.values()):
            self._drop_binding(binding)

    # -- queues -----------------------------------------------------------------

    def declare_queue(
        self,
        name: str,
        connection: object,
        *,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Any],
        authorize: Authorize | None = None,
    ) -> Queue:
        """Checks in rabbit_channel's order: name, configure permission (server-made
        names too), then equivalence (existing) or the dead-letter exchange and its
        permissions, then the other arguments (new)."""
        if passive:
            return self.get_queue(name, connection)
        if name == "":
            if arguments.get("x-queue-type") == "stream":
                raise ChannelError(
                    C.PRECONDITION_FAILED,
                    "Cannot declare a server-named queue for type rabbit_stream_queue",
                )
            name = "amq.gen-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode()[:22]
        elif name.startswith("amq."):
            raise ChannelError(
                C.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        if authorize is not None:
            authorize("configure", "queue", name)
        existing = self.queues.get(name)
        if existing is not None:
            self._check_equivalent_queue(
                existing, connection, exclusive, durable, auto_delete, arguments
            )
            return existing
        dead_letter_exchange = self._exchange_arg(
            arguments, "x-dead-letter-exchange", f"queue '{name}'"
        )
        if dead_letter_exchange is not None and authorize is not None:
            # Dead-lettering reads from this queue and publishes to the exchange.
            authorize("read", "queue", name)
            authorize("write", "exchange", dead_letter_exchange)
        policy = self.policies.matching("queue", name)
        args = parse_queue_args(arguments, name, self.name)  # refuses as RabbitMQ does
        args = queue_args_under(policy, name, self.name, arguments, args)
        queue = queues.create(
            name,
            self.name,
            self.scheduler,
            self.memory,
            durable=durable,
            exclusive_owner=connection if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
            args=args,
            store=self.store,
            streams=self.streams,
            memory_budget_bytes=self.queue_memory_budget_bytes,
        )
        queue.policy = policy
        queue.on_unused = self._auto_delete_queue
        queue.on_dead_letter = self._dead_letter
        self.queues[name] = queue
        self.ticket_queues += queue.settles_confirms
        if durable and not exclusive:
            self._definitions_changed()
        return queue

    def _check_equivalent_queue(
        self,
        existing: Queue,
        connection: object,
        exclusive: bool,
        durable: bool,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> None:
        self.check_exclusive(existing, connection)
        if existing.exclusive != exclusive:
            # RabbitMQ reports a lock, not an inequivalence, for a changed exclusive flag.
            raise self._locked(existing.name)
        what = f"for queue '{existing.name}' {self._where()}"
        check_equivalent_flags(
            what,
            ("durable", durable, existing.durable),
            ("auto_delete", auto_delete, existing.auto_delete),
        )
        keys = existing.compared_arguments
        if same_queue_type(existing.arguments, arguments):
            keys = tuple(key for key in keys if key != QUEUE_TYPE)
        check_equivalent_args(existing.arguments, arguments, what, keys)
        existing.touch()

    def _dead_letter(self, queue: Queue, entries: list[Entry], reason: str) -> None:
        dead_letter(self, queue, entries, reason)

    def _auto_delete_queue(self, queue: Queue) -> None:
        if self.queues.get(queue.name) is queue:
            self.remove_queue(queue)

    def delete_queue(self, queue: Queue, if_unused: bool, if_empty: bool) -> int:
        if not queue.delete_has_conditions:  # a stream: delete-ok says 0, as RabbitMQ's
            self.remove_queue(queue)
            return 0
        if if_unused and queue.consumers:
            raise ChannelError(
                C.PRECONDITION_FAILED, f"queue '{queue.name}' {self._where()} in use"
            )
        if if_empty and queue.message_count:
            raise ChannelError(
                C.PRECONDITION_FAILED, f"queue '{queue.name}' {self._where()} not empty"
            )
        return self.remove_queue(queue)

    def remove_queue(self, queue: Queue) -> int:
        """Delete a queue for any reason: its consumers are cancelled, bindings dropped."""
        count = queue.message_count
        if self.queues.get(queue.name) is queue:
            del self.queues[queue.name]
            self.ticket_queues -= queue.settles_confirms
        queue.delete()
        if queue.durable and not queue.exclusive:
            self._definitions_changed()
        for binding in list(queue.bindings.values()):
            self._drop_binding(binding)
        queue.purge()
        if self.on_queue_deleted is not None:
            self.on_queue_deleted(queue)
        queue.drop_consumers()
        return count

    # -- bindings ---------------------------------------------------------------

    def bind(
        self,
        source_name: str,
        destination: Destination,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        if source_name == "" or destination is self.default_exchange:
            raise ChannelError(C.ACCESS_REFUSED, "operation not permitted on the default exchange")
        source = self.get_exchange(source_name)
        if isinstance(source, HeadersExchange):
            check_x_match(arguments)
        binding = Binding(source, destination, routing_key, arguments)
        if source.bind(binding):
            if source.durable and destination.durable:
                self._definitions_changed()
            back_key = (*binding.key, id(source))
            if isinstance(destination, Queue):
                destination.bindings[back_key] = binding
            else:
                destination.bound_from[back_key] = binding

    def unbind(
        self,
        source_name: str,
        destination: Destination,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        if source_name == "" or destination is self.default_exchange:
            raise ChannelError(C.ACCESS_REFUSED, "operation not permitted on the default exchange")
        source = self.exchanges.get(source_name)
        if source is None:
            return  # RabbitMQ 3.x: unbinding what does not exist succeeds
        binding = Binding(source, destination, routing_key, arguments)
        existing = source.bindings.get(binding.key)
        if existing is not None:
            self._drop_binding(existing)

    def has_binding(
        self,
        source_name: str,
        destination: Destination,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> bool:
        source = self.exchanges.get(source_name)
        if source is None:
            return False
        return Binding(source, destination, routing_key, arguments).key in source.bindings

    def _drop_binding(self, binding: Binding) -> None:
        source, destination = binding.source, binding.destination
        if source.durable and destination.durable:
            self._definitions_changed()
        source.unbind(binding.key)
        back_key = (*binding.key, id(source))
        if isinstance(destination, Queue):
            destination.bindings.pop(back_key, None)
        else:
            destination.bound_from.pop(back_key, None)
        if source.auto_delete and not source.bindings and self.exchanges.get(source.name) is source:
            self._remove_exchange(source)
