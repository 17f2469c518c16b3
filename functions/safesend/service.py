"""The orchestration of send, reconcile and sweep. Decisions come from `lifecycle`; I/O from ports.

Invariants kept here:
- a send goes out only after a compare-and-set put the job in `sending` under our lease;
- a resend of a job whose earlier attempt may have landed happens only after a mailbox
  check found nothing and the index-lag window has passed (see lifecycle.apply_mailbox_check);
- an outcome we observed is never dropped: a lost compare-and-set is re-read and re-applied.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from . import lifecycle
from .errors import (ConcurrentUpdateError, MailboxUnavailableError, PayloadMismatchError,
                     PublishError, SchedulerError, SimulatedCrashError, StoreUnavailableError)
from .keys import job_id_for, message_id_for
from .lifecycle import Timing
from .logs import log
from .mime import build_mime
from .model import Accepted, Failure, Job
from .policy import ChannelPolicies, ChannelPolicy
from .ports import CheckScheduler, JobStore, Mailer, ReviewPublisher
from .review import review_attributes, review_item
from .states import SWEPT_STATES, State
from .validation import SendRequest, message_from_payload

MAX_RECORD_TRIES = 8
MAX_SWEEP_BATCHES = 20  # per state and sweep; the time budget bounds it too  # compare-and-set retries when recording an outcome we must not lose


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class FaultPlan:
    """Test-only crash points ("after_claim", "after_send"): raise SimulatedCrashError once each."""

    def __init__(self, points: set[str] | None = None):
        self.points = set(points or ())

    def hit(self, point: str) -> None:
        if point in self.points:
            self.points.discard(point)
            raise SimulatedCrashError(point)


@dataclass
class SweepReport:
    examined: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    stopped_early: bool = False

    def count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1


class SafeSendService:
    def __init__(self, store: JobStore, mailer: Mailer, scheduler: CheckScheduler | None,
                 publisher: ReviewPublisher | None, policies: ChannelPolicies, *,
                 message_id_domain: str, timing: Timing = Timing(), request_budget_s: float = 40.0,
                 send_timeout_s: float = 20.0, verify_message_id_every: int = 100,
                 clock: Callable[[], datetime] = utcnow, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 uniform: Callable[[float, float], float] = random.uniform,
                 new_owner: Callable[[], str] = lambda: uuid.uuid4().hex):
        self.store = store
        self.mailer = mailer
        self.scheduler = scheduler
        self.publisher = publisher
        self.policies = policies
        self.domain = message_id_domain
        self.timing = timing
        self.request_budget_s = request_budget_s
        self.send_timeout_s = send_timeout_s
        self.verify_message_id_every = verify_message_id_every
        self._accepted_sends = itertools.count()
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.uniform = uniform
        self.new_owner = new_owner

    # ----------------------------------------------------------------- send
    def submit(self, request: SendRequest, faults: FaultPlan | None = None) -> tuple[Job, bool]:
        """Claim the job for this key and send it, or return the existing job (replayed=True)."""
        deadline = self.monotonic() + self.request_budget_s
        policy = self.policies.get(request.channel)
        now = self.clock()
        owner = self.new_owner()
        draft = lifecycle.new_job(job_id_for(request.dedup_key), request.dedup_key,
                                  message_id_for(request.dedup_key, self.domain), request.channel,
                                  request.payload, request.payload_hash, now)
        job, created = self.store.claim_or_get(lifecycle.start_attempt(draft, now, owner, self.timing))
        if not created:
            if job.payload_hash != request.payload_hash:
                raise PayloadMismatchError(job.id)
            log(logging.INFO, "duplicate send request", job_id=job.id, state=job.state.value)
            if lifecycle.lease_expired(job, self.clock()):
                job = self._recover_expired(job, policy)
            return job, True
        log(logging.INFO, "job claimed", job_id=job.id, channel=job.channel, attempt=job.attempts)
        (faults or FaultPlan()).hit("after_claim")
        return self._attempt_loop(job, owner, policy, deadline, faults), False

    def _attempt_loop(self, job: Job, owner: str, policy: ChannelPolicy, deadline: float,
                      faults: FaultPlan | None) -> Job:
        """Send, record, and retry Bucket-1 failures quickly while the request's budget allows."""
        for _ in range(policy.quick_retries + 1):
            outcome = self._send_once(job)
            (faults or FaultPlan()).hit("after_send")
            job = self._record_outcome(job, outcome, owner, policy)
            if job.state is not State.RETRY_WAIT or job.next_check_at is None:
                break
            wait_s = max(0.0, (job.next_check_at - self.clock()).total_seconds())
            if self.monotonic() + wait_s + self.send_timeout_s > deadline:
                break
            self.sleep(wait_s)
            try:
                job = self._cas(job, lifecycle.start_attempt(job, self.clock(), owner, self.timing))
            except ConcurrentUpdateError:
                job = self._reload(job)
                break
        self._follow_up(job)
        return job

    def _send_once(self, job: Job) -> Accepted | Failure:
        raw = build_mime(message_from_payload(job.payload), job.message_id, job.id, job.created_at)
        outcome = self.mailer.send(raw)
        if isinstance(outcome, Accepted):
            log(logging.INFO, "gmail accepted", job_id=job.id, attempt=job.attempts, gmail_id=outcome.gmail_id)
        else:
            log(logging.WARNING, "send attempt failed", job_id=job.id, attempt=job.attempts,
                bucket=outcome.bucket.value, code=outcome.code, status=outcome.status)
        return outcome

    def _record_outcome(self, job: Job, outcome: Accepted | Failure, owner: str,
                        policy: ChannelPolicy) -> Job:
        """Persist what Gmail told us, in one write. A lost race is re-read and re-applied: the fact
        must survive. For an accepted send, the Message-ID Gmail stored is read first so it lands
        in the same write."""
        stored_message_id = self._stored_message_id(job, outcome)
        current = job
        for _ in range(MAX_RECORD_TRIES):
            now = self.clock()
            updated = lifecycle.record_outcome(current, outcome, owner, now, policy, self.timing, self.uniform)
            if updated.state is State.SENT and isinstance(outcome, Accepted):
                updated = lifecycle.note_stored_message_id(updated, stored_message_id, now)
            try:
                stored = self._cas(current, updated)
            except ConcurrentUpdateError:
                current = self._reload(current)
                continue
            except StoreUnavailableError:
                # The lease will run out and the sweeper will reconcile from the mailbox.
                log(logging.ERROR, "could not record the send outcome; the sweeper will reconcile",
                    job_id=job.id, outcome=type(outcome).__name__)
                return current
            if stored.events and stored.events[-1]["kind"] == "message_id_rewritten":
                log(logging.ERROR, "Gmail stored a different Message-ID: search-based reconciliation "
                    "cannot see this message", job_id=job.id, stored_message_id=stored_message_id)
            elif isinstance(outcome, Accepted) and stored.events and stored.events[-1]["kind"] == "late_accept":
                log(logging.ERROR, "accepted after our lease was taken over: possible duplicate, "
                    "check the mailbox", job_id=job.id, gmail_id=outcome.gmail_id)
            return stored
        log(logging.ERROR, "outcome not recorded after repeated conflicts", job_id=job.id)
        return current

    def _stored_message_id(self, job: Job, outcome: Accepted | Failure) -> str | None:
        """Read back what Gmail stored, for the first accepted send of this instance and then 1 in N.

        Every Message-ID has the same strictly valid shape, so a rewrite by Gmail would be
        systematic: sampling finds it without a second Gmail round trip on every send (bench/:
        the read-back doubled happy-path latency).
        """
        if not isinstance(outcome, Accepted) or self.verify_message_id_every <= 0:
            return None
        if next(self._accepted_sends) % self.verify_message_id_every:
            return None
        try:
            return self.mailer.stored_message_id(outcome.gmail_id)
        except MailboxUnavailableError as exc:
            log(logging.WARNING, "could not verify the stored Message-ID", job_id=job.id, error=str(exc))
            return None

    # ------------------------------------------------------------ reconcile
    def advance(self, job_id: str, faults: FaultPlan | None = None,
                known: Job | None = None) -> tuple[Job | None, str]:
        """Move a job one step toward a settled state, if it is due. Safe to call any number of times.

        Called by the Cloud Tasks reconcile task and by the sweeper (which passes the job its query
        just read: every write is a compare-and-set, so a stale copy can only lose, never corrupt).
        Returns the job and what was done.
        """
        job = known if known is not None else self.store.get(job_id)
        if job is None:
            return None, "not_found"
        policy = self.policies.get(job.channel)
        now = self.clock()
        if lifecycle.lease_expired(job, now):
            job = self._recover_expired(job, policy, schedule=False)
            if job.state is not State.UNKNOWN:
                return job, "conflict"
        if lifecycle.needs_publish(job):
            return job, self._publish_review(job)
        if job.state not in (State.UNKNOWN, State.RETRY_WAIT):
            return job, "nothing_to_do"
        if not lifecycle.is_due(job, now):
            self._follow_up(job)  # make sure a task exists for the real due time
            return job, "not_due"
        return self._check_mailbox_and_act(job, policy, faults)

    def _check_mailbox_and_act(self, job: Job, policy: ChannelPolicy,
                               faults: FaultPlan | None) -> tuple[Job, str]:
        hits = self.mailer.find_by_message_id(job.message_id)  # MailboxUnavailableError -> caller retries
        owner = self.new_owner()
        decided = lifecycle.apply_mailbox_check(job, hits, self.clock(), owner, policy, self.timing)
        try:
            stored = self._cas(job, decided)
        except ConcurrentUpdateError:
            return self._reload(job), "conflict"
        log(logging.INFO, "mailbox checked", job_id=job.id, hits=len(hits), state=stored.state.value)
        if stored.state is State.SENDING:
            deadline = self.monotonic() + self.request_budget_s
            return self._attempt_loop(stored, owner, policy, deadline, faults), "resent"
        self._follow_up(stored)
        return stored, f"checked_{stored.state.value}"

    def _recover_expired(self, job: Job, policy: ChannelPolicy, schedule: bool = True) -> Job:
        """The instance that claimed this job died around the send: treat the attempt as unknown."""
        try:
            recovered = self._cas(job, lifecycle.expire_lease(job, self.clock(), policy, self.timing))
        except ConcurrentUpdateError:
            return self._reload(job)
        log(logging.WARNING, "lease expired in sending: outcome unknown", job_id=job.id, attempt=job.attempts)
        if schedule:
            self._follow_up(recovered)
        return recovered

    # ---------------------------------------------------------------- sweep
    def sweep(self, batch: int = 50, budget_s: float = 90.0) -> SweepReport:
        """Advance every due job, state by state, in bounded batches within a time budget."""
        report = SweepReport()
        deadline = self.monotonic() + budget_s
        for state in SWEPT_STATES:
            seen: set[str] = set()
            for _ in range(MAX_SWEEP_BATCHES):
                fresh = [j for j in self.store.find_due(state, self.clock(), batch) if j.id not in seen]
                for job in fresh:
                    if self.monotonic() >= deadline:
                        report.stopped_early = True
                        return report
                    seen.add(job.id)
                    report.examined += 1
                    try:
                        _, action = self.advance(job.id, known=job)
                    except (MailboxUnavailableError, StoreUnavailableError, PublishError) as exc:
                        report.errors += 1
                        log(logging.WARNING, "sweep could not advance a job", job_id=job.id, error=str(exc))
                        continue
                    report.count(action)
                if len(fresh) < batch:
                    break  # this state has nothing more due (what is left was already handled once)
        return report

    # -------------------------------------------------------------- helpers
    def _follow_up(self, job: Job) -> None:
        """After a change: make sure a reconcile task is queued, or the review item is out."""
        if job.state in (State.UNKNOWN, State.RETRY_WAIT) and job.next_check_at and self.scheduler:
            step = f"a{job.attempts}-c{job.checks}"
            try:
                self.scheduler.schedule_check(job.id, step, job.next_check_at)
            except SchedulerError as exc:
                log(logging.WARNING, "could not enqueue the reconcile task; the sweeper will pick the job up",
                    job_id=job.id, error=str(exc))
        elif lifecycle.needs_publish(job):
            try:
                self._publish_review(job)
            except (PublishError, StoreUnavailableError) as exc:
                log(logging.WARNING, "review item not published yet; the sweeper will retry",
                    job_id=job.id, error=str(exc))

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
        include_body = self.policies.get(held.channel).review_includes_body
        pubsub_id = self.publisher.publish(review_item(held, include_body), review_attributes(held))
        log(logging.WARNING, "job needs a human", job_id=job.id, state=job.state.value,
            reason=job.review_reason, pubsub_message_id=pubsub_id)
        try:
            self._cas(held, lifecycle.mark_review_published(held, self.clock(), pubsub_id))
        except ConcurrentUpdateError:
            pass  # published; at worst it is published again after the hold, with the same review_id
        return "review_published"

    def _cas(self, before: Job, after: Job) -> Job:
        return self.store.compare_and_set(after, expected_version=before.version)

    def _reload(self, job: Job) -> Job:
        fresh = self.store.get(job.id)
        return fresh if fresh is not None else job
