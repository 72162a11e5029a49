"""What connects the broker to its store: definitions out and back, messages back.

- Durable definitions change -> the DefinitionsSaver (core/definitions_saver.py) saves
  them in the next message-store commit round (store/definitions.py).
- Start-up: `restore()` rebuilds vhosts, users, policies, durable exchanges, durable
  queues and their bindings, then puts each durable queue's recovered messages back in order,
  paged out: what the store recovered is what the queue needs to order, expire,
  prioritise and count them, and bodies are read back only as they are delivered.
- Recovery never deletes messages: those of a queue the definitions do not name are
  kept in the store, untouched, listed in `unknown-queue-messages.json` and reported
  at error level (README, "Running the broker", says what an operator does then).
- A message store that holds messages next to a missing definitions file means the
  file was lost: start-up stops, unless the operator forces it (force_recovery).
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kanin.amqp.errors import AMQPError
from kanin.core.auth import Permission, User
from kanin.core.definitions_saver import DefinitionsSaver
from kanin.core.exchanges import DefaultExchange, Exchange
from kanin.core.policies import PolicyError, read_policy
from kanin.core.policy_args import reapply
from kanin.core.queue_args import QUEUE_TYPE
from kanin.core.queues import Queue
from kanin.errors import StartupError
from kanin.store import definitions
from kanin.store.records import EXCHANGE_KEY_PREFIX, parse_exchange_key

if TYPE_CHECKING:
    from kanin.core.broker import Broker
    from kanin.store.api import MessageStore, Recovered, StreamLogs

log = logging.getLogger(__name__)

UNKNOWN_QUEUE_MESSAGES = "unknown-queue-messages.json"


class Persistence:
    def __init__(self, broker: Broker, directory: Path, store: MessageStore) -> None:
        self.broker = broker
        self.store = store
        self.path = directory / "definitions.json"
        self.saver = DefinitionsSaver(
            self.path, self.snapshot, broker.scheduler, store.after_commit
        )

    # -- out ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        broker = self.broker
        users = [
            {"name": u.name, "password_hash": u.password_hash, "tags": list(u.tags)}
            for u in broker.users.users.values()
        ]
        permissions = [
            {
                "user": u.name,
                "vhost": vhost,
                "configure": p.configure,
                "write": p.write,
                "read": p.read,
            }
            for u in broker.users.users.values()
            for vhost, p in u.permissions.items()
        ]
        exchanges, queues, bindings = [], [], []
        for vhost in broker.vhosts.values():
            for exchange in vhost.exchanges.values():
                if exchange.durable and _user_declared(exchange):
                    exchanges.append(
                        {
                            "vhost": vhost.name,
                            "name": exchange.name,
                            "type": exchange.type_name,
                            "auto_delete": exchange.auto_delete,
                            "internal": exchange.internal,
                            "arguments": exchange.arguments,
                        }
                    )
                for binding in exchange.bindings.values():
                    destination = binding.destination
                    if exchange.durable and destination.durable and _persistable(destination):
                        bindings.append(
                            {
                                "vhost": vhost.name,
                                "source": exchange.name,
                                "destination": destination.name,
                                "destination_type": "queue"
                                if isinstance(destination, Queue)
                                else "exchange",
                                "routing_key": binding.routing_key,
                                "arguments": binding.arguments,
                            }
                        )
            for queue in vhost.queues.values():
                if _persistable(queue):
                    queues.append(
                        {
                            "vhost": vhost.name,
                            "name": queue.name,
                            "auto_delete": queue.auto_delete,
                            "arguments": queue.arguments,
                        }
                    )
        return {
            "vhosts": sorted(broker.vhosts),
            "users": users,
            "permissions": permissions,
            "policies": [
                policy.shape()
                for vhost in broker.vhosts.values()
                for policy in vhost.policies.by_name.values()
            ],
            "exchanges": exchanges,
            "queues": queues,
            "bindings": bindings,
        }

    # -- back -----------------------------------------------------------------------------

    def restore(self) -> None:
        """Definitions, then messages. After an unclean stop every recovered message is
        marked redelivered: the lazily written delivery marks may not have reached the
        disk, and "may have been delivered before" is what the flag promises."""
        unclean = not self.clean_marker.exists()
        document = definitions.load(self.path)
        if document is not None:
            try:
                self._restore_definitions(document)
            except (AMQPError, PolicyError, LookupError, TypeError, ValueError) as exc:
                raise StartupError(
                    f"definitions file {self.path} is damaged: cannot restore {exc!r}"
                ) from None
        with _gc_paused():
            recovered = self.store.recover()
            if document is None and recovered and not self.broker.config.force_recovery:
                raise StartupError(self._lost_definitions(recovered))
            self._restore_messages(recovered, all_redelivered=unclean and document is not None)
        self.clean_marker.unlink(missing_ok=True)

    def _lost_definitions(self, recovered: dict[str, list[Recovered]]) -> str:
        count = sum(len(messages) for messages in recovered.values())
        return (
            f"definitions file {self.path} is missing, but the message store next to it "
            f"holds {count} messages of {len(recovered)} queues: restore the file from a "
            "backup, or start with --force-recovery to go on without it (those messages "
            "are then kept aside, not deleted; see README, Running the broker)"
        )

    @property
    def clean_marker(self) -> Path:
        return self.path.parent / "clean-shutdown"

    @property
    def unknown_queue_messages(self) -> Path:
        return self.path.parent / UNKNOWN_QUEUE_MESSAGES

    def mark_clean_shutdown(self) -> None:
        """Called after the store has drained on an orderly stop."""
        try:
            self.saver.save_now()
        except OSError as exc:
            log.error("cannot save definitions at shutdown: %s", exc)
            return  # no clean marker: the next start recovers as after a crash
        self.clean_marker.touch()

    def _restore_definitions(self, document: dict[str, Any]) -> None:
        broker = self.broker
        for name in document.get("vhosts", []):
            if name not in broker.vhosts:
                broker.add_vhost(name)
        if document.get("users"):
            broker.users.users.clear()
            for spec in document["users"]:
                broker.users.users[spec["name"]] = User(
                    spec["name"], spec["password_hash"], tuple(spec["tags"])
                )
            for grant in document.get("permissions", []):
                user = broker.users.users.get(grant["user"])
                if user is not None:
                    user.permissions[grant["vhost"]] = Permission(
                        grant["configure"], grant["write"], grant["read"]
                    )
        self._restore_policies(document.get("policies", []))
        for spec in document.get("exchanges", []):
            broker.vhosts[spec["vhost"]].declare_exchange(
                spec["name"],
                spec["type"],
                passive=False,
                durable=True,
                auto_delete=spec["auto_delete"],
                internal=spec["internal"],
                arguments=spec["arguments"],
            )
        for spec in document.get("queues", []):
            broker.vhosts[spec["vhost"]].declare_queue(
                spec["name"],
                None,
                passive=False,
                durable=True,
                exclusive=False,
                auto_delete=spec["auto_delete"],
                arguments=_restorable_arguments(spec, self.broker.streams),
            )
        for spec in document.get("bindings", []):
            vhost = broker.vhosts[spec["vhost"]]
            destination = (
                vhost.queues.get(spec["destination"])
                if spec["destination_type"] == "queue"
                else vhost.exchanges.get(spec["destination"])
            )
            if destination is not None and spec["source"] in vhost.exchanges:
                vhost.bind(spec["source"], destination, spec["routing_key"], spec["arguments"])

    def _restore_policies(self, specs: list[dict[str, Any]]) -> None:
        """Before the exchanges and queues, so each is made under its policy."""
        for spec in specs:
            vhost = self.broker.vhosts[spec["vhost"]]
            vhost.policies.by_name[spec["name"]] = read_policy(vhost.name, spec["name"], spec)
        for vhost in self.broker.vhosts.values():
            if vhost.policies.by_name:
                reapply(vhost)  # the predeclared exchanges

    def _restore_messages(
        self, recovered: dict[str, list[Recovered]], all_redelivered: bool
    ) -> None:
        total = 0
        unknown: list[dict[str, Any]] = []
        for key, messages in recovered.items():
            if key.startswith(EXCHANGE_KEY_PREFIX):
                self._restore_exchange_records(key, messages)
                continue
            vhost_name, _, queue_name = key.partition("\x00")
            vhost = self.broker.vhosts.get(vhost_name)
            queue = vhost.queues.get(queue_name) if vhost is not None else None
            if queue is None or not queue.durable:
                unknown.append({"vhost": vhost_name, "queue": queue_name, "messages": messages})
                continue
            queue.restore(messages, all_redelivered)
            total += len(messages)
        if total:
            log.info("recovered %d persistent messages in %d queues", total, len(recovered))
        self._keep_aside(unknown)

    def _restore_exchange_records(self, key: str, records: list[Recovered]) -> None:
        """An exchange's own records (a deduplicating exchange's ids) go back to it; those of
        an exchange that is gone are removed (deleting it removes them; a crash may not
        have let it finish)."""
        parsed = parse_exchange_key(key)
        assert parsed is not None
        _, vhost_name, name = parsed
        vhost = self.broker.vhosts.get(vhost_name)
        exchange = vhost.exchanges.get(name) if vhost is not None else None
        if exchange is not None and exchange.durable:
            exchange.restore(key, records)
            return
        for record in records:
            self.store.remove(key, record.id)

    def _keep_aside(self, unknown: list[dict[str, Any]]) -> None:
        """Messages of queues the definitions do not name stay in the store untouched (the
        definitions may be what is wrong); list them for the operator, and say so loudly."""
        listing = self.unknown_queue_messages
        if not unknown:
            listing.unlink(missing_ok=True)
            return
        for entry in unknown:
            entry["message_ids"] = [m.id for m in entry.pop("messages")]
            log.error(
                "kept %d messages of queue %r in vhost %r, which the definitions do not "
                "name: they stay in %s, listed in %s; declare the durable queue and restart "
                "to get them back (README, Running the broker)",
                len(entry["message_ids"]),
                entry["queue"],
                entry["vhost"],
                self.path.parent / "messages",
                listing,
            )
        temporary = listing.with_suffix(".tmp")
        try:
            temporary.write_text(json.dumps({"queues": unknown}, indent=1))
            temporary.replace(listing)
        except OSError as exc:
            log.error("cannot write %s: %s", listing, exc)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Recovery makes a million long-lived objects in a row: the cyclic GC would walk them
    again and again (a third of start-up time) and find nothing to free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _user_declared(exchange: Exchange) -> bool:
    return not isinstance(exchange, DefaultExchange) and not exchange.name.startswith("amq.")


def _persistable(destination: Queue | Exchange) -> bool:
    if isinstance(destination, Queue):
        return destination.durable and not destination.exclusive and not destination.deleted
    return _user_declared(destination) and destination.durable


def _restorable_arguments(spec: dict[str, Any], streams: StreamLogs | None) -> dict[str, Any]:
    """A queue's saved arguments, less an x-queue-type stream that an earlier kanin took
    and made a classic queue of (it has no stream log): that queue and its messages are
    kept, as a classic queue without the argument, so a client redeclaring it as a stream
    is told the queue is not one (406 inequivalent arg) instead of believing it is."""
    arguments: dict[str, Any] = spec["arguments"]
    if arguments.get(QUEUE_TYPE) != "stream":
        return arguments
    if streams is not None and streams.exists(spec["vhost"], spec["name"]):
        return arguments
    log.error(
        "queue %r in vhost %r was saved with x-queue-type 'stream' by an earlier kanin, "
        "which made it a classic queue: restored as a classic queue, without that argument",
        spec["name"],
        spec["vhost"],
    )
    return {key: value for key, value in arguments.items() if key != QUEUE_TYPE}
