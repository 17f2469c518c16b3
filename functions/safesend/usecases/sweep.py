"""Sweep: page through due jobs by (due time, id), in every swept state and the notice outbox,
advance each in isolation within the time budget, and report what the alerts read."""

from __future__ import annotations

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

        One bad job never stalls the others: whatever it raises is logged and counted, and the
        sweep goes on. Raises StoreUnavailableError only when no state could be queried at all.
        """
        report = SweepReport()
        deadline = self.monotonic() + budget_s
        unqueried: list[StoreUnavailableError] = []
        for state in SWEPT_STATES:
            try:
                if not self._sweep_state(state, batch, deadline, report):
                    return self._finish_sweep(report)
            except IndexMissingError:
                raise  # no state can be queried reliably: loud, at once
            except StoreUnavailableError as exc:
                report.errors += 1
                unqueried.append(exc)
                unswept(f"state {state.value}", exc)
        try:
            self._sweep_notices(batch, deadline, report)
        except StoreUnavailableError as exc:
            report.errors += 1
            unqueried.append(exc)
            unswept("due notices", exc)
        if len(unqueried) == len(SWEPT_STATES) + 1:
            raise unqueried[-1]
        return self._finish_sweep(report)

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

    def _sweep_notices(self, batch: int, deadline: float, report: SweepReport) -> None:
        """Notices whose task was lost, page after page past any this instance cannot act on. Also
        without a notifier: the reviewers' email goes through safesend's own send path (and other
        kinds are given up)."""
        self._sweep_pages(
            lambda cursor: self.store.find_notices_due(self.clock(), batch, start_after=cursor),
            lambda job: job.notice_due_at,
            deadline,
            report,
        )

    def _sweep_state(self, state: State, batch: int, deadline: float, report: SweepReport) -> bool:
        """Advance the due jobs of one state; False when the time budget ran out."""
        return self._sweep_pages(
            lambda cursor: self.store.find_due(state, self.clock(), batch, start_after=cursor),
            lambda job: job.next_check_at,
            deadline,
            report,
        )

    def _sweep_pages(
        self,
        query: Callable[[Cursor | None], Sequence[Job]],
        due_of: Callable[[Job], datetime | None],
        deadline: float,
        report: SweepReport,
    ) -> bool:
        """Keyset pagination on (due time, id): each page starts after the last job of the one before,
        so any number of due jobs that cannot be advanced never hide the ones behind them. The due
        time is the one the query read (the advance may move it). False when the budget ran out."""
        cursor: Cursor | None = None
        for _ in range(MAX_SWEEP_BATCHES):
            page = query(cursor)
            for job in page:
                if self.monotonic() >= deadline:
                    report.stopped_early = True
                    return False
                report.examined += 1
                report.saw_due(due_of(job), self.clock())
                report.count(self._advance_isolated(job, report))
            if not page:
                return True  # a short page may only mean unreadable records were left out: ask once more
            last_due = due_of(page[-1])
            if last_due is None:
                return True
            cursor = (last_due, page[-1].id)
        return True

    def _advance_isolated(self, job: Job, report: SweepReport) -> str:
        try:
            _, action = self.advance(job.id, known=job)
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
