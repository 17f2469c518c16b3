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
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from ..core.backoff import backoff_delay
from ..core.model import Job
from ..logs import log

R = TypeVar("R")  # a store's raw record: a snapshot, a row, a dict
K = TypeVar("K")  # a store's keyset position: (order value, id) as its query takes it

# Pages read past unreadable records in one query call, beyond the first: a damaged record is never
# advanced, so it stays at the head of its query for good (see readable_page).
MAX_PAGES_PAST_UNREADABLE = 20

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


def readable_page(
    fetch: Callable[[K | None, int], Sequence[R]],
    decode: Callable[[R], Job],
    position: Callable[[R], tuple[K, str]],
    limit: int,
    start_after: K | None = None,
) -> list[Job]:
    """Up to `limit` readable jobs of a keyset-ordered query, the unreadable records left out (logged).

    Why read on: a damaged record is never advanced, so it keeps its place at the head of the query,
    and a sweeper that pages by the last job it got takes an empty or short page for the end: `limit`
    damaged records would hide every due job behind them for good. So while records were left out,
    the next raw page is read after the last record seen (readable or not), until `limit` jobs, the
    end of the query, or MAX_PAGES_PAST_UNREADABLE more pages. `fetch(after, n)` returns up to `n`
    raw records after the position `after` (None: from the start); `position(record)` is a record's
    position and id. No unreadable record is left after the last job returned unless the query ended
    (or the bound was reached), so the caller's cursor from that job skips only what was read here."""
    jobs: list[Job] = []
    after = start_after
    for _ in range(1 + MAX_PAGES_PAST_UNREADABLE):
        wanted = limit - len(jobs)
        if wanted <= 0:
            break
        records = fetch(after, wanted)
        for record in records:
            after, job_id = position(record)
            job = readable_job(decode, record, job_id)
            if job is not None:
                jobs.append(job)
        if len(records) < wanted:
            break
    return jobs
