"""The orchestration of send, reconcile and sweep. Decisions come from `lifecycle`; I/O from ports.

Invariants kept here:
- the MIME is built and checked before a job is claimed: a message that cannot be built is a 400,
  never a claimed job that fails on every try;
- a send goes out only after a compare-and-set put the job in `sending` under our lease;
- a resend of a job whose earlier attempt may have landed happens only after a mailbox
  check found nothing and the index-lag window has passed (see lifecycle.apply_mailbox_check);
- a job that ends `sent` while more than one attempt may have landed is verified later
  (lifecycle.apply_verification): a second copy always reaches a human;
- an outcome we observed is never dropped: a lost compare-and-set is re-read and re-applied;
- once a job is claimed, a store outage never turns into "nothing was sent": the caller gets
  the last known state (202) and the sweeper reconciles from the mailbox.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from . import lifecycle, signals
from .callbacks import MAX_CALLBACKS
from .classify import RefusalKind, refusal_kind, unbuildable_failure
from .config import Settings
from .errors import (
    CallbackNotStoredError,
    ConcurrentUpdateError,
    HistoryExpiredError,
    IndexMissingError,
    MailboxUnavailableError,
    PayloadMismatchError,
    PublishError,
    RequestValidationError,
    SchedulerError,
    StaleReviewError,
    StoreUnavailableError,
)
from .health import health_view
from .history import CheckpointCache, copies_in_history
from .keys import job_id_for, message_id_for
from .lifecycle import QueueSlot, Timing
from .logs import log
from .mailbox_budget import Refusal
from .mailboxes import DEFAULT_MAILBOX_ID, Mailbox, MailboxDirectory
from .mime import build_mime
from .model import Accepted, Delivery, Failure, Job, MailboxHit, iso
from .notify import ReviewerTargets
from .policy import ChannelPolicies, ChannelPolicy
from .ports import CheckScheduler, Cursor, JobStore, Mailer, Notifier, ReviewPublisher
from .review import review_attributes, review_item
from .review_messages import answered_card, decision_update
from .senders import SenderMailboxes
from .signals import OVERDUE_AFTER_S, emit, refusal_reason
from .states import SWEPT_STATES, State
from .validation import SendRequest, message_from_payload, parse_send_request

MAX_RECORD_TRIES = 8  # compare-and-set retries when recording an outcome we must not lose
MAX_SWEEP_BATCHES = 200  # pages per state and sweep (10,000 jobs at 50 a page); the time budget bounds it too
MAX_NOTICES_PER_ADVANCE = 10  # callback POSTs in one reconcile call (each bounded by its deadline)
HOLD_MARGIN_S = 30.0  # a delivery pass's hold outlasts its posts' deadlines by this (clocks, the record)
MAX_PLACE_SCAN = 2000  # queued jobs /status reads to tell a queued job's place
BUDGET_RETRY = timedelta(seconds=5)  # a mailbox budget that could not be read is asked again after this


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class DecisionOutcome:
    """What a reviewer's decision did. `applied` is False when it replays an earlier identical one."""

    job: Job
    applied: bool
    result: str  # resent, marked_sent, cancelled, acknowledged, refused_copy_found
    copies: list[dict[str, Any]]  # what the mailbox showed for the Message-ID


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


