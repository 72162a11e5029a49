"""examples/orders, run small on the suite's Spark session and a real kanin: the audit must
find exactly the faults the order service put in, and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.kanin_only, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "orders"


def test_the_order_pipeline_audit_finds_what_went_wrong_and_nothing_else(
    spark: SparkSession, broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from orders.order_service import OFFLINE_ORDERS, PRODUCERS
    from orders.pipeline import Settings, run_pipeline

    orders = 30
    # Generous bounds for "late": a busy machine must not make an on-time message late.
    settings = Settings(
        orders=orders,
        rate=20.0,
        reminder_delay_s=1.0,
        late_after_s=300.0,
        reminder_late_after_s=60.0,
    )
    outcome = run_pipeline(spark, broker.url, tmp_path, settings)

    injected = outcome.injected
    assert injected.double_sent == {"web-shop": 3}
    assert injected.never_sent == {"pos-terminal": 2}
    assert injected.uploaded_late == {"mobile-app": OFFLINE_ORDERS}
    report = {row["producer"]: row for row in outcome.audit}
    assert set(report) == set(PRODUCERS)  # no "(not sent)" row: nothing came from nowhere
    for producer in PRODUCERS:
        row = report[producer]
        late = injected.uploaded_late.get(producer, 0)
        lost = injected.never_sent.get(producer, 0)
        assert row["sent"] == orders + late
        assert row["lost"] == lost
        assert row["processed"] == orders + late - lost
        assert row["duplicated"] == injected.double_sent.get(producer, 0)
        assert row["late"] == late
        assert (row["reminders_lost"], row["reminders_duplicated"], row["reminders_late"]) == (
            0,
            0,
            0,
        )
    processed = sum(row["processed"] for row in report.values())
    assert sum(row["orders"] for row in outcome.revenue) == processed  # each order once
