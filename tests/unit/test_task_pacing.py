"""task_pacing: Cloud Tasks' documented rate limits (token bucket, derived burst, concurrency cap)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devstack.task_pacing import DispatchPacer, QueueRateLimits, derived_burst_size
from tests.props import examples


@pytest.mark.parametrize(
    "rate,burst",
    [(1, 10), (500, 100), (100, 20), (10, 2), (5, 1), (2, 1), (0.5, 1), (6.9, 1)],
)
def test_burst_is_derived_from_the_rate_as_documented(rate, burst):
    assert derived_burst_size(rate) == burst


def test_unset_fields_take_cloud_tasks_defaults_and_bad_values_are_refused():
    assert QueueRateLimits.from_queue() == QueueRateLimits(500.0, 100, 1000)
    assert QueueRateLimits.from_queue(2.0) == QueueRateLimits(2.0, 1, 1000)
    assert QueueRateLimits.from_queue(0, 3) == QueueRateLimits(500.0, 100, 3)
    for rate, concurrent in ((501, 0), (-1, 0), (float("nan"), 0), (1, 5001), (1, -2)):
        with pytest.raises(ValueError):
            QueueRateLimits.from_queue(rate, concurrent)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_bucket_lets_a_burst_out_then_refills_at_the_rate():
    clock = Clock()
    pacer = DispatchPacer(QueueRateLimits.from_queue(1.0), clock)  # burst 10
    assert [pacer.try_acquire() for _ in range(10)] == [0.0] * 10
    wait = pacer.try_acquire()
    assert wait == pytest.approx(1.0)
    clock.now += 0.5
    assert pacer.try_acquire() == pytest.approx(0.5)
    clock.now += 0.5
    assert pacer.try_acquire() == 0.0
    clock.now += 3600  # an idle queue refills up to the burst, never beyond
    assert [pacer.try_acquire() for _ in range(11)].count(0.0) == 10


def test_the_concurrency_limit_holds_dispatches_until_one_is_released():
    pacer = DispatchPacer(QueueRateLimits.from_queue(500.0, 2), Clock())
    assert pacer.try_acquire() == 0.0 and pacer.try_acquire() == 0.0
    assert pacer.try_acquire() is None and pacer.in_flight == 2
    pacer.release()
    assert pacer.try_acquire() == 0.0


@settings(max_examples=examples(200), deadline=None)
@given(
    rate=st.sampled_from([1.0, 2.0, 5.0, 12.5, 100.0]),
    steps=st.lists(st.floats(0.0, 2.0, allow_nan=False), min_size=1, max_size=80),
)
def test_no_interleaving_dispatches_more_than_burst_plus_rate_times_time(rate, steps):
    clock = Clock()
    pacer = DispatchPacer(QueueRateLimits.from_queue(rate), clock)
    start, granted = clock.now, 0
    for step in steps:
        clock.now += step
        while pacer.try_acquire() == 0.0:
            granted += 1
            pacer.release()
        assert granted <= pacer.limits.max_burst_size + rate * (clock.now - start) + 1e-9
