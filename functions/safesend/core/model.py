"""Plain data: the job record and the facts the core reasons about. No I/O here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from .states import State

MAX_EVENTS = 200


class Bucket(str, Enum):
    """Bucket 1 and Bucket 2 of the source article."""

    NOT_ACCEPTED = "not_accepted"  # definitely not accepted: safe to send again
    MAYBE_ACCEPTED = "maybe_accepted"  # maybe accepted: never resend before asking the mailbox


@dataclass(frozen=True)
class Failure:
    """One failed attempt, classified. `code` is short and stable (e.g. http_429, timeout)."""

    bucket: Bucket
    retryable: bool
    code: str
    detail: str = ""
    status: int | None = None
    retry_after_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket.value,
            "retryable": self.retryable,
            "code": self.code,
            "detail": self.detail[:500],
            "status": self.status,
        }


@dataclass(frozen=True)
class Accepted:
    """The provider answered 2xx: the message is in the mailbox under these ids.

    `stored`: the answer itself proves the copy is stored (Gmail's 200 names the message in SENT).
    False for Graph's 202: a draft handed to transport, which may still refuse it (an NDR, nothing
    sent) before it reaches Sent Items; the send is verified only once the mailbox shows the copy.
    """

    gmail_id: str
    thread_id: str | None = None
    stored: bool = True

    def as_ref(self) -> dict[str, Any]:
        return {"gmail_id": self.gmail_id, "thread_id": self.thread_id}


@dataclass(frozen=True)
class Delivery:
    """What became of one callback POST: a 2xx, or why not (status and/or a short, safe detail)."""

    ok: bool
    status: int | None = None
    detail: str = ""
    retry_after_s: float | None = None  # the receiver's Retry-After, when it sent one


@dataclass(frozen=True)
class MailboxHit:
    """A message found by rfc822msgid search."""

    gmail_id: str
    thread_id: str | None
    label_ids: tuple[str, ...]

    @property
    def is_sent(self) -> bool:
        return "SENT" in self.label_ids

    @property
    def in_transit(self) -> bool:
        """A copy the provider took to send but has not stored as sent yet (a Graph sendMail draft
        waiting for transport): it counts as a copy (no resend may add one), but verifies nothing."""
        return "DRAFT" in self.label_ids

    def as_dict(self) -> dict[str, Any]:
        return {"gmail_id": self.gmail_id, "thread_id": self.thread_id, "label_ids": list(self.label_ids)}


@dataclass(frozen=True)
class HistoryPage:
    """What Mailer.added_since read from Gmail's change log: the SENT messages added after the start.

    `messages` are oldest first, each once (labels as the log recorded them; may be empty when Gmail
    leaves them out). `history_id` is the newest historyId seen: the mailbox's current one in the last
    answer read, which may already count changes the log does not list yet (history lag), so it is no
    checkpoint for an attempt that began before it was read. `complete` is False when the page or
    time bound stopped the reading with more to read: then absence from `messages` proves nothing.
    """

    messages: tuple[MailboxHit, ...]
    history_id: str
    complete: bool
    pages: int = 1

    def gmail_ids(self) -> tuple[str, ...]:
        return tuple(hit.gmail_id for hit in self.messages)


@dataclass
class Job:
    """One logical send. Stored as one Firestore document in `ai_jobs`, keyed by `id`.

    `version` increases on every write and guards compare-and-set updates, so a
    decision made from a snapshot is only applied if nobody changed the job since.
    `next_check_at` is the single due-time the sweeper scans: lease expiry while
    sending, the next mailbox check while unknown, the retry time in retry_wait, the
    next verification check of an unverified `sent` job, and the review-outbox due
    time in review/failed (None once published).

    `maybe_landed` counts attempts that may have reached Gmail (every attempt, minus
    those Gmail provably refused); `known_copies` are the Gmail ids of every copy we
    know exists: each 2xx answer (ours or late) and each SENT copy a search found.
    More than one is a duplicate. A `sent` job is `verified` when at most one attempt could have
    landed, or when the mailbox showed exactly one copy at the end of the verification
    horizon (`verify_until`). `refusals` and `retrying_since` bound the retries of
    "definitely not accepted" failures (429s...) in time instead of in attempts.
    """

    id: str
    dedup_key: str
    message_id: str
    channel: str
    payload: dict[str, Any]
    payload_hash: str
    created_at: datetime
    updated_at: datetime
    state: State = State.PENDING
    attempts: int = 0
    history_start: str | None = None  # a mailbox history id older than every attempt (history.py)
    maybe_landed: int = 0
    refusals: int = 0
    retrying_since: datetime | None = None
    claimed_at: datetime | None = None
    lease_until: datetime | None = None
    lease_owner: str | None = None
    last_attempt_at: datetime | None = None
    next_check_at: datetime | None = None
    checks: int = 0
    # Sender mailboxes (issue 24): the ids it was bound to, the current one last. A job moves only
    # while none of its attempts may have landed, and every earlier binding is kept, so a job ever in
    # doubt is searched in each. Empty: the only mailbox of an unconfigured service (today's).
    mailboxes: list[str] = field(default_factory=list)
    queued_since: datetime | None = None  # in `queued` since (time queued never counts toward the horizon)
    queue_eta: datetime | None = None  # when its mailbox's budget should let it go: the 202's Retry-After
    queue_reason: str | None = None  # rate, day_messages, exhausted, ... (mailbox_budget.Refusal.reason)
    provider_ref: dict[str, Any] | None = None
    known_copies: list[str] = field(default_factory=list)
    verified: bool | None = None
    verify_until: datetime | None = None
    stored_message_id: str | None = None
    mailbox_hits: list[dict[str, Any]] = field(default_factory=list)
    last_error: dict[str, Any] | None = None
    review_reason: str | None = None
    review_entries: int = 0
    review_published_at: datetime | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)  # reviewers' decisions (lifecycle.decide)
    review_notified_entry: int = 0  # the review entry whose notifications are queued (notify)
    callbacks: list[str] = field(default_factory=list)  # callback URLs the requests brought
    notices: list[dict[str, Any]] = field(default_factory=list)  # callback outbox (lifecycle)
    notice_seq: int = 0
    notice_due_at: datetime | None = None  # earliest undelivered notice: the sweeper scans it
    events: list[dict[str, Any]] = field(default_factory=list)
    events_dropped: int = 0
    # A fresh id on every write the service makes (service._cas): a write the store reports as a lost
    # race although it landed is recognised as ours by reading it back.
    write_mark: str | None = None
    version: int = 0
    # The store's concurrency token for the copy we hold (Firestore: the document's update time).
    # Not persisted; carried through copies so a compare-and-set can be a single conditional write.
    store_token: Any = field(default=None, compare=False, repr=False)

    def copy(self) -> Job:
        return dataclasses.replace(
            self,
            payload=dict(self.payload),
            mailbox_hits=[dict(h) for h in self.mailbox_hits],
            known_copies=list(self.known_copies),
            mailboxes=list(self.mailboxes),
            callbacks=list(self.callbacks),
            decisions=[dict(d) for d in self.decisions],
            notices=[dict(n) for n in self.notices],
            events=[dict(e) for e in self.events],
            provider_ref=dict(self.provider_ref) if self.provider_ref else None,
            last_error=dict(self.last_error) if self.last_error else None,
        )

    def add_event(self, at: datetime, kind: str, **details: Any) -> None:
        """Append to the audit trail (bounded, oldest dropped first, count kept)."""
        event = {"at": at, "kind": kind, "state": self.state.value, "attempt": self.attempts}
        event.update({k: v for k, v in details.items() if v is not None})
        self.events.append(event)
        overflow = len(self.events) - MAX_EVENTS
        if overflow > 0:
            del self.events[:overflow]
            self.events_dropped += overflow

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["store_token"]  # the store's concurrency token is never part of the document
        data["state"] = self.state.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        known = {f.name for f in dataclasses.fields(cls)} - {"store_token"}
        values = {k: v for k, v in data.items() if k in known}
        values["state"] = State(values.get("state", State.PENDING.value))
        for name in (
            "created_at",
            "updated_at",
            "claimed_at",
            "lease_until",
            "last_attempt_at",
            "next_check_at",
            "review_published_at",
            "retrying_since",
            "verify_until",
            "notice_due_at",
            "queued_since",
            "queue_eta",
        ):
            values[name] = as_utc(values.get(name))
        values["events"] = [{**e, "at": as_utc(e.get("at"))} for e in (values.get("events") or [])]
        values["decisions"] = [{**d, "at": as_utc(d.get("at"))} for d in (values.get("decisions") or [])]
        values["notices"] = [
            {
                **n,
                **{
                    k: as_utc(n.get(k))
                    for k in ("created_at", "due_at", "delivered_at", "gave_up_at", "held_until", "overdue_at")
                },
            }
            for n in (values.get("notices") or [])
        ]
        return cls(**values)


def as_utc(value: Any) -> Any:
    """Firestore returns aware datetimes (DatetimeWithNanoseconds); normalise naive ones to UTC."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def iso(value: datetime | None) -> str | None:
    """A time as JSON answers and review items carry it (ISO 8601 with offset), None as None."""
    return value.isoformat() if value else None


def event_as_json(event: dict[str, Any]) -> dict[str, Any]:
    """A job event with its times as ISO strings, for JSON answers and review items."""
    return {k: iso(v) if isinstance(v, datetime) else v for k, v in event.items()}
