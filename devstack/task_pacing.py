"""Cloud Tasks queue rate limits, as documented, for the local Cloud Tasks emulator (which has none).

Why: safesend will pace each mailbox with a Cloud Tasks queue's ``rate_limits``; the local stack must
dispatch as Cloud Tasks does, or a test of pacing proves nothing. Standard library only: it runs inside
the emulator's own venv (.venv-tasks), loaded by devstack/tasks_emulator_main.py.

The documented semantics (google.cloud.tasks.v2 RateLimits):
- "The token bucket algorithm is used to control the rate of task dispatches. Each queue has a token
  bucket that holds tokens, up to the maximum specified by max_burst_size. Each time a task is
  dispatched, a token is removed from the bucket. Tasks will be dispatched until the queue's bucket runs
  out of tokens. The bucket will be continuously refilled with new tokens based on
  max_dispatches_per_second." The bucket starts full (a burst can go out at once).
- max_burst_size is output only: "Cloud Tasks will pick the value of max_burst_size based on the value
  of max_dispatches_per_second"; its maximum is 500. The v2beta2 reference gave the rule: "if
  max_tasks_dispatched_per_second is 1, this field is 10; otherwise this field is
  max_tasks_dispatched_per_second / 5" (which gives the default queue's 100 for 500/s). Below 5/s that
  rule would give less than one token: at least 1 here.
- max_dispatches_per_second: at most 500. max_concurrent_dispatches: "After this threshold has been
  reached, Cloud Tasks stops dispatching tasks until the number of concurrent requests decreases"; at
  most 5,000. Unset fields take Cloud Tasks' defaults (500/s, 1,000 concurrent).
- "The debugging command, RunTask, will run a task even if the queue has reached its RateLimits."
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DispatchPacer", "QueueRateLimits", "derived_burst_size"]

MAX_DISPATCHES_PER_SECOND = 500.0
DEFAULT_DISPATCHES_PER_SECOND = 500.0
MAX_BURST_SIZE = 500
MAX_CONCURRENT_DISPATCHES = 5000
DEFAULT_CONCURRENT_DISPATCHES = 1000


def derived_burst_size(max_dispatches_per_second: float) -> int:
    """The max_burst_size Cloud Tasks picks for a rate (see the module docstring)."""
    if max_dispatches_per_second == 1:
        return 10
    return max(1, min(MAX_BURST_SIZE, math.floor(max_dispatches_per_second / 5)))


@dataclass(frozen=True)
class QueueRateLimits:
    """A queue's effective rate limits, burst derived."""

    max_dispatches_per_second: float
    max_burst_size: int
    max_concurrent_dispatches: int

    @classmethod
    def from_queue(cls, max_dispatches_per_second: float = 0.0, max_concurrent_dispatches: int = 0) -> QueueRateLimits:
        """From a Queue's fields, 0 meaning unset (proto3), as CreateQueue / UpdateQueue take them."""
        rate = float(max_dispatches_per_second) or DEFAULT_DISPATCHES_PER_SECOND
        concurrent = int(max_concurrent_dispatches) or DEFAULT_CONCURRENT_DISPATCHES
        if not 0.0 < rate <= MAX_DISPATCHES_PER_SECOND or math.isnan(rate):
            raise ValueError(f"max_dispatches_per_second must be within (0, {MAX_DISPATCHES_PER_SECOND:g}]")
        if not 0 < concurrent <= MAX_CONCURRENT_DISPATCHES:
            raise ValueError(f"max_concurrent_dispatches must be within [1, {MAX_CONCURRENT_DISPATCHES}]")
        return cls(rate, derived_burst_size(rate), concurrent)


class DispatchPacer:
    """One queue's token bucket and in-flight count; thread-safe. The caller dispatches only after
    ``try_acquire`` returned 0.0, and calls ``release`` when the target has answered."""

    def __init__(self, limits: QueueRateLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(limits.max_burst_size)  # full at start
        self._refilled_at = clock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def try_acquire(self) -> float | None:
        """0.0: a token was taken and a dispatch slot is held. Otherwise how long until a token is due,
        or None when the concurrency limit is reached (wait for a release)."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._refilled_at)
            self._tokens = min(
                float(self.limits.max_burst_size), self._tokens + elapsed * self.limits.max_dispatches_per_second
            )
            self._refilled_at = now
            if self._in_flight >= self.limits.max_concurrent_dispatches:
                return None
            if self._tokens < 1.0:
                return (1.0 - self._tokens) / self.limits.max_dispatches_per_second
            self._tokens -= 1.0
            self._in_flight += 1
            return 0.0

    def release(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
