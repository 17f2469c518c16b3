"""Pure job transitions: each takes a job (and facts) and returns a changed copy.

No I/O and no clock of its own: the service reads the time, asks Gmail, and
persists what these functions decide with a compare-and-set on `version`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Sequence

from .backoff import backoff_delay
from .classify import crash_failure
from .model import Accepted, Bucket, Failure, Job, MailboxHit
from .policy import ChannelPolicy, OnUnknown
from .states import HUMAN_STATES, State, check_transition

Uniform = Callable[[float, float], float]


class ReviewReason:
    AMBIGUOUS = "ambiguous"  # outcome unknown after the lag window, channel never auto-resends
    DUPLICATE = "duplicate"  # the mailbox holds more than one SENT copy
    MAX_ATTEMPTS = "max_attempts"  # out of attempts
    PERMANENT_ERROR = "permanent_error"  # Gmail refused the message for good


@dataclass(frozen=True)
class Timing:
    """Global delays; a channel policy may override index lag and window."""

    lease_s: float = 120.0
    index_lag_s: float = 90.0
    unknown_window_s: float = 300.0
    recheck_s: float = 60.0
    publish_lease_s: float = 60.0

    def index_lag(self, policy: ChannelPolicy) -> timedelta:
        return timedelta(seconds=policy.index_lag_s if policy.index_lag_s is not None else self.index_lag_s)

    def window(self, policy: ChannelPolicy) -> timedelta:
        return timedelta(
            seconds=policy.unknown_window_s if policy.unknown_window_s is not None else self.unknown_window_s)


def new_job(job_id: str, dedup_key: str, message_id: str, channel: str, payload: dict,
            payload_hash: str, now: datetime) -> Job:
    job = Job(id=job_id, dedup_key=dedup_key, message_id=message_id, channel=channel,
              payload=payload, payload_hash=payload_hash, created_at=now, updated_at=now)
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
    changed.claimed_at = now
    changed.last_attempt_at = now
    changed.lease_owner = owner
    changed.lease_until = now + timedelta(seconds=timing.lease_s)
    changed.next_check_at = changed.lease_until
    changed.add_event(now, "attempt_started")
    return changed


def record_outcome(job: Job, outcome: Accepted | Failure, owner: str, now: datetime,
                   policy: ChannelPolicy, timing: Timing, uniform: Uniform) -> Job:
    """Apply the result of our own attempt. If the job moved on meanwhile, keep the fact as an event."""
    ours = job.state is State.SENDING and job.lease_owner == owner
    if isinstance(outcome, Accepted):
        if ours or job.state in (State.UNKNOWN, State.RETRY_WAIT):
            return _mark_sent(job, outcome.as_ref(), now, "accepted")
        changed = job.copy()
        changed.add_event(now, "late_accept", provider_ref=outcome.as_ref())
        return changed
    if not ours:
        changed = job.copy()
        changed.add_event(now, "late_failure", error=outcome.as_dict())
        return changed
    if outcome.bucket is Bucket.MAYBE_ACCEPTED:
        # Gmail may have accepted it any time since the attempt began; the window still guards resends.
        attempt_at = job.last_attempt_at or now
        return _enter_unknown(job, outcome, now, max(now, attempt_at + timing.index_lag(policy)))
    if not outcome.retryable:
        return _enter_human(job, State.FAILED, ReviewReason.PERMANENT_ERROR, now, outcome)
    if job.attempts >= policy.max_attempts:
        return _enter_human(job, State.FAILED, ReviewReason.MAX_ATTEMPTS, now, outcome)
    changed = _moved(job, State.RETRY_WAIT, now)
    delay = backoff_delay(job.attempts, policy.retry_base_s, policy.retry_cap_s, outcome.retry_after_s, uniform)
    changed.next_check_at = now + timedelta(seconds=delay)
    changed.lease_owner = None
    changed.lease_until = None
    changed.last_error = outcome.as_dict()
    changed.add_event(now, "attempt_failed", error=outcome.as_dict(), retry_in_s=round(delay, 3))
    return changed


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
    attempt_at = job.last_attempt_at or job.claimed_at or now
    return _enter_unknown(job, crash_failure(), now, max(now, attempt_at + timing.index_lag(policy)))


def apply_mailbox_check(job: Job, hits: Sequence[MailboxHit], now: datetime, owner: str,
                        policy: ChannelPolicy, timing: Timing) -> Job:
    """Settle an unknown or retry_wait job from what the mailbox holds for its Message-ID.

    Exactly one SENT copy: sent. More than one: a duplicate, a human must know.
    None: inconclusive until the index-lag window after the last attempt has
    passed; after it, a retry_wait job is resent (it was never accepted) and an
    unknown one follows its channel policy.
    """
    if job.state not in (State.UNKNOWN, State.RETRY_WAIT):
        raise ValueError(f"mailbox checks apply to unknown/retry_wait jobs, not {job.state}")
    sent = [h for h in hits if h.is_sent]
    checked = job.copy()
    checked.checks += 1
    checked.mailbox_hits = [h.as_dict() for h in hits]
    checked.add_event(now, "mailbox_checked", hits=len(hits), sent_hits=len(sent))
    if len(sent) == 1:
        return _mark_sent(checked, sent[0].as_dict(), now, "found_in_mailbox")
    if len(sent) > 1:
        return _enter_human(checked, State.REVIEW, ReviewReason.DUPLICATE, now, None)
    if checked.state is State.RETRY_WAIT:
        return start_attempt(checked, now, owner, timing)
    window_end = (checked.last_attempt_at or checked.created_at) + timing.window(policy)
    if now < window_end:
        rechecked = _moved(checked, State.UNKNOWN, now)
        rechecked.next_check_at = min(now + timedelta(seconds=timing.recheck_s), window_end)
        return rechecked
    if policy.on_unknown is OnUnknown.REVIEW:
        return _enter_human(checked, State.REVIEW, ReviewReason.AMBIGUOUS, now, None)
    if checked.attempts >= policy.max_attempts:
        return _enter_human(checked, State.REVIEW, ReviewReason.MAX_ATTEMPTS, now, None)
    return start_attempt(checked, now, owner, timing)


def claim_review_publish(job: Job, now: datetime, timing: Timing) -> Job:
    """Outbox step 1: hold the publish for a while so two sweeps do not both publish."""
    if job.state not in HUMAN_STATES or job.review_published_at is not None:
        raise ValueError("nothing to publish")
    changed = job.copy()
    changed.next_check_at = now + timedelta(seconds=timing.publish_lease_s)
    changed.updated_at = now
    return changed


def mark_review_published(job: Job, now: datetime, message_id: str) -> Job:
    """Outbox step 2: published; nothing is due any more."""
    changed = job.copy()
    changed.review_published_at = now
    changed.next_check_at = None
    changed.updated_at = now
    changed.add_event(now, "review_published", pubsub_message_id=message_id, reason=job.review_reason)
    return changed


def lease_expired(job: Job, now: datetime) -> bool:
    return job.state is State.SENDING and job.lease_until is not None and job.lease_until <= now


def is_due(job: Job, now: datetime) -> bool:
    return job.next_check_at is not None and job.next_check_at <= now


def needs_publish(job: Job) -> bool:
    return job.state in HUMAN_STATES and job.review_published_at is None


def _mark_sent(job: Job, provider_ref: dict, now: datetime, how: str) -> Job:
    changed = _moved(job, State.SENT, now)
    changed.provider_ref = provider_ref
    changed.lease_owner = None
    changed.lease_until = None
    changed.next_check_at = None
    changed.add_event(now, how, provider_ref=provider_ref)
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
    changed = _moved(job, target, now)
    changed.review_reason = reason
    changed.review_entries += 1
    changed.review_published_at = None
    changed.lease_owner = None
    changed.lease_until = None
    changed.next_check_at = now  # due in the review outbox right away
    if failure is not None:
        changed.last_error = failure.as_dict()
    changed.add_event(now, f"entered_{target.value}", reason=reason,
                      error=failure.as_dict() if failure else None)
    return changed
