"""The message-rate history (mgmt/rates.py) on its own: rates between samples, samples
over a window as RabbitMQ lays them out, and what a request may ask for."""

from __future__ import annotations

import pytest

from kanin.mgmt.errors import ApiError
from kanin.mgmt.rates import History, Window, window_from

T0 = 1_800_000_000_000  # a sample time on a 5-second boundary, in milliseconds


def test_the_rate_is_the_change_per_second_between_the_last_two_samples() -> None:
    history = History(keep=5)
    assert history.rate(0) == 0.0  # nothing sampled yet
    history.add(T0, (100,))
    assert history.rate(0) == 0.0  # one sample: no change measured yet
    history.add(T0 + 5000, (350,))
    assert history.rate(0) == 50.0
    assert history.details(0, None) == {"rate": 50.0}


def test_a_sample_at_the_same_instant_or_earlier_is_not_kept() -> None:
    history = History(keep=5)
    history.add(T0, (1,))
    history.add(T0, (7,))
    history.add(T0 - 5000, (9,))
    assert list(history.values) == [(1,)]


def test_the_history_is_bounded() -> None:
    history = History(keep=3)
    for step in range(10):
        history.add(T0 + step * 5000, (step,))
    assert list(history.values) == [(7,), (8,), (9,)]


def test_samples_over_a_window_step_back_from_now_newest_first() -> None:
    history = History(keep=20)
    for step, total in enumerate((0, 10, 30, 60)):
        history.add(T0 + step * 5000, (total,))
    window = Window(age_s=20, incr_s=5, now_ms=T0 + 15000 + 1234)
    shape = history.details(0, window)
    assert shape["samples"] == [
        {"sample": 60, "timestamp": T0 + 15000},
        {"sample": 30, "timestamp": T0 + 10000},
        {"sample": 10, "timestamp": T0 + 5000},
        {"sample": 0, "timestamp": T0},
        {"sample": 0, "timestamp": T0 - 5000},  # before the first sample: the first's value
    ]
    assert shape["avg_rate"] == 60 / 20
    assert shape["avg"] == (60 + 30 + 10) / 5
    assert shape["rate"] == 6.0


def test_a_window_with_a_coarser_step_takes_the_sample_at_or_before_each_point() -> None:
    history = History(keep=20)
    for step in range(7):
        history.add(T0 + step * 5000, (step * 5,))
    shape = history.details(0, Window(age_s=20, incr_s=10, now_ms=T0 + 30000))
    assert [s["sample"] for s in shape["samples"]] == [30, 20, 10]


def test_a_window_is_asked_for_with_both_age_and_incr() -> None:
    assert window_from({}, "msg_rates") is None
    assert window_from({"msg_rates_age": "60"}, "msg_rates") is None
    window = window_from({"lengths_age": "60", "lengths_incr": "5"}, "lengths")
    assert window is not None and (window.age_s, window.incr_s) == (60, 5)


@pytest.mark.parametrize(
    "age, incr",
    [("sixty", "5"), ("60", "0"), ("-5", "5"), ("60", "-1"), ("100000", "1")],
)
def test_a_window_that_makes_no_sense_or_is_too_long_is_refused(age: str, incr: str) -> None:
    with pytest.raises(ApiError) as refused:
        window_from({"msg_rates_age": age, "msg_rates_incr": incr}, "msg_rates")
    assert refused.value.status == 400
