"""Pure job transitions: each takes a job (and facts) and returns a changed copy.

No I/O and no clock of its own: the service reads the time, asks Gmail, and
persists what these functions decide with a compare-and-set on `version`.

The promise they keep is "never silent": a job ends `sent` and verified (at most
one copy can exist, or the mailbox showed exactly one), or it reaches a human
(`review`/`failed` publish a review item) with the evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from .backoff import backoff_delay
from .callbacks import (
    DELIVERY_DELAYS_S,
    MAX_NOTICES,
    MAX_RETRY_AFTER_S,
    REVIEWER_KINDS,
    next_try_at,
    notice_payload,
)
from .classify import crash_failure, unsearchable_failure, unsendable_failure
from .errors import DecisionConflictError, DecisionNotAllowedError, StaleReviewError
from .model import Accepted, Bucket, Delivery, Failure, Job, MailboxHit
from .pacing import bind
from .policy import ChannelPolicy, OnUnknown
from .review_messages import superseded_card
from .states import HUMAN_STATES, SETTLED_STATES, State, check_transition

Uniform = Callable[[float, float], float]
# Answers after which another try cannot help. Not 409: n8n answers it both before its Wait node is
# reached (retry) and after the execution ended; the horizon bounds those retries.
FINAL_REFUSALS = frozenset({400, 401, 403, 404, 405, 410, 413, 422})
# Safety bound on "definitely not accepted" retries of one job; the retry horizon is the real limit.
MAX_REFUSALS = 500


class ReviewReason:
    AMBIGUOUS = "ambiguous"  # outcome unknown after the lag window, channel never auto-resends
    DUPLICATE = "duplicate"  # more than one copy is known to exist
    MAX_ATTEMPTS = "max_attempts"  # out of attempts that may have landed
    PERMANENT_ERROR = "permanent_error"  # Gmail refused the message for good
    RETRY_HORIZON = "retry_horizon"  # refused (429, rate limits...) for longer than the retry horizon
    UNVERIFIED = "unverified"  # at the verification horizon the mailbox did not show exactly our copy
    LATE_ACCEPT = "late_accept"  # an attempt we had given up on was accepted after all
    SENT_AFTER_CANCEL = "sent_after_cancel"  # a reviewer cancelled, but a copy is out (already, or landed later)


@dataclass(frozen=True)
class Timing:
    """Global delays; a channel policy may override index lag and window."""

    lease_s: float = 120.0
    index_lag_s: float = 90.0
    unknown_window_s: float = 300.0
    recheck_s: float = 60.0
    publish_lease_s: float = 60.0
    verify_horizon_s: float = 1800.0  # last verification check of a sent job that may have two copies
    retry_horizon_s: float = 3600.0  # how long "definitely not accepted" failures are retried
    history_check_s: float = 5.0  # first look in the mailbox's change log after an ambiguous attempt (0: off)

    def index_lag(self, policy: ChannelPolicy) -> timedelta:
        return timedelta(seconds=policy.index_lag_s if policy.index_lag_s is not None else self.index_lag_s)

    def window(self, policy: ChannelPolicy) -> timedelta:
        return timedelta(
            seconds=policy.unknown_window_s if policy.unknown_window_s is not None else self.unknown_window_s
        )

    def problems(self, policies: Iterable[ChannelPolicy], send_deadline_s: float) -> list[str]:
        """Settings that would break a guarantee, globally and per channel (empty when sound).

        The lease must outlive an attempt (else a slow send is taken for a crash and resent), the
        unknown window must cover the index lag (else "not found" is read too early), and the
        verification horizon must reach past the window (else a late copy is never looked for).
        """
        found = []
        if self.lease_s <= 2 * send_deadline_s:
            found.append(f"lease ({self.lease_s:g} s) must exceed twice the send deadline ({send_deadline_s:g} s)")
        if self.recheck_s <= 0:
            found.append("recheck interval must be > 0")
        if self.history_check_s < 0:
            found.append("history check delay must be >= 0 (0 turns the change log off)")
        for policy in [None, *policies]:
            where = f"channel {policy.name}" if policy else "global"
            lag = self.index_lag(policy).total_seconds() if policy else self.index_lag_s
            window = self.window(policy).total_seconds() if policy else self.unknown_window_s
            if window < lag:
                found.append(f"{where}: unknown window ({window:g} s) must be >= index lag ({lag:g} s)")
            if self.verify_horizon_s < window:
                found.append(
                    f"{where}: verification horizon ({self.verify_horizon_s:g} s) "
                    f"must be >= unknown window ({window:g} s)"
                )
        return found


def new_job(
    job_id: str,
    dedup_key: str,
    message_id: str,
    channel: str,
    payload: dict[str, Any],
    payload_hash: str,
    now: datetime,
) -> Job:
    job = Job(
        id=job_id,
        dedup_key=dedup_key,
        message_id=message_id,
        channel=channel,
        payload=payload,
        payload_hash=payload_hash,
        created_at=now,
        updated_at=now,
    )
    job.add_event(now, "created")
    return job


def _moved(job: Job, target: State, now: datetime) -> Job:
    check_transition(job.state, target)
    changed = job.copy()
    changed.state = target
    changed.updated_at = now
    return changed


def start_attempt(job: Job, now: datetime, owner: str, timing: Timing) -> Job:
    """Claim the job for one send: a lease, so a crash is noticed when it runs out."""
    changed = _moved(job, State.SENDING, now)
    changed.attempts += 1
    changed.maybe_landed += 1  # until Gmail proves otherwise, this attempt may land
    changed.claimed_at = now
    changed.last_attempt_at = now
    changed.lease_owner = owner
    changed.lease_until = now + timedelta(seconds=timing.lease_s)
    changed.next_check_at = changed.lease_until
    changed.add_event(now, "attempt_started")
    return changed


def record_outcome(
    job: Job,
    outcome: Accepted | Failure,
    owner: str,
    now: datetime,
    policy: ChannelPolicy,
    timing: Timing,
    uniform: Uniform,
) -> Job:
    """Apply the result of our own attempt. If the job moved on meanwhile, the fact still counts."""
    ours = job.state is State.SENDING and job.lease_owner == owner
    if isinstance(outcome, Accepted):
        return _record_acceptance(job, outcome, ours, now, policy, timing)
    if not ours:
        changed = job.copy()
        changed.add_event(now, "late_failure", error=outcome.as_dict())
        return changed
    if outcome.bucket is Bucket.MAYBE_ACCEPTED:
        return _enter_unknown(job, outcome, now, first_check_at(job, now, policy, timing))
    refused = job.copy()
    refused.maybe_landed = max(0, refused.maybe_landed - 1)  # Gmail provably did not take this one
    if refused.known_copies:
        # A copy is already known (a late 200 recorded meanwhile): settle on it, never try again.
        refused.add_event(now, "attempt_refused", error=outcome.as_dict())
        settled = settle_on_known_copies(refused, now, policy, timing)
        if settled is not None:
            return settled
    if not outcome.retryable:
        return _give_up(refused, ReviewReason.PERMANENT_ERROR, now, outcome)
    return _schedule_retry(refused, outcome, now, policy, timing, uniform)


def record_paced_refusal(
    job: Job,
    outcome: Failure,
    owner: str,
    now: datetime,
    policy: ChannelPolicy,
    timing: Timing,
    wait: QueueSlot,
) -> Job:
    """Gmail refused our attempt for its mailbox's rate or daily limit (nothing was accepted): the
    job waits its mailbox's turn in `queued` instead of backing off alone toward the retry horizon.
    Pacing alone never fails a job nor makes a review item."""
    if not (job.state is State.SENDING and job.lease_owner == owner):
        return record_outcome(job, outcome, owner, now, policy, timing, lambda a, b: b)
    refused = job.copy()
    refused.maybe_landed = max(0, refused.maybe_landed - 1)
    refused.add_event(now, "attempt_refused", error=outcome.as_dict())
    settled = settle_on_known_copies(refused, now, policy, timing)
    if settled is not None:
        return settled
    refused.last_error = outcome.as_dict()
    return _enter_queue(refused, now, wait)


@dataclass(frozen=True)
class QueueSlot:
    """Where and until when a job waits: its mailbox, the next try (the budget's next free slot), the
    honest estimate of its send (Retry-After) and why (mailbox_budget.Refusal.reason, or gmail_*)."""

    mailbox: str
    next_try_at: datetime
    eta: datetime
    reason: str


def enter_queued(job: Job, owner: str, now: datetime, wait: QueueSlot) -> Job:
    """The mailbox's budget refused the attempt we had claimed, before anything reached Gmail: the
    attempt is taken back (it was never made) and the job waits for its mailbox's turn."""
    if not (job.state is State.SENDING and job.lease_owner == owner):
        raise ValueError("only our own claimed attempt can be queued before its send")
    changed = job.copy()
    changed.attempts = max(0, changed.attempts - 1)
    changed.maybe_landed = max(0, changed.maybe_landed - 1)
    return _enter_queue(changed, now, wait)


def never_admitted(job: Job, owner: str, now: datetime, mailbox: str, reason: str) -> Job:
    """No mailbox of the job's pool can ever admit the attempt we claimed (its limits are below what
    the message needs): the attempt is taken back (never made) and the job gives up now, `failed`, or
    `review` if an earlier attempt may have landed, instead of waiting a day at a time for ever."""
    if not (job.state is State.SENDING and job.lease_owner == owner):
        raise ValueError("only our own claimed attempt can be refused before its send")
    changed = job.copy()
    changed.attempts = max(0, changed.attempts - 1)
    changed.maybe_landed = max(0, changed.maybe_landed - 1)
    return _give_up(changed, ReviewReason.PERMANENT_ERROR, now, unsendable_failure(mailbox, reason))


def _enter_queue(job: Job, now: datetime, wait: QueueSlot) -> Job:
    changed = _moved(job, State.QUEUED, now)
    changed.lease_owner = None
    changed.lease_until = None
    changed.next_check_at = wait.next_try_at
    changed.queued_since = job.queued_since or now
    changed.queue_eta = wait.eta
    changed.queue_reason = wait.reason
    changed.mailboxes = bind(job.mailboxes, wait.mailbox)
    changed.add_event(now, "queued", mailbox=wait.mailbox, reason=wait.reason, eta=wait.eta)
    return changed


def leave_queue(job: Job, now: datetime, owner: str, timing: Timing) -> Job:
    """Its mailbox's turn came. Nothing may have landed: the next attempt starts (sending). An
    earlier attempt may have: back to retry_wait, due now, so the mailbox is searched before any
    resend, as for every retry. The time queued is added to `retrying_since`: it never counts
    toward the retry horizon."""
    if job.state is not State.QUEUED:
        raise ValueError(f"only a queued job leaves the queue, not a {job.state} one")
    changed = job.copy()
    if changed.retrying_since is not None and changed.queued_since is not None:
        changed.retrying_since += max(now - changed.queued_since, timedelta(0))
    changed.queued_since = None
    changed.queue_eta = None
    changed.queue_reason = None
    changed.add_event(now, "dequeued", mailbox=current_mailbox(changed))
    if changed.maybe_landed == 0 and not changed.known_copies:
        return start_attempt(changed, now, owner, timing)
    waiting = _moved(changed, State.RETRY_WAIT, now)
    waiting.next_check_at = now
    return waiting


def holds_turn(job: Job) -> bool:
    """The job left its mailbox's queue and has not been queued again: its next attempt is its
    turn (searched first when an earlier attempt may have landed), not a new send behind the backlog."""
    for event in reversed(job.events):
        if event.get("kind") in ("queued", "dequeued"):
            return bool(event["kind"] == "dequeued")
    return False


def rebind(job: Job, mailbox: str, now: datetime) -> Job:
    """Move a job to another mailbox of its pool: only while none of its attempts may have landed.
    The move is recorded (events and the binding list) and the history checkpoint, which belongs to
    the old mailbox's change log, is dropped (the caller sets the new mailbox's one, if any)."""
    if job.maybe_landed > 1 or (job.maybe_landed == 1 and job.state is not State.SENDING):
        raise ValueError("a job may move only while none of its attempts may have landed")
    changed = job.copy()
    changed.mailboxes = bind(job.mailboxes, mailbox)
    changed.history_start = None
    changed.updated_at = now
    changed.add_event(now, "mailbox_moved", mailbox=mailbox, previous=current_mailbox(job))
    return changed


def current_mailbox(job: Job) -> str | None:
    return job.mailboxes[-1] if job.mailboxes else None


def _give_up(job: Job, reason: str, now: datetime, outcome: Failure) -> Job:
    """No more sends. `failed` says "nothing went out", which is true only if no earlier attempt
    may have landed; otherwise the honest answer is "unclear" and a human checks the mailbox."""
    if job.maybe_landed:
        return _enter_human(job, State.REVIEW, ReviewReason.AMBIGUOUS, now, outcome)
    return _enter_human(job, State.FAILED, reason, now, outcome)


def _schedule_retry(
    job: Job, outcome: Failure, now: datetime, policy: ChannelPolicy, timing: Timing, uniform: Uniform
) -> Job:
    """Refusals cost nothing in duplicates, so they are bounded in time (the retry horizon, counted
    from the first refusal) rather than in attempts; Retry-After is honoured in full."""
    since = job.retrying_since or job.last_attempt_at or now
    refusals = job.refusals + 1
    delay = backoff_delay(refusals, policy.retry_base_s, policy.retry_cap_s, outcome.retry_after_s, uniform)
    if outcome.retry_after_s is not None:
        delay = max(delay, outcome.retry_after_s)
    retry_at = now + timedelta(seconds=delay)
    counted = job.copy()
    counted.refusals = refusals
    counted.retrying_since = since
    if retry_at > since + timedelta(seconds=timing.retry_horizon_s) or refusals > MAX_REFUSALS:
        return _give_up(counted, ReviewReason.RETRY_HORIZON, now, outcome)
    changed = _moved(counted, State.RETRY_WAIT, now)
    changed.next_check_at = retry_at
    changed.lease_owner = None
    changed.lease_until = None
    changed.last_error = outcome.as_dict()
    changed.add_event(now, "attempt_failed", error=outcome.as_dict(), retry_in_s=round(delay, 3))
    return changed


def _record_acceptance(
    job: Job, outcome: Accepted, ours: bool, now: datetime, policy: ChannelPolicy, timing: Timing
) -> Job:
    """Gmail took an attempt. Two different accepted ids are two copies: a proven duplicate."""
    changed = job.copy()
    _note_copies(changed, [job.provider_ref["gmail_id"]] if job.provider_ref else [])
    _note_copies(changed, [outcome.gmail_id])
    ref = outcome.as_ref()
    if ours or job.state in (State.UNKNOWN, State.RETRY_WAIT, State.QUEUED):
        if len(changed.known_copies) > 1:
            changed.add_event(now, "accepted", provider_ref=ref)
            return _enter_human(changed, State.REVIEW, ReviewReason.DUPLICATE, now, None)
        return _mark_sent(changed, ref, now, "accepted", policy, timing, stored=outcome.stored)
    changed.add_event(now, "late_accept", provider_ref=ref)
    if job.state is State.SENT and _unaccepted_duplicate(changed):
        return _enter_human(changed, State.REVIEW, ReviewReason.DUPLICATE, now, None)
    if job.state in HUMAN_STATES:
        # A human was told "not sent" or "unclear": the news that it went out must reach them too.
        return _enter_human(changed, State.REVIEW, ReviewReason.LATE_ACCEPT, now, None)
    if job.state is State.CANCELLED:
        # A person cancelled because nothing had gone out; it has now: they must hear it.
        return _enter_human(changed, State.REVIEW, ReviewReason.SENT_AFTER_CANCEL, now, None)
    return changed  # sending: another attempt is in flight, and its outcome counts this copy


def note_stored_message_id(job: Job, stored_message_id: str | None, now: datetime) -> Job:
    """Record what Gmail stored as Message-ID; a rewrite would blind search-based reconciliation."""
    if stored_message_id is None:
        return job
    changed = job.copy()
    changed.stored_message_id = stored_message_id
    if stored_message_id != job.message_id:
        changed.add_event(now, "message_id_rewritten", stored_message_id=stored_message_id)
    return changed


def expire_lease(job: Job, now: datetime, policy: ChannelPolicy, timing: Timing) -> Job:
    """A `sending` job whose lease ran out: the instance died somewhere around the send. Unknown."""
    if job.state is not State.SENDING or job.lease_until is None or job.lease_until > now:
        raise ValueError("only a sending job with an expired lease can be recovered")
    return _enter_unknown(job, crash_failure(), now, first_check_at(job, now, policy, timing))


def mailbox_gone(job: Job, mailbox: str, now: datetime) -> Job:
    """The mailbox that may hold this job's copy is no longer configured. No other mailbox's search can
    settle it and no resend may go out on a guess: a person is told now (`unverified` for a sent job
    under verification, else `ambiguous`), with the reason as its last error."""
    if job.state not in (State.UNKNOWN, State.RETRY_WAIT, State.SENT, State.CANCELLED):
        raise ValueError(f"a {job.state} job is not waiting for a mailbox check")
    reason = ReviewReason.UNVERIFIED if job.state is State.SENT else ReviewReason.AMBIGUOUS
    return _enter_human(job, State.REVIEW, reason, now, unsearchable_failure(mailbox))


def search_from(job: Job, policy: ChannelPolicy, timing: Timing) -> datetime:
    """When a search can first see this job's latest attempt (its index lag after the attempt)."""
    return (job.last_attempt_at or job.claimed_at or job.created_at) + timing.index_lag(policy)


def first_check_at(job: Job, now: datetime, policy: ChannelPolicy, timing: Timing) -> datetime:
    """The first look after an ambiguous attempt: the change log in seconds when the job has a
    checkpoint, else the search once the index can show the copy (Gmail may have accepted it any
    time since the attempt began; the window still guards resends)."""
    search = max(now, search_from(job, policy, timing))
    if job.history_start and timing.history_check_s > 0:
        return min(search, now + timedelta(seconds=timing.history_check_s))
    return search


def uses_history(job: Job, now: datetime, policy: ChannelPolicy, timing: Timing) -> bool:
    """This check reads the change log (before the search could see the copy), not the search."""
    return (
        job.state is State.UNKNOWN
        and bool(job.history_start)
        and timing.history_check_s > 0
        and now < search_from(job, policy, timing)
    )


def apply_history_check(
    job: Job, hits: Sequence[MailboxHit], now: datetime, policy: ChannelPolicy, timing: Timing
) -> Job:
    """A copy in the change log settles the job now (one: sent, more: duplicate). None is no evidence
    (the log lags too): look again, each gap as long as the time since the attempt (at least twice the
    first delay: 5, 15, 30, 60 s...), so an attempt Gmail never saw costs a few reads, not one every
    few seconds; then hand over to the search once the index can show the copy."""
    checked, sent = _checked(job, hits, now, "history_checked")
    settled = _settled_by_copies(checked, sent, now, "found_in_history", policy, timing)
    if settled is not None:
        return settled
    again = _moved(checked, State.UNKNOWN, now)
    since_attempt = now - (job.last_attempt_at or job.claimed_at or job.created_at)
    gap = max(timedelta(seconds=2 * timing.history_check_s), since_attempt)
    again.next_check_at = min(now + gap, max(now, search_from(job, policy, timing)))
    return again


def _settled_by_copies(
    checked: Job, sent: Sequence[MailboxHit], now: datetime, how: str, policy: ChannelPolicy, timing: Timing
) -> Job | None:
    """What the copies known after a check prove: more than one, a duplicate a person must see;
    exactly one, sent; none, nothing yet (None: the caller decides what waiting means)."""
    if len(checked.known_copies) > 1:
        return _enter_human(checked, State.REVIEW, ReviewReason.DUPLICATE, now, None)
    if checked.known_copies:
        ref = sent[0].as_dict() if sent else {"gmail_id": checked.known_copies[0], "thread_id": None}
        # Not shown stored by this check (known from an answer, which for a Graph 202 proves nothing
        # stored, or seen only in transit as a Graph draft): a later look verifies it.
        stored = any(not h.in_transit for h in sent)
        return _mark_sent(checked, ref, now, how, policy, timing, stored=stored)
    return None


def without_history(job: Job, now: datetime, policy: ChannelPolicy, timing: Timing) -> Job:
    """The checkpoint is older than Gmail keeps the log (404): settle by search only."""
    changed = job.copy()
    changed.history_start = None
    changed.next_check_at = max(now, search_from(job, policy, timing))
    changed.add_event(now, "history_expired")
    return changed


def apply_mailbox_check(
    job: Job,
    hits: Sequence[MailboxHit],
    now: datetime,
    owner: str,
    policy: ChannelPolicy,
    timing: Timing,
    searched_at: datetime | None = None,
) -> Job:
    """Settle an unknown or retry_wait job from what the mailbox holds for its Message-ID.

    Exactly one known copy: sent. More than one: a duplicate, a human must know.
    None: inconclusive until the index-lag window after the last attempt has
    passed; after it, a retry_wait job is resent (it was never accepted) and an
    unknown one follows its channel policy. `searched_at`: when the search was made (its
    answer may come much later): only a search made past the window lets a resend go.
    """
    if job.state not in (State.UNKNOWN, State.RETRY_WAIT):
        raise ValueError(f"mailbox checks apply to unknown/retry_wait jobs, not {job.state}")
    checked, sent = _checked(job, hits, now, "mailbox_checked")
    settled = _settled_by_copies(checked, sent, now, "found_in_mailbox", policy, timing)
    if settled is not None:
        return settled
    if checked.state is State.RETRY_WAIT:
        return start_attempt(checked, now, owner, timing)
    window_end = (checked.last_attempt_at or checked.created_at) + timing.window(policy)
    if (searched_at or now) < window_end:
        rechecked = _moved(checked, State.UNKNOWN, now)
        rechecked.next_check_at = min(now + timedelta(seconds=timing.recheck_s), window_end)
        return rechecked
    if policy.on_unknown is OnUnknown.REVIEW:
        return _enter_human(checked, State.REVIEW, ReviewReason.AMBIGUOUS, now, None)
    if checked.maybe_landed >= policy.max_attempts:
        return _enter_human(checked, State.REVIEW, ReviewReason.MAX_ATTEMPTS, now, None)
    return start_attempt(checked, now, owner, timing)


def settle_on_known_copies(job: Job, now: datetime, policy: ChannelPolicy, timing: Timing) -> Job | None:
    """Before any new attempt: a copy already known (a late 200 recorded meanwhile) settles the job
    (one: sent, more: duplicate) instead of a send that would make one more. None: no copy known."""
    if not job.known_copies:
        return None
    return _settled_by_copies(job, [], now, "settled_on_known_copies", policy, timing)


def resume_after_refusals(job: Job, now: datetime, owner: str, timing: Timing) -> Job:
    """A retry_wait job none of whose attempts can have landed: resend without asking the mailbox."""
    if job.state is not State.RETRY_WAIT or job.maybe_landed:
        raise ValueError("only a retry_wait job with no attempt in doubt skips the mailbox check")
    return start_attempt(job, now, owner, timing)


def apply_verification(job: Job, hits: Sequence[MailboxHit], now: datetime) -> Job:
    """Check a `sent` job that may have more than one copy, or whose one copy no answer showed
    stored (a Graph 202; see _mark_sent).

    A second copy at any check: review (duplicate). Our one copy shown: verified at once when only
    one attempt may have landed, else at the end of the verification horizon. Anything else then
    (the search cannot see the copy we know of): a human is told, because one copy can no longer
    be proven (for a 202: transport may have refused it after the answer, nothing sent).
    """
    if not needs_verification(job):
        raise ValueError("only an unverified sent job is verified")
    checked, sent = _checked(job, hits, now, "verification_checked")
    if _unaccepted_duplicate(checked):
        return _enter_human(checked, State.REVIEW, ReviewReason.DUPLICATE, now, None)
    one_copy_shown = len(sent) == 1 and not sent[0].in_transit and checked.known_copies == [sent[0].gmail_id]
    # One attempt makes one copy at most: only its witness was missing (a 202), and here it is.
    witnessed_single = one_copy_shown and checked.maybe_landed <= 1
    if not witnessed_single and checked.verify_until is not None and now < checked.verify_until:
        checked.next_check_at = checked.verify_until
        return checked
    if one_copy_shown:
        checked.verified = True
        checked.next_check_at = None
        checked.add_event(now, "verified", gmail_id=sent[0].gmail_id)
        return checked
    if person_accepted_copies(checked) is not None:
        # A person settled it with the copies they saw; no further copy appeared up to the horizon.
        checked.next_check_at = None
        checked.add_event(now, "verification_ended", known_copies=len(checked.known_copies))
        return checked
    return _enter_human(checked, State.REVIEW, ReviewReason.UNVERIFIED, now, None)


def person_accepted_copies(job: Job) -> frozenset[str] | None:
    """The copies a reviewer saw when their decision made this job `sent` (mark sent, acknowledge);
    None when the job is `sent` by the automatic path."""
    applied = [d for d in job.decisions if d.get("applied")]
    if job.state is not State.SENT or not applied or applied[-1]["result"] not in ("marked_sent", "acknowledged"):
        return None
    return frozenset(applied[-1].get("copies") or ())


def _unaccepted_duplicate(job: Job) -> bool:
    """More than one copy, and not only those a person already accepted: a duplicate to report."""
    if len(job.known_copies) <= 1:
        return False
    accepted = person_accepted_copies(job)
    return accepted is None or not set(job.known_copies) <= accepted


def claim_review_publish(job: Job, now: datetime, timing: Timing) -> Job:
    """Outbox step 1: hold the publish for a while so two sweeps do not both publish."""
    if job.state not in HUMAN_STATES or job.review_published_at is not None:
        raise ValueError("nothing to publish")
    changed = job.copy()
    changed.next_check_at = now + timedelta(seconds=timing.publish_lease_s)
    changed.updated_at = now
    return changed


def mark_review_published(job: Job, now: datetime, message_id: str, notify_timeout_s: float | None = None) -> Job:
    """Outbox step 2: published. With reviewer targets configured, the notify function must take it up
    within `notify_timeout_s`, else it is published again (an item Pub/Sub dead-lettered)."""
    changed = job.copy()
    changed.review_published_at = now
    notified = job.review_notified_entry == job.review_entries  # notify's first write came first
    changed.next_check_at = now + timedelta(seconds=notify_timeout_s) if notify_timeout_s and not notified else None
    changed.updated_at = now
    changed.add_event(now, "review_published", pubsub_message_id=message_id, reason=job.review_reason)
    return changed


def needs_republish(job: Job, now: datetime) -> bool:
    return (
        job.state in HUMAN_STATES
        and job.review_published_at is not None
        and job.review_notified_entry != job.review_entries
        and is_due(job, now)
    )


def has_stale_due_time(job: Job, now: datetime) -> bool:
    """A published and notified review entry waits for a person only: a due time on it is left over
    (written by a publisher that lost a race to notify) and would keep the job due for ever."""
    return (
        job.state in HUMAN_STATES
        and job.review_published_at is not None
        and job.review_notified_entry == job.review_entries
        and is_due(job, now)
    )


def clear_stale_due_time(job: Job, now: datetime) -> Job:
    changed = job.copy()
    changed.next_check_at = None
    changed.updated_at = now
    return changed


def republish_unnotified(job: Job, now: datetime) -> Job:
    """The review item was published but never reached the reviewers' channels: publish it again
    (same review id: consumers dedupe on it)."""
    changed = job.copy()
    changed.review_published_at = None
    changed.next_check_at = now
    changed.updated_at = now
    changed.add_event(now, "review_republished", review_id=current_review_id(job))
    return changed


def add_decision_notices(
    job: Job,
    review_id: str,
    payloads: dict[str, dict[str, Any]],
    now: datetime,
    answered: dict[str, dict[str, Any] | None] | None = None,
) -> Job:
    """The decision's answer in each chat the item went to: one line per decision (keyed by the
    decision, so a second decision on the same entry is a line of its own). The entry's pending
    cards are marked answered (or retired) in the same write: no card says "needs a person" after
    the answer, and each line waits behind its card (due_notices keeps a thread in order)."""
    if not payloads and not answered:
        return job
    changed = job.copy()
    answer_cards(changed, answered or {}, now)
    return add_review_notices(changed, review_id, payloads, now, suffix=f":decision{len(job.decisions)}") or changed


def lease_expired(job: Job, now: datetime) -> bool:
    return job.state is State.SENDING and job.lease_until is not None and job.lease_until <= now


def is_due(job: Job, now: datetime) -> bool:
    return job.next_check_at is not None and job.next_check_at <= now


def needs_publish(job: Job) -> bool:
    return job.state in HUMAN_STATES and job.review_published_at is None


def needs_verification(job: Job) -> bool:
    return job.state is State.SENT and job.verified is False and job.next_check_at is not None


def _checked(job: Job, hits: Sequence[MailboxHit], now: datetime, kind: str) -> tuple[Job, list[MailboxHit]]:
    """A copy of the job with one mailbox check recorded; the SENT hits are returned too."""
    sent = [h for h in hits if h.is_sent]
    checked = job.copy()
    checked.checks += 1
    checked.mailbox_hits = [h.as_dict() for h in hits]
    _note_copies(checked, [h.gmail_id for h in sent])
    checked.add_event(now, kind, hits=len(hits), sent_hits=len(sent), known_copies=len(checked.known_copies))
    return checked, sent


def _note_copies(job: Job, gmail_ids: Iterable[str]) -> None:
    for gmail_id in gmail_ids:
        if gmail_id not in job.known_copies:
            job.known_copies.append(gmail_id)


def _mark_sent(
    job: Job,
    provider_ref: dict[str, Any],
    now: datetime,
    how: str,
    policy: ChannelPolicy,
    timing: Timing,
    stored: bool = True,
) -> Job:
    """Sent. Verified at once when no other attempt can have landed and the evidence shows the copy
    stored (`stored`: see model.Accepted); otherwise the mailbox is asked again after the index lag
    and at the end of the verification horizon (apply_verification)."""
    changed = _moved(job, State.SENT, now)
    changed.provider_ref = provider_ref
    changed.lease_owner = None
    changed.lease_until = None
    if changed.maybe_landed <= 1 and stored:
        changed.verified = True
        changed.next_check_at = None
        changed.add_event(now, how, provider_ref=provider_ref)
        return changed
    last_attempt = changed.last_attempt_at or now
    first_check = last_attempt + timing.index_lag(policy)
    changed.verified = False
    changed.verify_until = last_attempt + timedelta(seconds=timing.verify_horizon_s)
    # A check that just found our copy past the index lag is the first check: go to the horizon.
    changed.next_check_at = first_check if first_check > now else changed.verify_until
    changed.add_event(now, how, provider_ref=provider_ref, verification="pending", maybe_landed=changed.maybe_landed)
    return changed


def _enter_unknown(job: Job, failure: Failure, now: datetime, check_at: datetime) -> Job:
    changed = _moved(job, State.UNKNOWN, now)
    changed.lease_owner = None
    changed.lease_until = None
    changed.next_check_at = check_at
    changed.last_error = failure.as_dict()
    changed.add_event(now, "outcome_unknown", error=failure.as_dict())
    return changed


def _enter_human(job: Job, target: State, reason: str, now: datetime, failure: Failure | None) -> Job:
    """Hand the job to a human: a new review entry (new review_id), published by the outbox.
    Re-entering review with new evidence is allowed: the earlier review item goes stale."""
    changed = job.copy() if job.state is target is State.REVIEW else _moved(job, target, now)
    changed.updated_at = now
    changed.review_reason = reason
    changed.review_entries += 1
    changed.review_published_at = None
    changed.lease_owner = None
    changed.lease_until = None
    changed.next_check_at = now  # due in the review outbox right away
    if changed.state is State.REVIEW and changed.verified:
        changed.verified = False  # a job in review is not a verified single send
    if failure is not None:
        changed.last_error = failure.as_dict()
    changed.add_event(now, f"entered_{target.value}", reason=reason, error=failure.as_dict() if failure else None)
    return changed


# ----------------------------------------------------------------------------- callbacks
def register_callback(job: Job, url: str, now: datetime) -> Job | None:
    """Add a request's callback URL (None: already there). A job already settled owes it a notice now."""
    if url in job.callbacks:
        return None
    changed = job.copy()
    changed.callbacks.append(url)
    changed.add_event(now, "callback_registered", host=urlsplit(url).hostname)
    if changed.state in SETTLED_STATES:
        _add_notice(changed, url, now)
    return changed


def queue_notices(before: Job, after: Job, now: datetime) -> Job:
    """Every write goes through here: a job that settles, or re-enters review with news, owes each
    callback a notice (stored with its exact content, so every retry sends the same bytes). A new
    review entry marks the replaced entry's pending cards superseded."""
    after = supersede_cards(before, after, now)
    if after.state not in SETTLED_STATES or not after.callbacks:
        return after
    if before.state is after.state and before.review_entries == after.review_entries:
        return after
    changed = after.copy()
    for url in changed.callbacks:
        _add_notice(changed, url, now)
    return changed


def due_notices(job: Job, now: datetime) -> list[dict[str, Any]]:
    """The pending notices due now, in order per destination: one that waits (a retry, another
    deliverer's hold) holds back the later ones of its destination, so they never overtake it."""
    blocked: set[tuple[str, str]] = set()
    due = []
    for notice in job.notices:
        if not _pending(notice) or destination(notice) in blocked:
            continue
        if notice["due_at"] > now:
            blocked.add(destination(notice))
            continue
        due.append(notice)
    return due


def destination(notice: dict[str, Any]) -> tuple[str, str]:
    """Where a notice goes: its callback URL, or its kind's thread (one chat thread per job)."""
    kind = notice.get("kind") or "callback"
    return kind, str(notice.get("url") or notice.get("thread") or "")


def is_reviewer_notice(notice: dict[str, Any]) -> bool:
    return (notice.get("kind") or "callback") in REVIEWER_KINDS


def record_deliveries(
    job: Job, results: dict[str, Delivery], now: datetime, horizon_s: float, released: Iterable[str] = ()
) -> Job:
    """Apply delivery results (by notice id): delivered, tried again later, or given up.

    A callback is given up at the horizon (or on a final refusal). A reviewer notice (chat, slack,
    email) is never given up: it is retried with a capped backoff for as long as it takes, and once
    past the horizon it is marked overdue (the service logs `reviewer_notice_overdue` for alerts).
    A server's Retry-After is honoured, bounded by MAX_RETRY_AFTER_S. `released`: notices held for
    this pass but not posted, due again (behind their destination's failed one)."""
    changed = job.copy()
    unposted = set(released) - set(results)
    for notice in changed.notices:
        if notice["id"] in unposted and _pending(notice):
            notice["held_until"] = None  # held but not posted (its destination failed first)
            notice["due_at"] = now
        result = results.get(notice["id"])
        if result is None or not _pending(notice):
            continue
        notice["tries"] += 1
        notice["held_until"] = None
        if result.ok:
            notice["delivered_at"] = now
            changed.add_event(now, "notice_delivered", notice_id=notice["id"], status=result.status)
            continue
        notice["last_error"] = (f"HTTP {result.status}" if result.status else "") + (
            f" {result.detail}" if result.detail else ""
        )
        wait = _retry_after(result)
        if is_reviewer_notice(notice):
            notice["due_at"] = max(now + timedelta(seconds=_delay(notice["tries"])), now + wait)
            if notice.get("overdue_at") is None and now >= notice["created_at"] + timedelta(seconds=horizon_s):
                notice["overdue_at"] = now
                changed.add_event(now, "reviewer_notice_overdue", notice_id=notice["id"], error=notice["last_error"])
            continue
        final = result.status in FINAL_REFUSALS  # e.g. n8n: 401 bad resume signature, 404 no such execution
        retry_at = None if final else next_try_at(notice["tries"], now, notice["created_at"], horizon_s)
        if retry_at is not None and now + wait > retry_at:
            later = now + wait
            retry_at = later if later <= notice["created_at"] + timedelta(seconds=horizon_s) else None
        if retry_at is None:
            notice["gave_up_at"] = now
            changed.add_event(now, "notice_given_up", notice_id=notice["id"], error=notice["last_error"])
        else:
            notice["due_at"] = retry_at
    _refresh_notice_due(changed)
    return changed


def give_up_notices(job: Job, notice_ids: Iterable[str], reason: str, now: datetime) -> Job:
    """Give up notices no deliverer can act on (their kind has no configured route), with the reason
    recorded: never left pending, where they would hold the sweep's oldest due time for ever."""
    changed = job.copy()
    wanted = set(notice_ids)
    for notice in changed.notices:
        if notice["id"] in wanted and _pending(notice):
            notice["gave_up_at"] = now
            notice["last_error"] = reason
            changed.add_event(now, "notice_given_up", notice_id=notice["id"], error=reason)
    _refresh_notice_due(changed)
    return changed


def claim_notices(job: Job, notice_ids: Iterable[str], now: datetime, hold_s: float) -> Job:
    """Hold due notices for one deliverer (two notify instances, a task and a sweep) for as long as
    its whole pass may take: the others see them due only after it. A deliverer that dies after
    posting lets the hold lapse: at least once."""
    changed = job.copy()
    wanted = set(notice_ids)
    until = now + timedelta(seconds=hold_s)
    for notice in changed.notices:
        if notice["id"] in wanted and _pending(notice):
            notice["due_at"] = until
            notice["held_until"] = until
    _refresh_notice_due(changed)
    return changed


def add_review_notices(
    job: Job, review_id: str, payloads: dict[str, dict[str, Any]], now: datetime, suffix: str = ""
) -> Job | None:
    """Queue one notice per reviewer channel (chat, slack, email) for this review entry, once: the id
    is the review id and the target, so a redelivered Pub/Sub message or a second notify adds
    nothing (and the email keeps the text it was queued with). Returns None when every one is
    already queued."""
    changed = job.copy()
    known = {n["id"] for n in changed.notices}
    added = False
    for target, payload in payloads.items():
        notice_id = f"{review_id}:{target}{suffix}"
        if notice_id not in known:
            _append_notice(
                changed,
                {
                    "id": notice_id,
                    "kind": target,
                    "url": None,
                    "thread": job.id,
                    "entry": review_id,
                    "card": not suffix,
                    "payload": payload,
                },
                now,
                due_at=_after_holds(changed, target, job.id, now),
            )
            added = True
    if not suffix and changed.review_notified_entry != job.review_entries:
        changed.review_notified_entry = job.review_entries
        if changed.review_published_at is not None:  # else the publisher's hold stays until it marks it
            changed.next_check_at = None  # nothing left due for this review entry (see republish_unnotified)
        added = True
    return changed if added else None


def answer_cards(job: Job, answered: dict[str, dict[str, Any] | None], now: datetime, mark: str = "answered") -> None:
    """In place: the pending cards of a closed entry now carry the answer (`answered` maps their ids
    to the marked payload), or are retired (None: an email that has not gone out yet). `mark`:
    why the entry closed (answered, or superseded by a newer entry)."""
    for notice in job.notices:
        if notice["id"] not in answered or not _pending(notice):
            continue
        payload = answered[notice["id"]]
        notice["marked"] = mark
        if payload is None:
            notice["gave_up_at"] = now
            notice["last_error"] = f"retired: the entry was {mark} before it went out"
            job.add_event(now, "notice_retired", notice_id=notice["id"], reason=mark)
        else:
            notice["payload"] = payload
    _refresh_notice_due(job)


def open_cards(job: Job, review_id: str | None = None) -> list[dict[str, Any]]:
    """The pending cards (and email) of one review entry (None: of any entry) not yet marked
    answered or superseded."""
    return [
        n
        for n in job.notices
        if _pending(n) and n.get("card") and not n.get("marked") and (review_id is None or n.get("entry") == review_id)
    ]


def supersede_cards(before: Job, after: Job, now: datetime) -> Job:
    """A new review entry replaced an open one: the old entry's cards still pending go out marked
    superseded (its email is retired), never as a question nobody can answer any more."""
    if after.review_entries == before.review_entries:
        return after
    current = current_review_id(after)
    stale = [n for n in open_cards(after) if n.get("entry") != current]
    if not stale:
        return after
    changed = after.copy()
    marked = {n["id"]: None if n["kind"] == "email" else superseded_card(n["kind"], n["payload"]) for n in stale}
    answer_cards(changed, marked, now, mark="superseded")
    return changed


def _add_notice(job: Job, url: str, now: datetime) -> None:
    """A new callback notice supersedes the older undelivered ones of its URL (never sent after it):
    the workflow ends on the newest outcome. It waits for a hold on one being posted right now."""
    notice_id = f"{job.id}:n{job.notice_seq}"
    job.notice_seq += 1
    due_at = max(now + timedelta(seconds=DELIVERY_DELAYS_S[0]), _after_holds(job, "callback", url, now))
    for older in job.notices:
        if _pending(older) and destination(older) == ("callback", url):
            older["gave_up_at"] = now
            older["last_error"] = f"superseded by {notice_id}"
            job.add_event(now, "notice_superseded", notice_id=older["id"], by=notice_id)
    _append_notice(
        job,
        {
            "id": notice_id,
            "kind": "callback",
            "url": url,
            "payload": notice_payload(job, notice_id, now, current_review_id(job)),
        },
        now,
        due_at=due_at,
    )


def _after_holds(job: Job, kind: str, where: str, now: datetime) -> datetime:
    """Not before a deliverer's hold on a notice of the same destination runs out: the one it is
    posting now must land first (its post ends within the hold)."""
    latest = now
    for notice in job.notices:
        held = notice.get("held_until")
        if destination(notice) == (kind, where) and isinstance(held, datetime) and held > latest:
            latest = held
    return latest


def _append_notice(job: Job, notice: dict[str, Any], now: datetime, due_at: datetime) -> None:
    job.notices.append(
        {
            **notice,
            "created_at": now,
            "due_at": due_at,
            "held_until": None,
            "tries": 0,
            "delivered_at": None,
            "gave_up_at": None,
            "last_error": None,
        }
    )
    settled = [i for i, n in enumerate(job.notices) if not _pending(n)]
    for index in reversed(settled[: max(0, len(job.notices) - MAX_NOTICES)]):
        del job.notices[index]  # the oldest delivered or abandoned ones go first
    _refresh_notice_due(job)


def _delay(tries: int) -> float:
    return DELIVERY_DELAYS_S[min(tries, len(DELIVERY_DELAYS_S) - 1)]


def _retry_after(result: Delivery) -> timedelta:
    if result.retry_after_s is None or result.retry_after_s <= 0:
        return timedelta(0)
    return timedelta(seconds=min(result.retry_after_s, MAX_RETRY_AFTER_S))


def _pending(notice: dict[str, Any]) -> bool:
    return notice.get("delivered_at") is None and notice.get("gave_up_at") is None


def _refresh_notice_due(job: Job) -> None:
    """The earliest due time that a deliverer can act on: the oldest pending notice per destination
    (the later ones follow it in the same pass)."""
    firsts: dict[tuple[str, str], datetime] = {}
    for notice in job.notices:
        if _pending(notice):
            firsts.setdefault(destination(notice), notice["due_at"])
    job.notice_due_at = min(firsts.values()) if firsts else None


# ----------------------------------------------------------------------------- reviewer decisions
class Decision:
    RESEND = "resend"  # a fresh mailbox check first; refused if any copy exists
    MARK_SENT = "mark_sent"  # the reviewer's word, with whatever copy the mailbox shows
    CANCEL = "cancel"  # nothing more is sent (a copy already out, or landing later, still reaches a person)
    ACKNOWLEDGE = "acknowledge"  # a duplicate went out: the reviewer has seen it

    ALL = (RESEND, MARK_SENT, CANCEL, ACKNOWLEDGE)


MAX_NOTE_CHARS = 2000


def current_review_id(job: Job) -> str | None:
    """The review entry a decision must answer; None when the job waits for nobody."""
    return f"{job.id}:{job.review_entries}" if job.state in HUMAN_STATES else None


def allowed_decisions(job: Job) -> list[str]:
    if job.state not in HUMAN_STATES:
        return []
    if job.review_reason in (ReviewReason.DUPLICATE, ReviewReason.SENT_AFTER_CANCEL):
        return [Decision.ACKNOWLEDGE]  # the copies are out: resending or cancelling changes nothing
    return [Decision.RESEND, Decision.MARK_SENT, Decision.CANCEL]


def prior_decision(job: Job, review_id: str, decision: str) -> dict[str, Any] | None:
    """The recorded answer to replay when the same decision comes again (a double click, a retry);
    raises when the decision does not apply: stale review id, another decision already taken."""
    recorded = [d for d in job.decisions if d["review_id"] == review_id]
    same = [d for d in recorded if d["decision"] == decision]
    if same:
        return same[-1]
    current = current_review_id(job)
    if review_id != current:
        raise StaleReviewError(job.id, review_id, current)
    taken = [d for d in recorded if d.get("applied")]
    if taken:
        raise DecisionConflictError(
            f"review {review_id} was already answered: {taken[-1]['decision']} by {taken[-1]['reviewer']}"
        )
    if decision not in allowed_decisions(job):
        raise DecisionNotAllowedError(
            f"{decision} does not apply to this job now (allowed: {', '.join(allowed_decisions(job)) or 'none'})"
        )
    return None


def decide(
    job: Job,
    review_id: str,
    decision: str,
    reviewer: str,
    note: str,
    hits: Sequence[MailboxHit],
    now: datetime,
    owner: str,
    timing: Timing,
) -> tuple[Job, str]:
    """Apply a reviewer's decision (already checked by prior_decision) with the mailbox as it is now.

    Returns the changed job and the result. A resend that finds a copy is refused and leaves the job
    in review: the reviewer sees the copy and can mark the job sent instead.
    """
    checked, sent = _checked(job, hits, now, "mailbox_checked")
    copies = list(checked.known_copies)
    if decision == Decision.RESEND and copies:
        return _recorded(
            checked, review_id, decision, reviewer, note, now, "refused_copy_found", False
        ), "refused_copy_found"
    if decision == Decision.RESEND:
        decided = _recorded(checked, review_id, decision, reviewer, note, now, "resent", True)
        decided.refusals, decided.retrying_since = 0, None  # a person's resend gets a fresh retry horizon
        return start_attempt(decided, now, owner, timing), "resent"
    if decision == Decision.CANCEL:
        decided = _moved(
            _recorded(checked, review_id, decision, reviewer, note, now, "cancelled", True), State.CANCELLED, now
        )
        if copies:  # a cancel cannot call a copy back: it reaches a person, as one landing later would
            decided.lease_owner = decided.lease_until = None
            return _enter_human(decided, State.REVIEW, ReviewReason.SENT_AFTER_CANCEL, now, None), "cancelled"
        return _watch_after_cancel(decided, now, timing), "cancelled"
    result = "acknowledged" if decision == Decision.ACKNOWLEDGE else "marked_sent"
    # The reviewer accepts the copies their page showed: those known before this search (within one
    # review entry only a decision's search adds copies). One this search found beyond them was
    # seen by nobody: with more than one copy that is a duplicate to report, never accepted here.
    seen = list(job.known_copies)
    recorded = _recorded(checked, review_id, decision, reviewer, note, now, result, True, seen)
    decided = _moved(recorded, State.SENT, now)
    if len(sent) == 1:
        decided.provider_ref = sent[0].as_dict()
    decided.lease_owner = decided.lease_until = None
    if _unaccepted_duplicate(decided):
        return _enter_human(decided, State.REVIEW, ReviewReason.DUPLICATE, now, None), result
    return _verify_after_decision(decided, len(copies) == 1 and len(sent) == 1, now, timing), result


def _watch_after_cancel(job: Job, now: datetime, timing: Timing) -> Job:
    """A cancel stops sending, not the truth: if an attempt may have landed and the search may not
    show it yet, the mailbox is searched again up to the verification horizon (apply_cancel_check)."""
    last_attempt = job.last_attempt_at or job.created_at
    horizon = last_attempt + timedelta(seconds=timing.verify_horizon_s)
    job.lease_owner = job.lease_until = None
    if job.maybe_landed >= 1 and now < horizon:
        job.verify_until = horizon
        job.next_check_at = min(now + timedelta(seconds=timing.recheck_s), horizon)
        return job
    job.next_check_at = None
    return job


def watches_after_cancel(job: Job) -> bool:
    return job.state is State.CANCELLED and job.next_check_at is not None


def apply_cancel_check(job: Job, hits: Sequence[MailboxHit], now: datetime) -> Job:
    """A cancelled job whose attempt may have landed: a copy found reaches a person
    (`sent_after_cancel`); none up to the horizon ends the watch."""
    if not watches_after_cancel(job):
        raise ValueError("only a cancelled job under watch is checked")
    checked, _ = _checked(job, hits, now, "mailbox_checked")
    if checked.known_copies:
        return _enter_human(checked, State.REVIEW, ReviewReason.SENT_AFTER_CANCEL, now, None)
    if checked.verify_until is not None and now < checked.verify_until:
        checked.next_check_at = checked.verify_until
        return checked
    checked.next_check_at = None
    checked.add_event(now, "cancel_confirmed")
    return checked


def _verify_after_decision(job: Job, one_copy_shown: bool, now: datetime, timing: Timing) -> Job:
    """Guarantee 2 holds for a person's decision too: while more than one attempt may have landed and
    the verification horizon has not passed, the job is searched again (apply_verification) and any
    copy beyond those the reviewer saw reaches a person. Otherwise the decision ends the checks."""
    last_attempt = job.last_attempt_at or job.created_at
    horizon = last_attempt + timedelta(seconds=timing.verify_horizon_s)
    if job.maybe_landed >= 2 and now < horizon:
        job.verified = False
        job.verify_until = horizon
        job.next_check_at = min(now + timedelta(seconds=timing.recheck_s), horizon)
        job.add_event(now, "verification_pending", maybe_landed=job.maybe_landed)
        return job
    job.verified = one_copy_shown  # one copy, and the mailbox shows it
    job.next_check_at = None
    return job


def _recorded(
    job: Job,
    review_id: str,
    decision: str,
    reviewer: str,
    note: str,
    now: datetime,
    result: str,
    applied: bool,
    seen: list[str] | None = None,
) -> Job:
    """`seen`: the copies the reviewer was shown (default: every copy known now)."""
    changed = job.copy()
    seen = list(job.known_copies) if seen is None else seen
    record = {
        "review_id": review_id,
        "decision": decision,
        "reviewer": reviewer,
        "note": note[:MAX_NOTE_CHARS],
        "at": now,
        "result": result,
        "applied": applied,
        "copies": list(seen),
    }
    changed.decisions.append(record)
    changed.add_event(
        now,
        "decision",
        decision=decision,
        reviewer=reviewer,
        result=result,
        review_id=review_id,
        copies=list(seen),  # what the reviewer saw: guarantee 5 is checked against it
    )
    return changed
