"""Send: claim a job, build its MIME, make one Gmail request per attempt under our lease, and
record what Gmail said without ever losing an observed outcome. Pacing and daily-limit incidents of
the sender mailboxes happen here too."""

from __future__ import annotations

import logging
from datetime import datetime

from ..core import lifecycle, signals
from ..core.callbacks import MAX_CALLBACKS
from ..core.classify import RefusalKind, refusal_kind, unbuildable_failure
from ..core.errors import (
    CallbackNotStoredError,
    ConcurrentUpdateError,
    MailboxUnavailableError,
    PayloadMismatchError,
    PublishError,
    RequestValidationError,
    StoreUnavailableError,
)
from ..core.keys import job_id_for, message_id_for
from ..core.lifecycle import QueueSlot
from ..core.mailbox_budget import Refusal
from ..core.mailboxes import DEFAULT_MAILBOX_ID, Mailbox
from ..core.mime import build_mime
from ..core.model import Accepted, Failure, Job, iso
from ..core.policy import ChannelPolicy
from ..core.signals import emit, refusal_reason
from ..core.states import State
from ..core.validation import SendRequest, message_from_payload
from ..logs import log
from .jobs import BUDGET_RETRY, MAX_RECORD_TRIES, JobRecords
from .notice_watch import incident_untold


