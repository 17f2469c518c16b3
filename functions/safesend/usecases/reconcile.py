"""Reconcile: advance one job by what is due, settling an unclear attempt from the mailbox (the
change log first, then the search), verifying a sent job, resending only when the rules allow."""

from __future__ import annotations

import logging

from ..core import lifecycle
from ..core.errors import (
    ConcurrentUpdateError,
    HistoryExpiredError,
)
from ..core.model import Job
from ..core.policy import ChannelPolicy
from ..core.states import State
from ..logs import log
from .history import copies_in_history
from .jobs import _verifying
from .notify import ReviewerNotices


class Reconciler(ReviewerNotices):
    """The reconcile use case: advance a job, check the mailbox, verify."""

    def advance(self, job_id: str, known: Job | None = None, until: float | None = None) -> tuple[Job | None, str]:
        """Move a job one step toward a settled, verified state, if it is due. Safe to call any
        number of times.

        Called by the Cloud Tasks reconcile task and by the sweeper (which passes the job its query
        just read: every write is a compare-and-set, so a stale copy can only lose, never corrupt).
        `until` (monotonic): no quick retry of a resend starts after it (the sweep's deadline).
        Returns the job and what was done.
        """
        job = known if known is not None else self.store.get(job_id)
        if job is None:
            return None, "not_found"
        job, delivered = self._deliver_notices(job)
        policy = self.policies.for_job(job.channel)
        now = self.clock()
        if lifecycle.lease_expired(job, now):
            job = self._recover_expired(job, policy, schedule=False)
            if job.state is not State.UNKNOWN:
                return job, "conflict"
        if lifecycle.needs_republish(job, now):
            job = self._cas(job, lifecycle.republish_unnotified(job, now))
            log(
                logging.WARNING,
                "review item never reached the reviewers' channels: publishing it again",
                job_id=job.id,
                review_id=lifecycle.current_review_id(job),
            )
        if lifecycle.needs_publish(job):
            return job, self._publish_review(job)
        if lifecycle.has_stale_due_time(job, now):
            try:
                return self._cas(job, lifecycle.clear_stale_due_time(job, now)), "due_time_cleared"
            except ConcurrentUpdateError:
                return self._reload(job), "conflict"
        if job.state is State.QUEUED:
            if not lifecycle.is_due(job, now):
                self._follow_up(job)
                return job, "not_due"
            return self._take_turn(job, policy, until)
        if not (job.state in (State.UNKNOWN, State.RETRY_WAIT) or _verifying(job)):
            return job, "notices_delivered" if delivered else "nothing_to_do"
        if not lifecycle.is_due(job, now):
            self._follow_up(job)  # make sure a task exists for the real due time
            return job, "not_due"
        gone = self.senders.gone(job)
        if gone is not None:
            return self._mailbox_gone(job, gone)
        if job.state in (State.SENT, State.CANCELLED):
            return self._verify(job)
        return self._check_mailbox_and_act(job, policy, until)

    def _check_mailbox_and_act(self, job: Job, policy: ChannelPolicy, until: float | None) -> tuple[Job, str]:
        owner = self.new_owner()
        policy = self.lag.policy_for(job, policy)  # the mailbox's effective unknown window (lag_watch)
        if lifecycle.uses_history(job, self.clock(), policy, self.timing):
            return self._check_history(job, policy)
        if job.state is State.RETRY_WAIT and job.maybe_landed == 0 and not job.known_copies:
            decided = lifecycle.resume_after_refusals(job, self.clock(), owner, self.timing)
            hits_seen = None
        else:
            searched_at = self.clock()  # what the search saw, it saw then: its answer may come later
            hits = self._search(job)  # MailboxUnavailableError -> caller retries
            decided = lifecycle.apply_mailbox_check(job, hits, self.clock(), owner, policy, self.timing, searched_at)
            hits_seen = len(hits)
        try:
            stored = self._cas(job, decided)
        except ConcurrentUpdateError:
            return self._reload(job), "conflict"
        log(
            logging.INFO,
            "mailbox checked" if hits_seen is not None else "retrying after refusals",
            job_id=job.id,
            hits=hits_seen,
            state=stored.state.value,
        )
        if stored.state is State.SENDING:
            turn = lifecycle.holds_turn(stored)  # searched after leaving the queue: this is its turn
            return self._attempt_loop(stored, owner, policy, self._send_deadline(until), turn=turn), "resent"
        self._follow_up(stored)
        return stored, f"checked_{stored.state.value}"

    def _mailbox_gone(self, job: Job, mailbox: str) -> tuple[Job, str]:
        """The mailbox that may hold the job's copy was removed from the configuration: a person."""
        try:
            stored = self._cas(job, lifecycle.mailbox_gone(job, mailbox, self.clock()))
        except ConcurrentUpdateError:
            return self._reload(job), "conflict"
        log(
            logging.ERROR,
            "the mailbox that may hold this job's copy is no longer configured: a human must look",
            job_id=job.id,
            mailbox=mailbox,
            state=job.state.value,
        )
        self._follow_up(stored)
        return stored, "mailbox_gone"

    def _check_history(self, job: Job, policy: ChannelPolicy) -> tuple[Job, str]:
        """Settle from the change log in seconds; found is proof, not found waits for the search."""
        assert job.history_start is not None  # noqa: S101 - callers only pass jobs with a checkpoint
        try:
            hits, _ = copies_in_history(self._mailer_of(job), job.history_start, job.message_id)
        except HistoryExpiredError:
            decided = lifecycle.without_history(job, self.clock(), policy, self.timing)
        else:
            decided = lifecycle.apply_history_check(job, hits, self.clock(), policy, self.timing)
        try:
            stored = self._cas(job, decided)
        except ConcurrentUpdateError:
            return self._reload(job), "conflict"
        log(
            logging.INFO, "change log checked", job_id=job.id, state=stored.state.value, copies=len(stored.known_copies)
        )
        self._follow_up(stored)
        return stored, f"history_{stored.state.value}"

    def _verify(self, job: Job) -> tuple[Job, str]:
        """A verification check of a sent job that may have two copies, or of a cancelled one whose
        attempt may still land (see lifecycle)."""
        hits = self._search(job)
        check = lifecycle.apply_cancel_check if job.state is State.CANCELLED else lifecycle.apply_verification
        try:
            stored = self._cas(job, check(job, hits, self.clock()))
        except ConcurrentUpdateError:
            return self._reload(job), "conflict"
        if stored.state is State.REVIEW:
            log(
                logging.ERROR,
                "verification failed: a human must look",
                job_id=job.id,
                reason=stored.review_reason,
                copies=len(stored.known_copies),
            )
        else:
            log(logging.INFO, "verification check", job_id=job.id, hits=len(hits), verified=stored.verified)
        self._follow_up(stored)
        return stored, "verified" if stored.verified else f"verification_{stored.state.value}"