class SafeSendService:
    """The send, reconcile, sweep and review use cases over the ports. Its knobs come whole from
    Settings (one declaration each, config.py); what is injected separately is what a test or the
    local stack replaces: the adapters, the clock, sleep, randomness and owner ids."""

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

    # ----------------------------------------------------------------- send
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
        draft.history_start = self._checkpoint(mailbox)  # from memory: no Gmail call on the send path
        job, created = self.store.claim_or_get(lifecycle.start_attempt(draft, now, owner, self.timing))
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

    # ------------------------------------------------------------- mailboxes
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
            if job.mailboxes and mailbox.id != job.mailboxes[-1]:
                moved = lifecycle.rebind(job, mailbox.id, now)
                moved.history_start = self._checkpoint(mailbox)
                job = self._cas(job, moved)
                log(logging.INFO, "job moved to another mailbox of its pool", job_id=job.id, mailbox=mailbox.id)
            return job, True
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
        log(
            logging.ERROR,
            "mailbox exhausted: Gmail's daily sending limit; its jobs wait or move within the pool",
            event="mailbox_exhausted",
            mailbox=mailbox.id,
            until=iso(until),
        )
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
            log(logging.ERROR, "mailbox incident not published", mailbox=mailbox.id, error=str(exc))

    def notify_incident(self, mailbox_id: str, incident: str) -> str:
        """A mailbox incident's review item arrived from Pub/Sub: post it to the reviewers' chats, one
        message per incident (threaded by mailbox). PublishError when a post failed: Pub/Sub delivers
        the item again (at least once; a chat that already has it may see it twice)."""
        until = incident.rsplit(":", 1)[-1]
        when = datetime.fromtimestamp(int(until), UTC).isoformat() if until.isdigit() else "up to 24 h"
        text = (
            f"safesend: mailbox {mailbox_id} reached Gmail's daily sending limit. Its jobs wait (queued) "
            f"until {when} or move to another mailbox of its pool; none is failed for it. See GET /mailboxes."
        )
        failed = []
        for kind in ("chat", "slack"):
            notice = {"id": incident, "kind": kind, "payload": {"text": text}, "thread": f"mailbox-{mailbox_id}"}
            if self.notifier is None or not self.notifier.can_deliver(notice):
                continue
            if not self.notifier.deliver(notice).ok:
                failed.append(kind)
        if failed:
            raise PublishError(f"mailbox incident {incident}: not delivered to {failed}")
        log(logging.WARNING, "mailbox incident told to the reviewers", mailbox=mailbox_id, incident=incident)
        return "mailbox_incident_told"

    def _take_turn(self, job: Job, policy: ChannelPolicy) -> tuple[Job, str]:
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
            deadline = self.monotonic() + self.request_budget_s
            done = self._attempt_loop(stored, owner, policy, deadline, turn=True)
            return done, "requeued" if done.state is State.QUEUED else "dequeued"
        self._follow_up(stored)
        return stored, f"dequeued_{stored.state.value}"

    def mailboxes_report(self, limit: int = MAX_PLACE_SCAN) -> dict[str, Any]:
        """What GET /mailboxes and the console show: each mailbox's budget (the shared ledger), its
        backlog of queued jobs (at most `limit` read from the store) and its state."""
        from .mailbox_views import mailboxes_view

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
        stored_message_id = self._stored_message_id(job, outcome)
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

    def _stored_message_id(self, job: Job, outcome: Accepted | Failure) -> str | None:
        """Read back what Gmail stored, for the first accepted send of this instance and then 1 in N.

        Every Message-ID has the same strictly valid shape, so a rewrite by Gmail would be
        systematic: sampling finds it without a second Gmail round trip on every send (bench/:
        the read-back doubled happy-path latency). Skipped when it could outlast our lease,
        because recording the outcome matters more than this check.
        """
        if not isinstance(outcome, Accepted) or self.verify_message_id_every <= 0:
            return None
        if next(self._accepted_sends) % self.verify_message_id_every:
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

    # ------------------------------------------------------------ reconcile
    def advance(self, job_id: str, known: Job | None = None) -> tuple[Job | None, str]:
        """Move a job one step toward a settled, verified state, if it is due. Safe to call any
        number of times.

        Called by the Cloud Tasks reconcile task and by the sweeper (which passes the job its query
        just read: every write is a compare-and-set, so a stale copy can only lose, never corrupt).
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
            return self._take_turn(job, policy)
        if not (job.state in (State.UNKNOWN, State.RETRY_WAIT) or _verifying(job)):
            return job, "notices_delivered" if delivered else "nothing_to_do"
        if not lifecycle.is_due(job, now):
            self._follow_up(job)  # make sure a task exists for the real due time
            return job, "not_due"
        if job.state in (State.SENT, State.CANCELLED):
            return self._verify(job)
        return self._check_mailbox_and_act(job, policy)

    def _check_mailbox_and_act(self, job: Job, policy: ChannelPolicy) -> tuple[Job, str]:
        owner = self.new_owner()
        if lifecycle.uses_history(job, self.clock(), policy, self.timing):
            return self._check_history(job, policy)
        if job.state is State.RETRY_WAIT and job.maybe_landed == 0 and not job.known_copies:
            decided = lifecycle.resume_after_refusals(job, self.clock(), owner, self.timing)
            hits_seen = None
        else:
            hits = self._search(job)  # MailboxUnavailableError -> caller retries
            decided = lifecycle.apply_mailbox_check(job, hits, self.clock(), owner, policy, self.timing)
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
            deadline = self.monotonic() + self.request_budget_s
            turn = lifecycle.holds_turn(stored)  # searched after leaving the queue: this is its turn
            return self._attempt_loop(stored, owner, policy, deadline, turn=turn), "resent"
        self._follow_up(stored)
        return stored, f"checked_{stored.state.value}"

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

    def _deliver_notices(self, job: Job) -> tuple[Job, int]:
        """POST the due notices, then record what happened (re-applied over a lost race). At least
        once: a crash between the POST and the record sends the same body again. The hold on them
        lasts as long as the whole pass may take, so no second deliverer posts them meanwhile; a
        destination's notices go in order, and one that fails holds back the rest of its own."""
        due = lifecycle.due_notices(job, self.clock())
        unroutable = [n for n in due if not self._can_deliver(n)]
        if unroutable:
            job = self._give_up_unroutable(job, unroutable)
            due = [n for n in due if self._can_deliver(n)]
        due = due[:MAX_NOTICES_PER_ADVANCE]
        if not due:
            return job, 0
        pass_s = sum(self._notice_deadline_s(n) for n in due)
        try:  # hold them first, so a second deliverer (task, sweep, notify instance) posts nothing
            job = self._cas(
                job, lifecycle.claim_notices(job, [n["id"] for n in due], self.clock(), pass_s + HOLD_MARGIN_S)
            )
        except ConcurrentUpdateError:
            return self._reload(job), 0  # someone else moved the job: the next task or sweep delivers
        ends = self.monotonic() + pass_s
        results: dict[str, Delivery] = {}
        failed: set[tuple[str, str]] = set()
        for notice in due:
            if lifecycle.destination(notice) in failed or self.monotonic() >= ends:
                continue  # behind a failed one of its destination (order), or past the hold's budget
            results[notice["id"]] = delivery = self._post_notice(notice)
            if not delivery.ok:
                failed.add(lifecycle.destination(notice))
            log(
                logging.INFO if delivery.ok else logging.WARNING,
                "notice",
                event=None if delivery.ok else signals.NOTIFY_DELIVERY_FAILED,
                job_id=job.id,
                kind=notice["kind"],
                notice_id=notice["id"],
                ok=delivery.ok,
                status=delivery.status,
                detail=delivery.detail,
                retry_after_s=delivery.retry_after_s,
            )
        held = [n["id"] for n in due]
        current = job
        for _ in range(MAX_RECORD_TRIES):
            updated = lifecycle.record_deliveries(current, results, self.clock(), self.callback_horizon_s, held)
            try:
                stored = self._cas(current, updated)
            except ConcurrentUpdateError:
                current = self._reload(current)
                continue
            self._log_unanswered(stored, results)
            self._follow_up(stored)
            return stored, len(results)
        return current, len(results)

    def _can_deliver(self, notice: dict[str, Any]) -> bool:
        if notice.get("kind") == "email":
            return True  # safesend's own send path: every deliverer has it
        return self.notifier is not None and self.notifier.can_deliver(notice)

    def _notice_deadline_s(self, notice: dict[str, Any]) -> float:
        if notice.get("kind") == "email":
            return self.request_budget_s + self.send_timeout_s
        return self.notifier.deadline_s(notice) if self.notifier is not None else 0.0

    def _post_notice(self, notice: dict[str, Any]) -> Delivery:
        if notice.get("kind") == "email":
            return self._email_reviewers(notice["payload"])
        assert self.notifier is not None  # noqa: S101 - _can_deliver let only routable notices through
        return self.notifier.deliver(notice)

    def _give_up_unroutable(self, job: Job, notices: list[dict[str, Any]]) -> Job:
        """Notices of a kind no route is configured for (switched off since they were queued) would
        wait for ever: given up, with the reason recorded on each."""
        kinds = sorted({n.get("kind") or "callback" for n in notices})
        reason = f"no {'/'.join(kinds)} route is configured"
        try:
            stored = self._cas(job, lifecycle.give_up_notices(job, [n["id"] for n in notices], reason, self.clock()))
        except ConcurrentUpdateError:
            return self._reload(job)
        for notice in notices:
            emit(
                signals.CALLBACK_GIVEN_UP,
                logging.ERROR,
                "notices given up: no route for their kind",
                job_id=job.id,
                kind=notice.get("kind") or "callback",
                notice_id=notice["id"],
                error=reason,
            )
        return stored

    def _log_unanswered(self, stored: Job, results: dict[str, Delivery]) -> None:
        """Loud lines for what a person or a workflow may never hear: a callback given up, a
        reviewer notice still failing past the horizon (`reviewer_notice_overdue`, for alerts)."""
        for notice in stored.notices:
            if notice["id"] not in results or results[notice["id"]].ok:
                continue
            if notice.get("gave_up_at") is not None:
                emit(
                    signals.CALLBACK_GIVEN_UP,
                    logging.ERROR,
                    "callback notice given up",
                    job_id=stored.id,
                    kind=notice.get("kind") or "callback",
                    notice_id=notice["id"],
                    error=notice.get("last_error"),
                )
            elif notice.get("overdue_at") is not None:
                emit(
                    signals.REVIEWER_NOTICE_OVERDUE,
                    logging.ERROR,
                    "reviewer notice overdue: still retried, not delivered within the callback horizon",
                    job_id=stored.id,
                    kind=notice.get("kind"),
                    notice_id=notice["id"],
                    tries=notice.get("tries"),
                    error=notice.get("last_error"),
                )

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

    # ---------------------------------------------------------------- reviewers
    def open_reviews(self, limit: int = 200) -> list[Job]:
        """Jobs waiting for a person (review, failed), oldest first: the console's list."""
        return list(self.store.find_open_reviews(limit))

    def notify(self, job_id: str, review_id: str) -> tuple[Job | None, str]:
        """A review item arrived from Pub/Sub (at least once): queue one notice per reviewer target
        for this review entry, once, and deliver them. Queued notices are retried by the outbox, so
        the Pub/Sub message can be acknowledged as soon as they are stored."""
        job = self.store.get(job_id)
        if job is None:
            return None, "not_found"
        if lifecycle.current_review_id(job) != review_id:
            return job, "stale"  # decided, or a newer review entry whose own item follows
        targets = self.reviewers.for_job(self.policies.for_job(job.channel), job.dedup_key)
        item = review_item(job, include_body=False)
        for _ in range(MAX_RECORD_TRIES):
            changed = lifecycle.add_review_notices(job, review_id, self.reviewers.payloads(targets, item), self.clock())
            if changed is None:
                break
            try:
                job = self._cas(job, changed)
                break
            except ConcurrentUpdateError:
                job = self._reload(job)
                if lifecycle.current_review_id(job) != review_id:
                    return job, "stale"
        job, _ = self._deliver_notices(job)
        log(logging.INFO, "reviewers notified", job_id=job.id, review_id=review_id, targets=targets)
        return job, "notified"

    def _email_reviewers(self, payload: dict[str, Any]) -> Delivery:
        """The reviewers' email, as the outbox stored it, through safesend's own send path (keyed by
        the review id in the reserved `review:` key space): a repeat is a replay."""
        try:
            request = parse_send_request(payload, self.default_from, reserved_ok=True)
            self.submit(request)
        except PayloadMismatchError:
            return Delivery(True, None, "already sent with other text (replay)")
        except RequestValidationError as exc:
            return Delivery(False, None, f"invalid reviewer email: {sorted(exc.fields)}")
        except StoreUnavailableError as exc:
            return Delivery(False, None, f"store unavailable: {exc}"[:200])
        return Delivery(True, None)

    def decide(self, job_id: str, review_id: str, decision: str, reviewer: str, note: str = "") -> DecisionOutcome:
        """A person's decision on a job in review or failed. Checked against the review entry it
        answers (stale: StaleReviewError); the same decision again replays its first result; a
        resend asks the mailbox first and goes through the same attempt path as any send."""
        if decision not in lifecycle.Decision.ALL:
            raise RequestValidationError({"decision": f"one of {', '.join(lifecycle.Decision.ALL)}"})
        if len(note) > lifecycle.MAX_NOTE_CHARS:
            raise RequestValidationError({"note": f"at most {lifecycle.MAX_NOTE_CHARS} characters"})
        for _ in range(MAX_RECORD_TRIES):
            job = self.store.get(job_id)
            if job is None:
                raise StaleReviewError(job_id, review_id, None)
            prior = lifecycle.prior_decision(job, review_id, decision)
            if prior is not None:
                return DecisionOutcome(job, False, prior["result"], self._copies(job))
            hits = self._search(job)  # MailboxUnavailableError -> retry later
            owner = self.new_owner()
            decided, result = lifecycle.decide(
                job, review_id, decision, reviewer, note, hits, self.clock(), owner, self.timing
            )
            try:
                stored = self._cas(
                    job,
                    lifecycle.add_decision_notices(
                        decided, review_id, self._update_payloads(decided), self.clock(), self._answered(decided)
                    ),
                )
            except ConcurrentUpdateError:
                continue  # re-read: a double click or another reviewer; replay or conflict decides
            log(
                logging.WARNING,
                "reviewer decision",
                job_id=job_id,
                review_id=review_id,
                decision=decision,
                result=result,
                reviewer=reviewer,
            )
            if stored.state is State.SENDING:
                policy = self.policies.for_job(stored.channel)
                stored = self._attempt_loop(stored, owner, policy, self.monotonic() + self.request_budget_s)
            else:
                self._follow_up(stored)
            return DecisionOutcome(stored, result != "refused_copy_found", result, self._copies(stored))
        raise StoreUnavailableError(f"job {job_id}: decision not recorded after repeated conflicts")

    def _update_payloads(self, job: Job) -> dict[str, dict[str, Any]]:
        """The thread answer for every chat target the item went to."""
        record = job.decisions[-1]
        targets = {
            n["kind"]
            for n in job.notices
            if n["id"].startswith(f"{record['review_id']}:") and n["kind"] in ("chat", "slack")
        }
        return {t: decision_update(t, record, job.id) for t in sorted(targets)}

    @staticmethod
    def _answered(job: Job) -> dict[str, dict[str, Any] | None]:
        """The pending cards of the entry this decision closed: marked answered (an email: retired)."""
        record = job.decisions[-1]
        if lifecycle.current_review_id(job) == record["review_id"]:
            return {}  # refused: the entry is still open, its card still asks
        return {
            n["id"]: None if n["kind"] == "email" else answered_card(n["kind"], n["payload"], record)
            for n in lifecycle.open_cards(job, record["review_id"])
        }

    @staticmethod
    def _copies(job: Job) -> list[dict[str, Any]]:
        return [h for h in job.mailbox_hits if "SENT" in (h.get("label_ids") or [])] or [
            {"gmail_id": gmail_id} for gmail_id in job.known_copies
        ]

    # ---------------------------------------------------------------- sweep
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
                log(logging.WARNING, "sweep could not query a state", state=state.value, error=str(exc))
        try:
            self._sweep_notices(batch, deadline, report)
        except StoreUnavailableError as exc:
            report.errors += 1
            unqueried.append(exc)
            log(logging.WARNING, "sweep could not query due callback notices", error=str(exc))
        if len(unqueried) == len(SWEPT_STATES) + 1:
            raise unqueried[-1]
        return self._finish_sweep(report)

    def _finish_sweep(self, report: SweepReport) -> SweepReport:
        """The age of the oldest open review item (one read), then the sweep's record for /health."""
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

    def health(self, sweep_interval_s: float) -> dict[str, Any]:
        """/health: what the alerts ask, from the store. Raises StoreUnavailableError."""
        oldest = self.store.find_open_reviews(1)
        return health_view(self.store.last_sweep(), oldest[0] if oldest else None, self.clock(), sweep_interval_s)

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

    # -------------------------------------------------------------- helpers
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
        pubsub_id = self.publisher.publish(review_item(held, include_body), review_attributes(held))
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
