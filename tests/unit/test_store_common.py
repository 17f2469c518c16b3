"""The stores' retry skeleton stops: at the count, and at the deadline, whichever comes first."""

from __future__ import annotations

import time

from safesend.adapters.store_common import BoundedAttempts


def test_runs_at_most_max_attempts_and_counts_them():
    attempts = BoundedAttempts(4, timeout_s=60.0, backoff_s=0.0)
    assert list(attempts) == [1, 2, 3, 4]
    assert attempts.made == 4


def test_the_first_attempt_runs_even_with_no_time_left():
    attempts = BoundedAttempts(5, timeout_s=0.0, backoff_s=0.0)
    assert list(attempts) == [1]
    assert attempts.made == 1


def test_no_retry_starts_after_the_deadline():
    attempts = BoundedAttempts(1000, timeout_s=0.05, backoff_s=0.01)
    started = time.monotonic()
    made = list(attempts)
    # backoffs 0.01, 0.02, 0.04 reach the 0.05 s deadline: a handful of attempts, not a thousand
    assert 2 <= len(made) <= 5
    assert made == list(range(1, len(made) + 1))
    assert time.monotonic() - started < 1.0


def test_backoff_doubles_before_each_retry(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    assert list(BoundedAttempts(4, timeout_s=60.0, backoff_s=0.1)) == [1, 2, 3, 4]
    assert slept == [0.1, 0.2, 0.4]
