"""Fixtures the integration tests share, besides tests/conftest.py's broker, broker_factory
and unique. Plain helper functions are in tests/helpers.py."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest
from pika.adapters.blocking_connection import BlockingConnection

from helpers import Endpoint
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
