"""Shared fixtures: a real kanin broker per test on 127.0.0.1, port 0.

Set KANIN_TEST_AMQP_URL (e.g. amqp://guest:guest@127.0.0.1:5672/%2F) to run the
same tests against another broker, such as RabbitMQ, to check that kanin behaves
alike; tests marked kanin_only are skipped then. The suite never needs RabbitMQ.
"""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

from kanin.config import BrokerConfig
from kanin.store import segments

if TYPE_CHECKING:
    from kanin.testing.embedded import EmbeddedBroker

EXTERNAL_URL = os.environ.get("KANIN_TEST_AMQP_URL")


@dataclass
class BrokerEndpoint:
    host: str
    port: int
    url: str
    embedded: EmbeddedBroker | None  # None when the suite runs against an external broker


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under tests/test_compiled.py the run must import the compiled build, not fall back
    to the pure package unnoticed (a stale or missing tree on PYTHONPATH)."""
    if os.environ.get("KANIN_EXPECT_COMPILED"):
        from kanin.native import build_name

        if build_name() != "compiled with mypyc":
            raise pytest.UsageError(f"KANIN_EXPECT_COMPILED is set but kanin is {build_name()}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the compiled build's run now if it is among the tests (tests/compiled_run.py):
    it then overlaps the rest of this run instead of coming after it."""
    if session.config.option.collectonly or os.environ.get("KANIN_EXPECT_COMPILED"):
        return
    import compiled_run

    if any(item.nodeid == compiled_run.TEST_ID for item in session.items):
        compiled_run.start_once()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run that ends early (-x, Ctrl-C) does not leave the compiled run going."""
    import compiled_run

    compiled_run.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not EXTERNAL_URL:
        return
    skip = pytest.mark.skip(reason="kanin-only test; suite runs against an external broker")
    for item in items:
        if "kanin_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def broker() -> Iterator[BrokerEndpoint]:
    """A broker to talk to: a fresh embedded kanin, or the external one."""
    if EXTERNAL_URL:
        parsed = urlparse(EXTERNAL_URL)
        yield BrokerEndpoint(
            parsed.hostname or "127.0.0.1", parsed.port or 5672, EXTERNAL_URL, None
        )
        return
    from kanin.testing.embedded import running_broker

    with running_broker() as embedded:
        yield BrokerEndpoint(embedded.host, embedded.port, embedded.url, embedded)


@pytest.fixture
def broker_factory() -> Callable[..., AbstractContextManager[EmbeddedBroker]]:
    """A kanin broker with custom configuration: `with broker_factory(heartbeat_s=1) as b:`."""

    from kanin.testing.embedded import running_broker

    def factory(**overrides: Any) -> AbstractContextManager[EmbeddedBroker]:
        return running_broker(BrokerConfig(**overrides))

    return factory


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names unique to this test, so tests can share one external broker."""

    token = uuid.uuid4().hex[:10]

    def make(prefix: str) -> str:
        return f"test.{prefix}.{token}"

    return make


@pytest.fixture(params=["read", "mapped"])
def segment_reading(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A recovery test twice: segments read whole (small ones), and mapped (big ones, here
    every one), so damage, torn tails and set-aside files behave the same both ways."""
    kinds: list[type] = []
    read = segments._read_for_recovery

    def spied(path: Path) -> bytes | mmap.mmap:
        data = read(path)
        kinds.append(type(data))
        return data

    monkeypatch.setattr(segments, "_read_for_recovery", spied)
    if request.param == "mapped":
        monkeypatch.setattr(segments, "MAP_FOR_RECOVERY_BYTES", 0)
    yield
    if request.param == "mapped" and kinds:
        assert mmap.mmap in kinds  # the mapped path really ran
    assert request.param == "mapped" or mmap.mmap not in kinds
