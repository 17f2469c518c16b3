"""Health and mailboxes: what /health and /status's mailboxes answer, read from the store and the
sender mailboxes' budgets (the views themselves are core/health.py and core/mailbox_views.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..core.health import health_view
from ..core.model import Job
from ..core.states import State
from .jobs import MAX_PLACE_SCAN, JobRecords
from .notice_watch import notices_view


class HealthViews(JobRecords):
    """The read-only views: health, the mailboxes' budgets, a queued job's place."""

    def mailboxes_report(self, limit: int = MAX_PLACE_SCAN) -> dict[str, Any]:
        """What GET /mailboxes and the console show: each mailbox's budget (the shared ledger), its
        backlog of queued jobs (at most `limit` read from the store) and its state."""
        from ..core.mailbox_views import mailboxes_view

        now = self.clock()
        directory = self.senders.directory
        backlogs: dict[str, int] = {}
        read, cursor = 0, None
        far = datetime.max.replace(tzinfo=UTC)
        while read < limit:
            page = self.store.find_due(State.QUEUED, far, min(200, limit - read), start_after=cursor)
            if not page:
                break
            for queued in page:
                read += 1
                mailbox = queued.mailboxes[-1] if queued.mailboxes else directory.pools.default[0]
                backlogs[mailbox] = backlogs.get(mailbox, 0) + 1
            if page[-1].next_check_at is None:
                break
            cursor = (page[-1].next_check_at, page[-1].id)
        snapshots = self.senders.snapshots(list(directory))
        return mailboxes_view(directory, snapshots, backlogs, now)

    def queue_place(self, job: Job, limit: int = MAX_PLACE_SCAN) -> int | None:
        """How many jobs wait before this queued one at its mailbox (0: it is next), counted from the
        store by (due time, id), at most `limit` jobs read; None if it is not queued."""
        if job.state is not State.QUEUED or job.next_check_at is None:
            return None
        mine = job.mailboxes[-1] if job.mailboxes else None
        ahead, read, cursor = 0, 0, None
        while read < limit:
            page = self.store.find_due(State.QUEUED, job.next_check_at, min(200, limit - read), start_after=cursor)
            if not page:
                break
            for other in page:
                read += 1
                if (other.next_check_at, other.id) >= (job.next_check_at, job.id):
                    return ahead
                if (other.mailboxes[-1] if other.mailboxes else None) == mine:
                    ahead += 1
            last = page[-1]
            if last.next_check_at is None:
                break
            cursor = (last.next_check_at, last.id)
        return ahead

    def health(self, sweep_interval_s: float) -> dict[str, Any]:
        """/health: what the alerts ask, from the store. Raises StoreUnavailableError."""
        oldest = self.store.find_open_reviews(1)
        last, review = self.store.last_sweep(), oldest[0] if oldest else None
        now = self.clock()
        return health_view(last, review, now, sweep_interval_s, self.lag.report(), notices_view(self.store, now))