class SendJobs(JobRecords):
    """The send use case: submit, the attempt loop, the mailbox's turn, the recorded outcome."""

    def submit(self, request: SendRequest) -> tuple[Job, bool]:
        """Claim the job for this key and send it, or return the existing job (replayed=True).

        Raises StoreUnavailableError only before the claim (nothing was sent: safe to retry).
        """
        deadline = self.monotonic() + self.request_budget_s
        policy = self.policies.get(request.channel)
        now = self.clock()
        owner = self.new_owner()
        job_id = job_id_for(request.dedup_key)
        message_id = message_id_for(request.dedup_key, self.domain)
        raw = self._build_or_refuse(request, message_id, job_id, now)
        # A `from` no mailbox of the job's pool may send as: 400, before anything is stored.
        mailbox = self.senders.choose(self.senders.directory.candidates(request.channel, request.payload.get("from")))
        draft = lifecycle.new_job(
            job_id, request.dedup_key, message_id, request.channel, request.payload, request.payload_hash, now
        )
        if mailbox.id != DEFAULT_MAILBOX_ID:
            draft.mailboxes = [mailbox.id]
        if request.callback_url:
            draft.callbacks.append(request.callback_url)
        draft.history_start = self._checkpoint(mailbox)  # from memory; the lease runs from the claim (clock)
        job, created = self.store.claim_or_get(lifecycle.start_attempt(draft, self.clock(), owner, self.timing))
        if not created:
            if job.payload_hash != request.payload_hash:
                raise PayloadMismatchError(job.id)
            log(logging.INFO, "duplicate send request", job_id=job.id, state=job.state.value)
            if request.callback_url:
                try:
                    job = self._register_callback(job, request.callback_url)
                except StoreUnavailableError as exc:  # stored nowhere: no sweeper can ever call it
                    raise CallbackNotStoredError(f"job {job.id}: callback_url not stored ({exc})") from exc
            try:
                if lifecycle.lease_expired(job, self.clock()):
                    job = self._recover_expired(job, policy)
            except StoreUnavailableError:
                pass  # the sweeper recovers it; this caller gets the state it can see
            return job, True
        log(logging.INFO, "job claimed", job_id=job.id, channel=job.channel, attempt=job.attempts)
        return self._attempt_loop(job, owner, policy, deadline, raw), False

    @staticmethod
    def _build_or_refuse(request: SendRequest, message_id: str, job_id: str, now: datetime) -> bytes:
        """The exact bytes of the first attempt, checked before anything is stored."""
        try:
            return build_mime(request.message, message_id, job_id, now)
        except ValueError as exc:  # mime.MimeBuildError names the field at fault when it knows it
            field = getattr(exc, "field", None) or "message"
            raise RequestValidationError({field: f"cannot be built as MIME: {exc}"}) from exc

    def _attempt_loop(
        self,
        job: Job,
        owner: str,
        policy: ChannelPolicy,
        deadline: float,
        raw: bytes | None = None,
        turn: bool = False,
    ) -> Job:
        """Send, record, and retry Bucket-1 failures quickly while the request's budget allows.

        A store outage from here on returns the last known job: the claim stands, so the lease
        and the sweeper take over, and the caller must not hear "nothing was sent".
        """
        job = self._attempts(job, owner, policy, deadline, raw, turn)
        self._follow_up(job)
        return job

    def _attempts(
        self, job: Job, owner: str, policy: ChannelPolicy, deadline: float, raw: bytes | None, turn: bool = False
    ) -> Job:
        for quick_retry in range(policy.quick_retries + 1):
            try:
                job, admitted = self._admit(job, owner, turn and quick_retry == 0)
                if not admitted:
                    break  # queued: its mailbox's turn comes through that mailbox's paced queue
                outcome = self._send_once(job, raw)
                raw = None  # later attempts rebuild the same bytes from the stored payload
                job = self._record_outcome(job, outcome, owner, policy)
                if job.state is not State.RETRY_WAIT or job.next_check_at is None:
                    break
                if quick_retry == policy.quick_retries:
                    break  # out of quick retries: the task (or the sweeper) sends the next attempt
                wait_s = max(0.0, (job.next_check_at - self.clock()).total_seconds())
                if self.monotonic() + wait_s + self.send_timeout_s > deadline:
                    break
                self.sleep(wait_s)
                settled = lifecycle.settle_on_known_copies(job, self.clock(), policy, self.timing)
                if settled is not None:  # a copy is known: no attempt may add another
                    job = self._cas(job, settled)
                    break
                job = self._cas(job, lifecycle.start_attempt(job, self.clock(), owner, self.timing))
            except ConcurrentUpdateError:
                return self._reload(job)
            except StoreUnavailableError as exc:
                emit(
                    signals.STORE_UNAVAILABLE,
                    logging.ERROR,
                    "job store unavailable after the claim; the sweeper will reconcile",
                    where="send_after_claim",
                    job_id=job.id,
                    state=job.state.value,
                    error=str(exc),
                )
                return job  # the last state we know was stored
        return job

    def _admit(self, job: Job, owner: str, turn: bool = False) -> tuple[Job, bool]:
        """The shared budget admits the attempt we claimed (on the job's mailbox, or another of its
        pool while nothing may have landed: the move is stored before the send), or the job waits
        in `queued` for its mailbox's turn (the attempt is taken back: it was never made). False:
        queued. A budget that cannot be read admits nothing: the job waits a few seconds."""
        now = self.clock()
        try:
            mailbox, refusal = self.senders.reserve_send(job, turn)
        except (StoreUnavailableError, ValueError) as exc:
            log(logging.WARNING, "mailbox budget unreadable: the send waits", job_id=job.id, error=str(exc)[:200])
            mailbox, refusal = self.senders.current(job), Refusal(now + BUDGET_RETRY, "budget_unavailable")
            slot = QueueSlot(mailbox.id, now + BUDGET_RETRY, now + BUDGET_RETRY, refusal.reason)
            return self._cas(job, lifecycle.enter_queued(job, owner, now, slot)), False
        if refusal is None:
            if mailbox.id != (lifecycle.current_mailbox(job) or DEFAULT_MAILBOX_ID):
                moved = lifecycle.rebind(job, mailbox.id, now)
                moved.history_start = self._checkpoint(mailbox)
                job = self._cas(job, moved)
                log(logging.INFO, "job moved to another mailbox of its pool", job_id=job.id, mailbox=mailbox.id)
            return job, True
        if refusal.next_free_at is None:  # no mailbox of its pool can ever admit it: a person is told
            log(logging.ERROR, "send never admitted", job_id=job.id, mailbox=mailbox.id, reason=refusal.reason)
            return self._cas(job, lifecycle.never_admitted(job, owner, now, mailbox.id, refusal.reason)), False
        if turn and refusal.reason == "rate" and refusal.next_free_at is not None:
            turn_at = refusal.next_free_at  # its turn came a moment early (our reads): it keeps its place
        else:
            turn_at = self.senders.turn(mailbox, refusal.next_free_at)
        slot = QueueSlot(mailbox.id, turn_at, turn_at, refusal.reason)
        queued = self._cas(job, lifecycle.enter_queued(job, owner, now, slot))
        log(
            logging.INFO,
            "queued: the mailbox's budget is spent",
            job_id=job.id,
            mailbox=mailbox.id,
            reason=refusal.reason,
            eta=iso(turn_at),
        )
        return queued, False

    def _paced_refusal(self, job: Job, outcome: Failure) -> QueueSlot | None:
        """Gmail refused for rate or for the daily limit: the ledger learns it (for every instance)
        and the job waits its mailbox's turn. None: not a pacing refusal (today's retry path)."""
        mailbox = self.senders.current(job)
        try:
            until, began = self.senders.learn(mailbox, outcome)
        except (StoreUnavailableError, ValueError) as exc:
            log(logging.WARNING, "mailbox budget not updated", job_id=job.id, error=str(exc)[:200])
            return None
        if until is None:
            return None
        daily = refusal_kind(outcome) is RefusalKind.DAILY_LIMIT
        if daily and began:
            self._raise_incident(mailbox, until)
        reason = "gmail_daily_limit" if daily else "gmail_rate"
        if daily and lifecycle.current_mailbox(job) is not None and len(self.senders.candidates(job)) > 1:
            return QueueSlot(mailbox.id, self.clock(), until, reason)  # now: another mailbox may carry it
        turn = self.senders.turn(mailbox, until)
        return QueueSlot(mailbox.id, turn, turn, reason)

    def _raise_incident(self, mailbox: Mailbox, until: datetime) -> None:
        """Reviewers hear of a mailbox's daily limit once per incident (whichever instance met it
        first: the ledger says so), never once per job: its jobs wait, none fails for it."""
        incident = f"{mailbox.id}:{int(until.timestamp())}"
        message = "mailbox exhausted: Gmail's daily sending limit; its jobs wait or move within the pool"
        log(logging.ERROR, message, event="mailbox_exhausted", mailbox=mailbox.id, until=iso(until))
        if self.publisher is None:
            return
        item = {
            "kind": "mailbox_exhausted",
            "incident": incident,
            "mailbox": mailbox.id,
            "until": iso(until),
            "message": (
                f"Gmail refused mailbox {mailbox.id} for its daily sending limit; its jobs wait (queued) "
                f"until {iso(until)} or move to another mailbox of the pool. Nothing was lost; check the "
                "mailbox's limits (see GET /mailboxes)."
            ),
        }
        try:
            self.publisher.publish(item, {"kind": "mailbox_incident", "mailbox": mailbox.id, "incident": incident})
        except PublishError as exc:
            incident_untold(self.store, self.clock(), "mailbox_exhausted", incident, str(exc))

    def _take_turn(self, job: Job, policy: ChannelPolicy, until: float | None = None) -> tuple[Job, str]:
        """A queued job's turn (its mailbox's paced queue, or the sweeper): send it now if the budget
        admits it, else it waits again; an earlier attempt in doubt is searched for first."""
        owner = self.new_owner()
        left = lifecycle.leave_queue(job, self.clock(), owner, self.timing)
        if left.state is State.SENDING and left.history_start is None:
            left.history_start = self._checkpoint(self.senders.current(left))
        try:
            stored = self._cas(job, left)
        except ConcurrentUpdateError:
            return self._reload(job), "conflict"
        if stored.state is State.SENDING:
            done = self._attempt_loop(stored, owner, policy, self._send_deadline(until), turn=True)
            return done, "requeued" if done.state is State.QUEUED else "dequeued"
        self._follow_up(stored)
        return stored, f"dequeued_{stored.state.value}"

    def _send_once(self, job: Job, raw: bytes | None = None) -> Accepted | Failure:
        if raw is None:
            try:
                raw = build_mime(message_from_payload(job.payload), job.message_id, job.id, job.created_at)
            except (ValueError, KeyError, TypeError) as exc:
                # Stored before today's checks, or damaged: nothing was sent, and never will be.
                log(logging.ERROR, "stored job cannot be built as MIME", job_id=job.id, error=type(exc).__name__)
                return unbuildable_failure(f"{type(exc).__name__}: {exc}")
        outcome = self._mailer_of(job).send(raw)
        if isinstance(outcome, Accepted):
            log(logging.INFO, "gmail accepted", job_id=job.id, attempt=job.attempts, gmail_id=outcome.gmail_id)
        else:
            emit(
                signals.GMAIL_REFUSED,
                logging.WARNING,
                "send attempt failed",
                reason=refusal_reason(outcome.code, outcome.status),
                job_id=job.id,
                mailbox=self.senders.current(job).id,
                attempt=job.attempts,
                bucket=outcome.bucket.value,
                code=outcome.code,
                status=outcome.status,
            )
        return outcome

    def _record_outcome(self, job: Job, outcome: Accepted | Failure, owner: str, policy: ChannelPolicy) -> Job:
        """Persist what Gmail told us, in one write. A lost race is re-read and re-applied: the fact
        must survive. For an accepted send, the Message-ID Gmail stored is read first so it lands
        in the same write."""
        sampled = self._sampled(outcome)
        stored_message_id = self._stored_message_id(job, outcome) if sampled else None
        slot = self._paced_refusal(job, outcome) if isinstance(outcome, Failure) else None
        current = job
        for _ in range(MAX_RECORD_TRIES):
            now = self.clock()
            if slot is not None and isinstance(outcome, Failure):
                updated = lifecycle.record_paced_refusal(current, outcome, owner, now, policy, self.timing, slot)
            else:
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
                emit(
                    signals.STORE_UNAVAILABLE,
                    logging.ERROR,
                    "could not record the send outcome; the sweeper will reconcile",
                    where="record_outcome",
                    error="unavailable",
                    job_id=job.id,
                    outcome=type(outcome).__name__,
                )
                return current
            self._log_recorded(stored, outcome, stored_message_id)
            if sampled:
                self.lag.start(stored)  # its index lag, measured off the request path (lag_watch)
            return stored
        log(logging.ERROR, "outcome not recorded after repeated conflicts", job_id=job.id)
        return current

    @staticmethod
    def _log_recorded(stored: Job, outcome: Accepted | Failure, stored_message_id: str | None) -> None:
        kinds = {e["kind"] for e in stored.events[-3:]}
        if "message_id_rewritten" in kinds:
            log(
                logging.ERROR,
                "Gmail stored a different Message-ID: search-based reconciliation cannot see this message",
                job_id=stored.id,
                stored_message_id=stored_message_id,
            )
        if isinstance(outcome, Accepted) and "late_accept" in kinds:
            log(
                logging.ERROR,
                "accepted after our lease was taken over: possible duplicate, "
                + ("a person is told" if stored.state is State.REVIEW else "the attempt in flight counts it"),
                job_id=stored.id,
                gmail_id=outcome.gmail_id,
                state=stored.state.value,
            )
        if stored.state is State.REVIEW and stored.review_reason == lifecycle.ReviewReason.DUPLICATE:
            log(
                logging.ERROR,
                "duplicate: more than one copy was accepted",
                job_id=stored.id,
                copies=len(stored.known_copies),
            )

    def _sampled(self, outcome: Accepted | Failure) -> bool:
        """1 in N accepted sends (each instance's first): Message-ID read back, index lag measured."""
        every = self.verify_message_id_every
        return isinstance(outcome, Accepted) and every > 0 and next(self._accepted_sends) % every == 0

    def _stored_message_id(self, job: Job, outcome: Accepted | Failure) -> str | None:
        """Read back what Gmail stored, for a sampled accepted send (_sampled).

        Every Message-ID has the same strictly valid shape, so a rewrite by Gmail would be
        systematic: sampling finds it without a second Gmail round trip on every send (bench/:
        the read-back doubled happy-path latency). Skipped when it could outlast our lease,
        because recording the outcome matters more than this check.
        """
        if not isinstance(outcome, Accepted):
            return None
        if job.lease_until is not None:
            left_s = (job.lease_until - self.clock()).total_seconds()
            if left_s < 2 * self.read_timeout_s:
                log(logging.INFO, "stored Message-ID not read back: too little lease left", job_id=job.id)
                return None
        try:
            return self._mailer_of(job).stored_message_id(outcome.gmail_id)
        except MailboxUnavailableError as exc:
            log(logging.WARNING, "could not verify the stored Message-ID", job_id=job.id, error=str(exc))
            return None

    def _register_callback(self, job: Job, url: str) -> Job:
        """A duplicate webhook (another execution) gets its own callback: added with a compare-and-set."""
        for _ in range(MAX_RECORD_TRIES):
            if len(job.callbacks) >= MAX_CALLBACKS and url not in job.callbacks:
                raise RequestValidationError(
                    {
                        "callback_url": f"this dedup key already has {MAX_CALLBACKS} "
                        "callbacks registered; poll /status instead"
                    }
                )
            changed = lifecycle.register_callback(job, url, self.clock())
            if changed is None:
                return job
            try:
                stored = self._cas(job, changed)
            except ConcurrentUpdateError:
                job = self._reload(job)
                continue
            self._follow_up(stored)
            return stored
        log(logging.ERROR, "callback not registered after repeated conflicts", job_id=job.id)
        return job

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
