"""Sweep: page through due jobs by (due time, id), in every swept state and the notice outbox,
advance each in isolation within the time budget, and report what the alerts read."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..core.errors import (
    IndexMissingError,
    MailboxUnavailableError,
    PublishError,
    StoreUnavailableError,
)
from ..core.model import Job
from ..core.ports import Cursor
from ..core.signals import OVERDUE_AFTER_S, STORE_UNAVAILABLE, emit
from ..core.states import SWEPT_STATES, State
from ..logs import log
from .jobs import MAX_SWEEP_BATCHES
from .reconcile import Reconciler

Query = Callable[[Cursor | None], Sequence[Job]]  # one page of due jobs after a cursor
DueOf = Callable[[Job], datetime | None]  # the due time a query orders by
IDLE_ACTIONS = frozenset({"nothing_to_do", "not_due", "deferred", "error", "conflict"})


@dataclass
class SweepReport:
    """What one sweep did, and what the alerts read from its `sweep_completed` line."""

    examined: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    stopped_early: bool = False
    overdue: int = 0  # due for more than signals.OVERDUE_AFTER_S when this sweep found them
    oldest_overdue_s: float = 0.0  # the longest any found job had been due
    oldest_review_s: float | None = None  # age of the oldest open review item; None: none open

    def count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1

    def saw_due(self, due: datetime | None, now: datetime) -> None:
        if due is None:
            return
        late_s = (now - due).total_seconds()
        self.oldest_overdue_s = max(self.oldest_overdue_s, late_s)
        if late_s > OVERDUE_AFTER_S:
            self.overdue += 1

    @property
    def advanced(self) -> int:
        return sum(n for action, n in self.actions.items() if action not in IDLE_ACTIONS)


def unswept(what: str, exc: StoreUnavailableError) -> None:
    """A query the sweep could not make: its jobs stay unswept and unseen by jobs_overdue (the sweep
    still completes), so the store_unavailable alert must hear of it, every time."""
    emit(
        STORE_UNAVAILABLE,
        logging.ERROR,
        "sweep could not query the store",
        where="sweep_query",
        query=what,
        error=str(exc),
    )


class Sweeper(Reconciler):
    """The sweep use case: find stale or lost jobs and advance them."""

    def sweep(self, batch: int = 50, budget_s: float = 90.0) -> SweepReport:
        """Advance every due job, state by state, in bounded batches within a time budget.

        Each state and the notice outbox first get a fair share of what is left of the budget, then
        the time still left resumes the unfinished ones where they stopped: a backlog in one state
        (thousands of due jobs after an outage) never starves the states swept after it.
        One bad job never stalls the others: whatever it raises is logged and counted, and the
        sweep goes on. Raises StoreUnavailableError only when no state could be queried at all.
        """
        report = SweepReport()
        deadline = self.monotonic() + budget_s
        sources = self._sources(batch)
        cursors: dict[str, Cursor | None] = {}
        unqueried: list[StoreUnavailableError] = []
        for i, (name, query, due_of) in enumerate(sources):
            share = (deadline - self.monotonic()) / (len(sources) - i)
            if share <= 0:  # the budget is spent: not swept this time (stopped_early says so)
                cursors[name] = None
                continue
            try:
                share_ends = min(deadline, self.monotonic() + share)
                done, cursor = self._sweep_pages(query, due_of, (share_ends, deadline), report)
            except IndexMissingError:
                raise  # no state can be queried reliably: loud, at once
            except StoreUnavailableError as exc:
                report.errors += 1
                unqueried.append(exc)
                unswept(name, exc)
                continue
            if not done:
                cursors[name] = cursor
        if len(unqueried) == len(sources):
            raise unqueried[-1]
        for name, query, due_of in sources:
            if name in cursors and self.monotonic() < deadline:
                try:
                    if self._sweep_pages(query, due_of, (deadline, deadline), report, cursors[name])[0]:
                        del cursors[name]
                except IndexMissingError:
                    raise
                except StoreUnavailableError as exc:
                    report.errors += 1
                    unswept(name, exc)
        report.stopped_early = bool(cursors)
        return self._finish_sweep(report)

    def _sources(self, batch: int) -> list[tuple[str, Query, DueOf]]:
        """Where due jobs are found, in sweep order: every swept state, then the notice outbox."""
        sources: list[tuple[str, Query, DueOf]] = [
            (
                f"state {state.value}",
                functools.partial(self._find_due, state, batch),
                lambda job: job.next_check_at,
            )
            for state in SWEPT_STATES
        ]
        sources.append(("due notices", self._find_notices(batch), lambda job: job.notice_due_at))
        return sources

    def _find_due(self, state: State, batch: int, cursor: Cursor | None) -> Sequence[Job]:
        return self.store.find_due(state, self.clock(), batch, start_after=cursor)

    def _find_notices(self, batch: int) -> Query:
        """Notices whose task was lost, page after page past any this instance cannot act on. Also
        without a notifier: the reviewers' email goes through safesend's own send path (and other
        kinds are given up)."""
        return lambda cursor: self.store.find_notices_due(self.clock(), batch, start_after=cursor)

    def _finish_sweep(self, report: SweepReport) -> SweepReport:
        """The age of the oldest open review item (one read), then the sweep's record for /health."""
        try:
            self.lag.tell_untold()  # an index-lag raise nobody confirmed telling (lag_watch)
        except StoreUnavailableError as exc:
            report.errors += 1
            log(logging.WARNING, "sweep could not read the index lag records", error=str(exc))
        try:
            oldest = self.store.find_open_reviews(1)
            if oldest:
                report.oldest_review_s = (self.clock() - oldest[0].updated_at).total_seconds()
        except StoreUnavailableError as exc:  # the record below still says the sweep ran
            report.errors += 1
            log(logging.WARNING, "sweep could not read the oldest review item", error=str(exc))
        try:
            self.store.record_sweep(
                {
                    "at": self.clock(),
                    "due": report.examined,
                    "advanced": report.advanced,
                    "overdue": report.overdue,
                    "oldest_overdue_s": round(report.oldest_overdue_s, 1),
                    "oldest_review_s": report.oldest_review_s,
                    "errors": report.errors,
                    "stopped_early": report.stopped_early,
                }
            )
        except StoreUnavailableError as exc:  # the sweep's own line still says it ran
            log(logging.WARNING, "sweep record not stored", error=str(exc))
        return report

    def _sweep_pages(
        self,
        query: Query,
        due_of: DueOf,
        deadlines: tuple[float, float],
        report: SweepReport,
        cursor: Cursor | None = None,
    ) -> tuple[bool, Cursor | None]:
        """Keyset pagination on (due time, id): each page starts after the last job of the one before,
        so any number of due jobs that cannot be advanced never hide the ones behind them. The due
        time is the one the query read (the advance may move it). (True, _) when no due job is left,
        else (False, the cursor to resume from): the deadline came, or the page limit.
        `deadlines`: (no job starts after it, the sweep's own end: no quick retry starts after it)."""
        stop, end = deadlines
        for _ in range(MAX_SWEEP_BATCHES):
            page = query(cursor)
            for job in page:
                if self.monotonic() >= stop:
                    return False, cursor
                due = due_of(job)
                report.examined += 1
                report.saw_due(due, self.clock())
                report.count(self._advance_isolated(job, report, end))
                if due is not None:
                    cursor = (due, job.id)
            if not page or due_of(page[-1]) is None:
                return True, cursor  # a short page may only mean unreadable records were left out: ask once more
        return False, cursor

    def _advance_isolated(self, job: Job, report: SweepReport, deadline: float) -> str:
        try:
            _, action = self.advance(job.id, known=job, until=deadline)
        except (MailboxUnavailableError, StoreUnavailableError, PublishError) as exc:
            report.errors += 1
            log(logging.WARNING, "sweep could not advance a job", job_id=job.id, error=str(exc))
            return "deferred"
        except Exception as exc:  # noqa: BLE001 - one bad job must not stop the sweep
            report.errors += 1
            log(
                logging.ERROR,
                "sweep hit an unexpected error on a job",
                job_id=job.id,
                error_type=type(exc).__name__,
                error=str(exc)[:300],
                exc_info=True,
            )
            return "error"
        return action
