"""Fixtures the integration tests share, besides tests/conftest.py's broker, broker_factory
and unique. Plain helper functions are in tests/helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingConnection

from helpers import STREAM, Endpoint, delete_afterwards
from rawamqp import RawClient


@pytest.fixture
def conn(broker: Endpoint) -> Iterator[BlockingConnection]:
    """A pika connection with pika's default parameters, closed afterwards if still open.

    test_acks, test_acks_requeue, test_consume and test_prefetch override it with one from
    helpers.pika_connect (one attempt, 5 s timeouts).
    """
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        yield connection


@pytest.fixture
def raw(broker: Endpoint) -> Iterator[RawClient]:
    """A raw client past connection.open, with no channel open yet."""
    with RawClient.connect(broker.host, broker.port) as client:
        client.handshake()
        yield client


@pytest.fixture
def stream(broker: Endpoint, conn: BlockingConnection, unique: Any) -> Iterator[Any]:
    """declare(prefix, **arguments) -> the name of a new stream (deleted afterwards on an
    external broker)."""
    cleanup = delete_afterwards(broker, lambda channel, name: channel.queue_delete(name))
    names = next(cleanup)

    def declare(prefix: str = "st", **arguments: Any) -> str:
        name = unique(prefix)
        names.append(name)
        conn.channel().queue_declare(name, durable=True, arguments={**STREAM, **arguments})
        return name

    yield declare
    next(cleanup, None)
