"""Pacing decisions over mailbox snapshots: which mailbox of a pool takes a job, whether a job may
still move, and the honest Retry-After of a queued job. Pure: no clock, no I/O.

Why these rules (issue 24):
- Spread evenly: the mailbox with the smallest used share of its day (then of its minute, then the
  fewest sends) takes the next job, so a pool's mailboxes fill at the same pace and each one's
  daily limit is reached last. Exhausted mailboxes are skipped while another one can send.
- A job moves only while none of its attempts may have landed (Job.maybe_landed == 0): once one may
  have, the mailbox that may hold it is the one every check must search.
- Retry-After tells a caller when its queued job should be sent: after the jobs ahead of it at the
  mailbox's admitted rate, and, past the day's allowance, after the rolling day frees a slot for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from .mailbox_budget import DAY_S, SEND_UNITS, MailboxSnapshot
from .model import Job

EXHAUSTED = "exhausted"
MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 7 * 24 * 3600  # a bound on a guess, never a promise
FAR_FUTURE = datetime.max.replace(tzinfo=UTC)


def may_move(job: Job) -> bool:
    """True while no attempt of `job` may have reached Gmail: then another mailbox may send it."""
    return job.maybe_landed == 0


def bind(history: Sequence[str], chosen: str) -> list[str]:
    """A job's mailboxes after binding it to `chosen`: the current one last, every earlier one kept
    (the move is recorded), so a job ever in doubt is searched in each mailbox it was bound to."""
    if history and history[-1] == chosen:
        return list(history)
    return [*(m for m in history if m != chosen), chosen]


def _load(snapshot: MailboxSnapshot) -> tuple[float, float, int, int]:
    day = snapshot.day_messages / snapshot.day_messages_limit if snapshot.day_messages_limit else 0.0
    minute = snapshot.minute_used / snapshot.minute_limit if snapshot.minute_limit else 0.0
    return (day, minute, snapshot.day_messages, snapshot.minute_used)


def choose_mailbox(candidates: Sequence[MailboxSnapshot], bound: str | None = None, movable: bool = True) -> str:
    """The mailbox (id) that should carry a job, from the snapshots of its pool's candidates (in the
    pool's order, which breaks ties). A bound job that may not move stays; one that may, stays
    unless its mailbox is exhausted and another is not. If every candidate is exhausted, the one that
    frees first: the job waits there."""
    if not candidates:
        raise ValueError("choose_mailbox: no candidate mailbox")
    by_id = {s.mailbox: s for s in candidates}
    if bound is not None and (not movable or (bound in by_id and by_id[bound].state != EXHAUSTED)):
        return bound
    open_ones = [s for s in candidates if s.state != EXHAUSTED]
    if open_ones:
        return min(enumerate(open_ones), key=lambda pair: (_load(pair[1]), pair[0]))[1].mailbox
    if bound is not None and bound in by_id:
        return bound

    def frees_at(pair: tuple[int, MailboxSnapshot]) -> tuple[datetime, int]:
        snapshot = pair[1]
        return (snapshot.next_free_at or snapshot.exhausted_until or FAR_FUTURE), pair[0]

    return min(enumerate(candidates), key=frees_at)[1].mailbox


def retry_after_s(snapshot: MailboxSnapshot, ahead: int, now: datetime, units_per_job: int = SEND_UNITS) -> int:
    """Seconds until a queued job with `ahead` jobs before it at this mailbox should be sent: whole
    seconds, at least 1 (an HTTP Retry-After), bounded. `units_per_job` includes the reads a send
    costs (searches), so the estimate follows the admitted rate of everything the jobs spend."""
    interval = units_per_job * 60.0 / snapshot.minute_limit if snapshot.minute_limit else 0.0
    start = max((snapshot.next_free_at - now).total_seconds(), 0.0) if snapshot.next_free_at else 0.0
    estimate = start + ahead * interval
    if snapshot.exhausted_until is not None:
        estimate = max(estimate, (snapshot.exhausted_until - now).total_seconds() + ahead * interval)
    allowance = snapshot.day_messages_limit
    if allowance is not None:
        need = ahead + 1 - max(allowance - snapshot.day_messages, 0)  # day slots that must free first
        if need > 0:
            estimate = max(estimate, _day_wait(snapshot, need, allowance, now, interval))
    return int(min(max(math.ceil(estimate), MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S))


def _day_wait(snapshot: MailboxSnapshot, need: int, allowance: int, now: datetime, interval: float) -> float:
    """When the rolling day has freed `need` slots, plus the pacing of the jobs freed with it."""
    freed = 0
    for at, count in snapshot.day_frees:
        if freed + count >= need:
            return max((at - now).total_seconds(), 0.0) + (need - freed - 1) * interval
        freed += count
    # Beyond what today's sends free: a day per further allowance (the window refills at most that fast).
    last = snapshot.day_frees[-1][0] if snapshot.day_frees else now + timedelta(seconds=DAY_S)
    days = math.ceil((need - freed) / allowance)
    return max((last - now).total_seconds(), 0.0) + DAY_S * days
