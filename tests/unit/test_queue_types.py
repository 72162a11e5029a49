"""The queue-type seam: the classic queue fills the interface, the factory picks it, and
no module the queue types import (at run time) imports them back."""

from __future__ import annotations

import ast
from pathlib import Path

from kanin.core import queues
from kanin.core.memory import MemoryMonitor
from kanin.core.queue_args import parse_queue_args
from kanin.core.queues.base import Queue
from kanin.testing.clock import FakeScheduler

CORE = Path(__file__).resolve().parents[2] / "src" / "kanin" / "core"


def interface_members() -> dict[str, str | None]:
    """Queue's abstract members and their docstrings, read from base.py's source: the
    compiled build's classes keep neither __abstractmethods__ nor docstrings."""
    tree = ast.parse((CORE / "queues" / "base.py").read_text())
    (queue,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Queue")
    return {
        member.name: ast.get_docstring(member)
        for member in queue.body
        if isinstance(member, ast.FunctionDef)
        and any(
            ast.unparse(d) in ("abstractmethod", "abc.abstractmethod")
            for d in member.decorator_list
        )
    }


def test_every_interface_member_says_who_calls_it() -> None:
    abstract = interface_members()
    assert len(abstract) >= 15
    for name, doc in abstract.items():
        assert doc and doc.strip(), name


def test_the_classic_queue_implements_every_interface_member() -> None:
    assert issubclass(queues.ClassicQueue, Queue)
    assert getattr(queues.ClassicQueue, "__abstractmethods__", frozenset()) == frozenset()
    for name in interface_members():
        assert hasattr(Queue, name), name
        assert getattr(queues.ClassicQueue, name) is not getattr(Queue, name), name


def test_the_factory_makes_classic_queues_by_default_and_by_name() -> None:
    for arguments in ({}, {"x-queue-type": "classic"}):
        queue = queues.create(
            "q",
            "/",
            FakeScheduler(),
            MemoryMonitor(2**40),
            durable=False,
            exclusive_owner=None,
            auto_delete=False,
            arguments=arguments,
            args=parse_queue_args(arguments, "q", "/"),
            store=None,
            memory_budget_bytes=0,
        )
        assert type(queue) is queues.ClassicQueue and queue.message_count == 0


def test_isinstance_answers_for_each_type_whatever_was_asked_before() -> None:
    """The management API and dead-lettering branch on isinstance: an answer about one type
    must not leak into the next question about another (it did in the compiled build, when
    Queue was an ABC: the types shared one isinstance cache)."""
    clock, memory = FakeScheduler(), MemoryMonitor(2**40)
    quorum = queues.QuorumQueue("q", "/", clock, memory)
    assert not isinstance(quorum, queues.StreamQueue)
    assert isinstance(quorum, queues.ClassicQueue)
    other = queues.QuorumQueue("r", "/", clock, memory)
    assert isinstance(other, queues.ClassicQueue)
    assert not isinstance(other, queues.StreamQueue)
    assert not isinstance(queues.ClassicQueue("c", "/", clock, memory), queues.QuorumQueue)


def _runtime_imports(path: Path) -> set[str]:
    """kanin.core modules imported when `path` is imported (not under TYPE_CHECKING)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in tree.body:  # module level only: imports inside functions run later
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.update(name for name in names if name.startswith("kanin.core"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kanin.core"))
    return found


def _module_name(path: Path) -> str:
    parts = ("kanin", *path.relative_to(CORE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_runtime_import_cycle_runs_through_the_queue_types() -> None:
    modules = {_module_name(path): path for path in CORE.rglob("*.py")}
    graph = {
        name: {target for target in _runtime_imports(path) if target in modules and target != name}
        for name, path in modules.items()
    }
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            cycle = [*path, target]
            through_queues = any(m.startswith("kanin.core.queues") for m in cycle)
            assert not (state.get(target) == 1 and through_queues), " -> ".join(cycle)
            if target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(modules):
        if name not in state:
            visit(name, [name])
    assert "kanin.core.queues.classic" in graph["kanin.core.queues"]
