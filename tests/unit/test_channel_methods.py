"""The channel's method table (core/channel_methods.py): what it covers, what happens to a
method outside it, and that the channel, its table and its handlers import without a cycle.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.base import Frame

from core_harness import Core
from kanin.amqp import constants as C
from kanin.amqp.errors import ConnectionError_
from kanin.core.channel_methods import HANDLERS

# The classes of methods that travel on channels other than 0.
CHANNEL_CLASSES = (
    commands.Channel,
    commands.Exchange,
    commands.Queue,
    commands.Basic,
    commands.Tx,
    commands.Confirm,
)
# Only the server sends these: the replies to a client's requests, and deliveries.
SERVER_ONLY = {
    commands.Basic.Deliver,
    commands.Basic.Return,
    commands.Basic.GetOk,
    commands.Basic.GetEmpty,
}
# Client methods something takes before the channel looks at its table: the assembler
# takes basic.publish, and the connection's channel table opens and closes channels.
TAKEN_BEFORE_THE_TABLE = {
    commands.Basic.Publish,
    commands.Channel.Open,
    commands.Channel.Close,
    commands.Channel.CloseOk,
}
# channel.flow-ok answers a flow the server sent, and kanin never sends one.
NEVER_EXPECTED = {commands.Channel.FlowOk}


def channel_methods() -> Iterator[type]:
    for amqp_class in CHANNEL_CLASSES:
        for value in vars(amqp_class).values():
            if inspect.isclass(value) and issubclass(value, Frame):
                yield value


def test_the_table_covers_every_method_a_client_may_send_on_a_channel() -> None:
    client_methods = {
        method
        for method in channel_methods()
        if method not in SERVER_ONLY
        and (not method.__name__.endswith("Ok") or method is commands.Channel.CloseOk)
    }
    expected = client_methods - TAKEN_BEFORE_THE_TABLE - NEVER_EXPECTED
    assert set(HANDLERS) == expected


def test_a_method_outside_the_table_closes_the_connection_with_503() -> None:
    core = Core()
    channel = core.channel()
    deliver = commands.Basic.Deliver(consumer_tag="x", delivery_tag=1, exchange="", routing_key="q")
    with pytest.raises(ConnectionError_) as info:
        channel.handle_method(deliver)
    error = info.value
    assert (error.reply_code, error.class_id, error.method_id) == (C.COMMAND_INVALID, 60, 60)
    assert error.reply_text == "COMMAND_INVALID - unimplemented method"


def test_each_method_reaches_its_handler() -> None:
    core = Core()
    channel = core.channel()
    channel.handle_method(commands.Queue.Declare(queue="q", nowait=True))
    assert channel.last_queue_name == "q"
    channel.handle_method(commands.Basic.Qos(prefetch_count=3, global_=True))
    assert channel.global_prefetch == 3
    channel.handle_method(commands.Confirm.Select(nowait=True))
    assert channel.confirms is not None


# -- no import cycle -------------------------------------------------------------------

CORE = Path(__file__).resolve().parents[2] / "src" / "kanin" / "core"


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(body: list[ast.stmt]) -> Iterator[str]:
    """Module-level imports, but not those under `if TYPE_CHECKING:` (never run)."""
    for node in body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            yield from runtime_imports(node.orelse)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.If | ast.Try):
            yield from runtime_imports(node.body)
            yield from runtime_imports(node.orelse)


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in CORE.rglob("*.py")}
    return {
        name: {imported for imported in runtime_imports(ast.parse(path.read_text()).body)}
        & set(paths) - {name}
        for name, path in paths.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, as the modules along it, or [] if there is none."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        for imported in sorted(graph[name]):
            cycle = visit(imported, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return []

    for name in sorted(graph):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return []


def test_the_core_imports_without_a_cycle() -> None:
    graph = import_graph()
    assert "kanin.core.channel_methods" in graph["kanin.core.channel"]
    assert "kanin.core.handlers_basic" in graph["kanin.core.channel_methods"]
    assert find_cycle(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
