"""backoff: full-jitter exponential delay, capped, with Retry-After as a floor."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.backoff import backoff_delay
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
retry_numbers = st.integers(min_value=1, max_value=200)
bases = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False)
caps = st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False)
retry_afters = st.floats(min_value=0.0, max_value=100_000.0, allow_nan=False)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def ceiling(n: int, base: float, cap: float) -> float:
    """The documented ceiling min(cap, base * 2^(n-1)), computed independently."""
    return min(cap, base * 2 ** (n - 1))


@PROPS
@given(n=retry_numbers, base=bases, cap=caps, retry_after=st.none() | retry_afters, seed=seeds)
def test_delay_is_between_zero_and_the_cap(n, base, cap, retry_after, seed):
    delay = backoff_delay(n, base, cap, retry_after, uniform=random.Random(seed).uniform)
    assert 0.0 <= delay <= cap


@PROPS
@given(n=retry_numbers, base=bases, cap=caps, seed=seeds)
def test_delay_without_retry_after_never_exceeds_base_times_two_to_the_n_minus_one(n, base, cap, seed):
    delay = backoff_delay(n, base, cap, uniform=random.Random(seed).uniform)
    assert delay <= base * 2.0 ** (n - 1)


@PROPS
@given(n=st.integers(min_value=1, max_value=30), base=bases, cap=caps)
def test_jitter_is_drawn_uniformly_from_zero_to_the_exponential_ceiling(n, base, cap):
    calls = []

    def recording_uniform(low, high):
        calls.append((low, high))
        return high

    delay = backoff_delay(n, base, cap, uniform=recording_uniform)
    assert calls == [(0.0, ceiling(n, base, cap))]
    assert delay == ceiling(n, base, cap)


@PROPS
@given(n=retry_numbers, base=bases, cap=caps, retry_after=retry_afters, seed=seeds)
def test_retry_after_is_a_floor_capped_by_the_cap(n, base, cap, retry_after, seed):
    delay = backoff_delay(n, base, cap, retry_after, uniform=random.Random(seed).uniform)
    assert delay >= min(retry_after, cap)


def test_retry_after_replaces_a_shorter_jitter():
    assert backoff_delay(1, 2.0, 300.0, retry_after_s=30.0, uniform=lambda a, b: a) == 30.0


def test_retry_after_beyond_the_cap_is_capped():
    assert backoff_delay(1, 2.0, 300.0, retry_after_s=3600.0, uniform=lambda a, b: a) == 300.0


def test_longer_jitter_is_kept_over_a_shorter_retry_after():
    assert backoff_delay(5, 2.0, 300.0, retry_after_s=1.0, uniform=lambda a, b: b) == 32.0


def test_ceiling_doubles_per_retry_until_the_cap():
    top = [backoff_delay(n, 2.0, 50.0, uniform=lambda a, b: b) for n in range(1, 8)]
    assert top == [2.0, 4.0, 8.0, 16.0, 32.0, 50.0, 50.0]


def test_huge_retry_numbers_do_not_overflow():
    assert backoff_delay(10_000, 2.0, 300.0, uniform=lambda a, b: b) == 300.0


@pytest.mark.parametrize("n", [0, -1, -100])
def test_retry_number_below_one_raises(n):
    with pytest.raises(ValueError):
        backoff_delay(n, 2.0, 300.0)
