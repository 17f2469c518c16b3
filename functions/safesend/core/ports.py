"""What the service needs from the outside world. Adapters implement these; fakes do too, for unit tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from .mailbox_budget import MailboxSnapshot, Refusal, Reservation
from .mailboxes import Mailbox
from .model import Accepted, Delivery, Failure, HistoryPage, Job, MailboxHit
from .states import State

# A keyset cursor: the (due time, job id) of the last job of the previous page.
Cursor = tuple[datetime, str]


class JobStore(Protocol):
    """Persistence for jobs (Firestore in production). Every write bumps `version`."""

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        """Atomically store `job` if its id is free and return (job, True), else (existing, False).

        Raises StoreUnavailableError when the store cannot be reached.
        """

    def get(self, job_id: str) -> Job | None: ...

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        """Write `job` if the stored version is still `expected_version`; return it with version + 1.

        Raises ConcurrentUpdateError if someone else wrote first, StoreUnavailableError when the
        store could not be reached or the outcome stayed unknown (the write may have landed or may
        still land: re-read, never assume it did not).
        """

    def find_due(self, state: State, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        """Jobs in `state` with next_check_at <= now, ordered by (next_check_at, id), at most `limit`,
        only those after `start_after` when given (keyset pagination). A stored document that cannot
        be read as a job is logged and left out, never raised, and does not count toward `limit`: the
        query reads on past it (bounded), so a page is short only at the end of the due jobs."""

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        """Jobs in review or failed, oldest update first, at most `limit`: what reviewers work through.
        Unreadable documents as in find_due."""

    def find_notices_due(self, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        """Jobs with a notice due (notice_due_at <= now), ordered by (notice_due_at, id), at most
        `limit`, only those after `start_after` when given (keyset pagination). Unreadable documents
        as in find_due."""

    def record_sweep(self, summary: Mapping[str, Any]) -> None:
        """Keep what the last completed sweep saw (`at`, counts, ages): one small record, last writer
        wins. Raises StoreUnavailableError."""

    def last_sweep(self) -> dict[str, Any] | None:
        """The record record_sweep kept, or None if no sweep completed yet."""

    def record_op(self, name: str, doc: Mapping[str, Any]) -> None:
        """Keep one small named record of the service's own (e.g. the last notice given up): last
        writer wins. Raises StoreUnavailableError."""

    def read_op(self, name: str) -> dict[str, Any] | None:
        """The record record_op kept under `name`, or None."""

    def read_mailbox_lag(self, mailbox: str) -> tuple[dict[str, Any] | None, Any]:
        """A sender mailbox's index-lag record (index_lag.py) and a token for write_mailbox_lag;
        (None, None) when it has none. Raises StoreUnavailableError."""

    def write_mailbox_lag(self, mailbox: str, record: Mapping[str, Any], token: Any) -> bool:
        """Store the record if it is unchanged since the read that gave `token` (None: only if it
        has none). False: another writer came first (read again). Raises StoreUnavailableError."""

    def mailbox_lags(self) -> dict[str, dict[str, Any]]:
        """Every mailbox's index-lag record, by mailbox id (a few small records: /health reads them)."""


class Mailer(Protocol):
    """The Gmail account we send from (or the local simulator)."""

    def send(self, raw: bytes) -> Accepted | Failure:
        """Exactly one HTTP request, never retried underneath, done within the send deadline
        (credential refresh included) whatever the server does. Failures come back classified."""

    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        """Every message (spam and trash included) whose Message-ID header is `message_id`.

        Raises MailboxUnavailableError if the search itself failed.
        """

    def stored_message_id(self, gmail_id: str) -> str | None:
        """The Message-ID header Gmail actually stored for a message we sent (one bounded try).

        Raises MailboxUnavailableError if the read failed.
        """

    def current_history_id(self) -> str:
        """The mailbox's current historyId (users.getProfile, 1 quota unit): a checkpoint to take
        BEFORE an attempt, so the attempt's message, if Gmail accepted it, is added after it.

        Raises MailboxUnavailableError if the read failed.
        """

    def added_since(self, start_history_id: str, max_pages: int = 5) -> HistoryPage:
        """The SENT messages added to the mailbox after `start_history_id` (users.history.list with
        labelId=SENT, historyTypes=messageAdded; 2 units a page of up to 500 changes), at most
        `max_pages` pages and within the read deadline (`complete` says whether all was read).
        Gmail's change log may lag: a message missing here may still be added later.

        Raises HistoryExpiredError when Gmail no longer has the log from that id (404: fall back to
        the search), MailboxUnavailableError if a read failed.
        """

    def message_ids_of(self, gmail_ids: Sequence[str]) -> dict[str, str]:
        """The Message-ID header Gmail stored for each of these messages (messages.get format=metadata,
        5 units each, cached: it never changes). Ids Gmail no longer has (404) are left out.

        Raises MailboxUnavailableError if any read failed.
        """


class CheckScheduler(Protocol):
    """Cloud Tasks: call reconcile for `job_id` at `at`. The same (job, step) enqueued twice is harmless."""

    def schedule_check(self, job_id: str, step: str, at: datetime, mailbox: str | None = None) -> None:
        """`mailbox`: a queued job's turn, on that mailbox's own paced queue (its rate_limits)."""


class ReviewPublisher(Protocol):
    """Pub/Sub: hand a job to humans. Returns the published message id."""

    def publish(self, item: dict[str, Any], attributes: dict[str, str]) -> str: ...


class NoticePoster(Protocol):
    """One destination for notices (a callback URL, a chat webhook): one POST, bounded in time."""

    def deliver(self, notice: Mapping[str, Any]) -> Delivery: ...

    def deadline_s(self, notice: Mapping[str, Any]) -> float:
        """The longest deliver() can take for this notice: a deliverer holds its pass that long."""


class Notifier(Protocol):
    """The outbox's deliverer: a callback to the caller's workflow (n8n's Wait node), or a message to
    the reviewers' chat (Google Chat, Slack), by the notice's `kind`. One POST, bounded in time."""

    def deliver(self, notice: Mapping[str, Any]) -> Delivery: ...

    def deadline_s(self, notice: Mapping[str, Any]) -> float:
        """The longest deliver() can take for this notice: a deliverer holds its pass that long."""

    def can_deliver(self, notice: Mapping[str, Any]) -> bool:
        """This instance is configured for the notice's kind (others leave it for one that is)."""


class MailboxLedger(Protocol):
    """The budget of every sender mailbox, shared by every instance (mailbox_budget.py has the rules).
    A Gmail call is made only after `reserve` admitted it; StoreUnavailableError: nothing reserved."""

    def reserve(
        self, mailbox: Mailbox, units: int, recipients: int, now: datetime, behind_turns: bool = False
    ) -> Reservation | Refusal:
        """`behind_turns`: a new job's send waits behind the queued jobs' turns (mailbox_budget.reserve)."""

    def book_turn(self, mailbox: Mailbox, not_before: datetime, now: datetime) -> datetime:
        """A queued job's turn at this mailbox, after every turn given before (mailbox_budget.book_turn)."""

    def penalise(self, mailbox: Mailbox, kind: str, now: datetime, until: datetime | None = None) -> bool:
        """Gmail refused for `kind` (rate: slow down for everyone; daily: exhausted until `until`).
        True when this refusal began a new incident (mailbox_budget.penalise)."""

    def snapshot(self, mailbox: Mailbox, now: datetime) -> MailboxSnapshot: ...
