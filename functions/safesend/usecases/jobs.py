"""The base every use case shares: the ports and knobs, and the job record's safe writes.

A compare-and-set that lost is re-read and told apart from our own write (`_cas`); a settled step
is followed up (`_follow_up`): a check scheduled, a review item published. The use cases
(send, notify, reconcile, review, sweep, health) subclass it; service.py joins them.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ..config import Settings
from ..core import lifecycle, signals
from ..core.errors import (
    ConcurrentUpdateError,
    PublishError,
    SchedulerError,
    StoreUnavailableError,
)
from ..core.lifecycle import Timing
from ..core.mailboxes import DEFAULT_MAILBOX_ID, Mailbox, MailboxDirectory
from ..core.model import Job, MailboxHit
from ..core.notify import ReviewerTargets
from ..core.policy import ChannelPolicies
from ..core.ports import CheckScheduler, JobStore, Mailer, Notifier, ReviewPublisher
from ..core.review import review_attributes, review_item
from ..core.signals import emit
from ..core.states import State
from ..logs import log
from .history import CheckpointCache
from .lag_watch import LagWatch
from .senders import SenderMailboxes

MAX_RECORD_TRIES = 8  # compare-and-set retries when recording an outcome we must not lose

MAX_SWEEP_BATCHES = 200  # pages per state and sweep (10,000 jobs at 50 a page); the time budget bounds it too

MAX_NOTICES_PER_ADVANCE = 10  # callback POSTs in one reconcile call (each bounded by its deadline)

HOLD_MARGIN_S = 30.0  # a delivery pass's hold outlasts its posts' deadlines by this (clocks, the record)

MAX_PLACE_SCAN = 2000  # queued jobs /status reads to tell a queued job's place

BUDGET_RETRY = timedelta(seconds=5)  # a mailbox budget that could not be read is asked again after this


def utcnow() -> datetime:
    return datetime.now(UTC)


class JobRecords:
    """The ports and knobs every use case reads, and the writes they all make: compare-and-set of the
    job record, the follow-up of a step (a check scheduled, a review item published), the mailbox
    search and checkpoint of the job's sender. Its knobs come whole from Settings (config.py)."""

    def __init__(
        self,
        store: JobStore,
        mailer: Mailer,
        scheduler: CheckScheduler | None,
        publisher: ReviewPublisher | None,
        policies: ChannelPolicies,
        settings: Settings,
        *,
        notifier: Notifier | None = None,
        senders: SenderMailboxes | None = None,
        checkpoint_in_background: bool = True,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        uniform: Callable[[float, float], float] = random.uniform,
        new_owner: Callable[[], str] = lambda: uuid.uuid4().hex,
    ):
        self.store = store
        self.mailer = mailer
        self.scheduler = scheduler
        self.publisher = publisher
        self.policies = policies
        self.notifier = notifier
        self.domain = settings.message_id_domain
        self.default_from = settings.default_from
        self.timing: Timing = settings.timing
        self.request_budget_s = settings.request_budget_s
        self.send_timeout_s = settings.send_timeout_s
        self.read_timeout_s = settings.read_timeout_s
        self.verify_message_id_every = settings.verify_message_id_every
        self.callback_horizon_s = settings.callback_horizon_s
        self.sweep_interval_s = settings.sweep_interval_s  # /health's "late" (the console asks it too)
        self.reviewers: ReviewerTargets = settings.reviewer_targets()
        # The sender mailboxes (issue 24); unconfigured: today's one mailbox, `mailer`, unpaced.
        self.senders = senders or SenderMailboxes(
            MailboxDirectory.default(settings.default_from, settings.gmail_user, settings.gmail_delegated_user),
            None,
            lambda: self.mailer,
        )
        self.senders.set_clock(clock)
        self._checkpoint_in_background = checkpoint_in_background
        self._checkpoints = (
            CheckpointCache(mailer.current_history_id, monotonic, background=checkpoint_in_background)
            if self.timing.history_check_s > 0
            else None
        )
        self._mailbox_checkpoints: dict[str, CheckpointCache] = {}
        self._accepted_sends = itertools.count()
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.uniform = uniform
        self.new_owner = new_owner
        self.lag = LagWatch(store, self.senders, scheduler, publisher, self.timing, clock, monotonic)

    def _send_deadline(self, until: float | None = None) -> float:
        """When quick retries stop: the request's budget, cut to the caller's own deadline (the
        sweep's, so a resend it starts late never runs past its budget into the function timeout)."""
        deadline = self.monotonic() + self.request_budget_s
        return deadline if until is None else min(deadline, until)

    def _mailer_of(self, job: Job) -> Mailer:
        return self.senders.mailer(self.senders.current(job))

    def _search(self, job: Job) -> list[MailboxHit]:
        """Every mailbox the job was ever bound to is searched (a moved job's earlier ones too)."""
        hits: list[MailboxHit] = []
        for mailbox in self.senders.bound(job):
            hits.extend(self.senders.mailer(mailbox).find_by_message_id(job.message_id))
        return hits

    def _checkpoint(self, mailbox: Mailbox) -> str | None:
        """A change-log checkpoint of `mailbox` from memory (no Gmail call on the send path)."""
        if self._checkpoints is None:
            return None
        if mailbox.id == DEFAULT_MAILBOX_ID:
            return self._checkpoints.for_attempt()
        cache = self._mailbox_checkpoints.get(mailbox.id)
        if cache is None:
            mailer = self.senders.mailer(mailbox)
            cache = CheckpointCache(
                mailer.current_history_id, self.monotonic, background=self._checkpoint_in_background
            )
            self._mailbox_checkpoints[mailbox.id] = cache
        return cache.for_attempt()

    def _follow_up(self, job: Job) -> None:
        """After a change: make sure a reconcile task is queued, or the review item is out."""
        checking = job.state in (State.UNKNOWN, State.RETRY_WAIT) or _verifying(job)
        if checking and job.next_check_at:
            # Unique per due check (Cloud Tasks refuses a name it has seen): a due time that moves
            # without a check (the change log's 404 falls back to the search) gets its own task.
            due_ms = int(job.next_check_at.timestamp() * 1000)
            step = f"a{job.attempts}-c{job.checks}-{due_ms}" + ("-v" if _verifying(job) else "")
            self._schedule(job, step, job.next_check_at)
        if job.state is State.QUEUED and job.next_check_at:
            # Its turn, on its mailbox's own paced queue (rate_limits pace the dispatches for all).
            due_ms = int(job.next_check_at.timestamp() * 1000)
            mailbox = job.mailboxes[-1] if job.mailboxes else None
            self._schedule(job, f"q{job.attempts}-{len(job.events)}-{due_ms}", job.next_check_at, mailbox)
        if job.notice_due_at:  # the reviewers' email needs no notifier
            self._schedule(job, f"n{job.notice_seq}-{int(job.notice_due_at.timestamp() * 1000)}", job.notice_due_at)
        if lifecycle.needs_publish(job):
            try:
                self._publish_review(job)
            except (PublishError, StoreUnavailableError) as exc:
                log(
                    logging.WARNING,
                    "review item not published yet; the sweeper will retry",
                    job_id=job.id,
                    error=str(exc),
                )

    def _schedule(self, job: Job, step: str, at: datetime, mailbox: str | None = None) -> None:
        if self.scheduler is None:
            return
        try:
            if mailbox is None:
                self.scheduler.schedule_check(job.id, step, at)
            else:
                self.scheduler.schedule_check(job.id, step, at, mailbox=mailbox)
        except SchedulerError as exc:
            log(
                logging.WARNING,
                "could not enqueue the reconcile task; the sweeper will pick the job up",
                job_id=job.id,
                error=str(exc),
            )

    def _publish_review(self, job: Job) -> str:
        """Outbox: claim the publish (one sweeper wins), publish, then mark it done."""
        if self.publisher is None:
            return "review_unpublished_no_topic"
        now = self.clock()
        if job.next_check_at is not None and job.next_check_at > now:
            return "review_publish_held"
        try:
            held = self._cas(job, lifecycle.claim_review_publish(job, now, self.timing))
        except ConcurrentUpdateError:
            return "conflict"
        include_body = self.policies.for_job(held.channel).review_includes_body
        pubsub_id = self.publisher.publish(
            review_item(held, include_body, self.senders.search_for(held)), review_attributes(held)
        )
        emit(
            signals.JOB_NEEDS_REVIEW,
            logging.WARNING,
            "job needs a human",
            job_id=job.id,
            state=job.state.value,
            reason=job.review_reason,
            pubsub_message_id=pubsub_id,
        )
        if job.review_reason in (lifecycle.ReviewReason.DUPLICATE, lifecycle.ReviewReason.SENT_AFTER_CANCEL):
            # Here, once per review entry (the publish claim has one winner), whichever check found it.
            emit(
                signals.DUPLICATE_FOUND,
                logging.ERROR,
                "duplicate found: a person is told",
                job_id=job.id,
                reason=job.review_reason,
                copies=len(job.known_copies),
            )
        self._mark_published(held, pubsub_id)
        return "review_published"

    def _mark_published(self, held: Job, pubsub_id: str) -> None:
        """Record the publish, re-applied over a lost race (notify's first write often lands first:
        the push is fast). Left unrecorded, the job would be published again and keep a due time."""
        timeout = self.reviewers.notify_timeout_s or None  # 0: no notify function is deployed
        review_id = lifecycle.current_review_id(held)
        current = held
        for _ in range(MAX_RECORD_TRIES):
            try:
                self._cas(current, lifecycle.mark_review_published(current, self.clock(), pubsub_id, timeout))
                return
            except ConcurrentUpdateError:
                current = self._reload(current)
            if lifecycle.current_review_id(current) != review_id or current.review_published_at is not None:
                return  # decided, re-entered, or marked by another publisher: nothing left to record
        # At worst it is published again after the hold: same review_id, consumers dedupe on it.
        log(logging.WARNING, "review publish not recorded after repeated conflicts", job_id=held.id)

    def _cas(self, before: Job, after: Job) -> Job:
        """Every write: a job that settles queues its callback notices in the same write. Each write
        carries a fresh mark, so a store that reports our own landed write as a lost race (an answer
        lost after the commit) cannot turn it into a skipped send or a review item."""
        after = lifecycle.queue_notices(before, after, self.clock())
        after = after.copy() if after is before else after
        after.write_mark = uuid.uuid4().hex
        try:
            return self.store.compare_and_set(after, expected_version=before.version)
        except ConcurrentUpdateError:
            landed = self._own_write(after, before.version + 1)
            if landed is None:
                raise
            log(logging.WARNING, "the store reported our own write as a lost race; it landed", job_id=after.id)
            return landed

    def _own_write(self, after: Job, version: int) -> Job | None:
        """The stored job if it is exactly our write (its mark and version), else None."""
        try:
            stored = self.store.get(after.id)
        except StoreUnavailableError:
            return None
        if stored is not None and stored.write_mark == after.write_mark and stored.version == version:
            return stored
        return None

    def _reload(self, job: Job) -> Job:
        """The stored job after a lost race; the copy we hold if the store cannot say."""
        try:
            fresh = self.store.get(job.id)
        except StoreUnavailableError:
            return job
        return fresh if fresh is not None else job


def _verifying(job: Job) -> bool:
    """A settled job still searched: sent with two attempts in doubt, or cancelled with one."""
    return lifecycle.needs_verification(job) or lifecycle.watches_after_cancel(job)
