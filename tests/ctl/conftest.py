"""`kanin ctl` against a real broker: a fresh embedded kanin per test with its management
API on a free port, and the ctl command (tests/ctl_run.py) pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ctl_run import Ctl
from helpers import BrokerFactory


@pytest.fixture
def kanin(broker_factory: BrokerFactory) -> Iterator[Any]:
    with broker_factory(mgmt_port=0) as embedded:
        yield embedded


@pytest.fixture
def ctl(kanin: Any) -> Ctl:
    return Ctl(kanin.mgmt_url)
