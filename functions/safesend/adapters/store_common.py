"""What the job stores share: the retry skeleton and the rule for a record that is not a job.

The retry skeleton is bounded in count and in time, with the project's one jittered backoff
(safesend.core.backoff): a store's read is tried again after a lost connection, and its conditional write
is re-sent until its fate is known; both must stop, so neither loops past `max_attempts` nor starts
an attempt after its deadline. One deadline covers a whole store call: each attempt, and the
re-read that settles an ambiguous write, gets only the time left in it, so a write and its settling
re-read stay within the store's timeout instead of each taking it anew. What an attempt's failure
means differs per store and stays in each adapter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..core.backoff import backoff_delay
from ..core.model import Job
from ..logs import log

R = TypeVar("R")  # a store's raw record: a snapshot, a row, a dict

BACKOFF_CAP_S = 1.0  # no store retry waits longer: the request's budget is seconds


class BoundedAttempts:
    """Iterate to run attempts: the first at once; before each retry a full-jitter backoff
    (base `backoff_s`, doubled per retry, at most BACKOFF_CAP_S); none after `max_attempts`, and none
    that would start after the deadline: `deadline` (time.monotonic()) if given, the caller's, else
    `timeout_s` from now. `made` counts the attempts started, for the final error."""

    def __init__(
        self,
        max_attempts: int,
        timeout_s: float,
        backoff_s: float,
        deadline: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.deadline = time.monotonic() + timeout_s if deadline is None else deadline
        self.made = 0
        self._sleep = sleep

    def time_left(self, reserve_s: float = 0.0, floor_s: float = 0.001) -> float:
        """Seconds left before the deadline less `reserve_s` (kept for what must follow, e.g. the
        re-read that settles a write), at least `floor_s` so that a timeout is never zero."""
        return max(self.deadline - time.monotonic() - reserve_s, floor_s)

    def __iter__(self) -> Iterator[int]:
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                delay = backoff_delay(attempt - 1, self.backoff_s, BACKOFF_CAP_S)
                if time.monotonic() + delay >= self.deadline:
                    return
                self._sleep(delay)
            self.made = attempt
            yield attempt


def readable_job(decode: Callable[[R], Job], record: R, job_id: str) -> Job | None:
    """The decoded job, or None (logged loudly each time) if its stored record cannot be read as
    one: a damaged record must not stop the sweeper from handling the jobs due after it."""
    try:
        return decode(record)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        log(
            logging.ERROR,
            "stored job cannot be read as a job; the sweeper skips it",
            job_id=job_id,
            error_type=type(exc).__name__,
            error=str(exc)[:300],
        )
        return None
