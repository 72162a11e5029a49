"""What every exchange has: a name, flags, arguments and a set of bindings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Union

from kanin.native import mypyc_attr

if TYPE_CHECKING:
    from kanin.core.message import Message
    from kanin.core.policies import Policy
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost
    from kanin.store.api import Recovered

Destination = Union["Queue", "Exchange"]

# What an exchange that intercepts publishes (`Exchange.intercept`) does with one:
ROUTE: Final = 0  # route it now, as any exchange would
ABSORBED: Final = 1  # not routed, and not returned either: confirmed (a duplicate, a delayed one)
STORED: Final = 2  # or-ed with either: the exchange wrote to the store, the confirm waits for it


def freeze(value: Any) -> Any:
    """A hashable stand-in for a field-table value, to compare binding arguments."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


class Binding:
    __slots__ = ("arguments", "destination", "key", "routing_key", "source")

    def __init__(
        self,
        source: Exchange,
        destination: Destination,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        self.source = source
        self.destination = destination
        self.routing_key = routing_key
        self.arguments = arguments
        self.key = (id(destination), routing_key, freeze(arguments))


# Compiled (docs/mypyc.md); the deduplicating and delayed types subclass it as Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Exchange:
    type_name: ClassVar[str] = ""
    # Exchanges that act on a publish before it is routed (deduplicating, delayed) set
    # this and implement `intercept`; publishing checks the flag, not a method, per publish.
    intercepts: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        self.bindings: dict[tuple[Any, ...], Binding] = {}
        # Bindings in which this exchange is the destination (exchange-to-exchange).
        self.bound_from: dict[tuple[Any, ...], Binding] = {}
        # Running totals for the management API's message rates (see Queue's).
        self.msg_published_in = 0  # publishes to this exchange
        self.msg_published_out = 0  # queues those publishes were routed to, summed
        self.policy: Policy | None = None  # set by the vhost (core/policy_args.py)
        self.configure()

    def configure(self) -> None:
        """A type with arguments of its own checks and reads them here (an AMQPError
        refuses the declare: the exchange is not made), and one that indexes its
        bindings makes its index. Called once, at the end of __init__ (a compiled
        subclass cannot pass *args on to it)."""

    @property
    def alternate_exchange(self) -> str | None:
        """Where unroutable messages go: the exchange's argument, else its policy's (as in
        RabbitMQ, the argument wins). Asked only when a message found no queue."""
        value = self.arguments.get("alternate-exchange")
        if value is None and self.policy is not None:
            value = self.policy.definition.get("alternate-exchange")
        return value if isinstance(value, str) else None

    def bind(self, binding: Binding) -> bool:
        """Add a binding; False if it was already there."""
        if binding.key in self.bindings:
            return False
        self.bindings[binding.key] = binding
        self._on_bind(binding)
        return True

    def unbind(self, key: tuple[Any, ...]) -> Binding | None:
        binding = self.bindings.pop(key, None)
        if binding is not None:
            self._on_unbind(binding)
        return binding

    def _on_bind(self, binding: Binding) -> None:
        """Hook for types that index their bindings."""

    def _on_unbind(self, binding: Binding) -> None:
        """Hook for types that index their bindings."""

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        raise NotImplementedError

    # -- for exchanges with state of their own (deduplicating, delayed) ----------------

    def attach(self, vhost: VirtualHost) -> None:
        """The vhost made this exchange (declared, or restored at start-up)."""

    def detach(self) -> None:
        """The vhost deleted this exchange: let go of what it holds, in the store too."""

    def intercept(self, message: Message) -> int:
        """A publish to this exchange, before routing: ROUTE or ABSORBED, | STORED."""
        return ROUTE

    def restore(self, key: str, recovered: list[Recovered]) -> None:
        """Start-up: the store's records under one of this exchange's keys
        (store/records.py, exchange_key), oldest first."""
