"""What the job stores share: the retry skeleton and the rule for a record that is not a job.

The retry skeleton is bounded in count and in time, with exponential backoff: a store's read is
tried again after a lost connection, and its conditional write is re-sent until its fate is
known; both must stop, so neither loops past `max_attempts` nor starts an attempt after its
deadline. What an attempt's failure means differs per store and stays in each adapter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..logs import log
from ..model import Job

R = TypeVar("R")  # a store's raw record: a snapshot, a row, a dict


class BoundedAttempts:
    """Iterate to run attempts: the first at once; before each retry a backoff of `backoff_s`
    doubled per retry; none after `max_attempts`, and none started once `timeout_s` has passed
    since the iteration began. `made` counts the attempts started, for the final error."""

    def __init__(self, max_attempts: int, timeout_s: float, backoff_s: float):
        self.max_attempts = max_attempts
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.made = 0

    def __iter__(self) -> Iterator[int]:
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                if time.monotonic() >= deadline:
                    return
                time.sleep(self.backoff_s * 2 ** (attempt - 2))
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
