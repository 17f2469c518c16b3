"""MailboxLedger on Firestore: one document per mailbox (collection `safesend_mailboxes`), changed by
compare-and-set on its update time, through the same REST client as the job store.

Each reservation reads the document, applies safesend.core.mailbox_budget's rules and commits the new
budget with the precondition "unchanged since I read it" (or "does not exist yet"). A lost race is
read again and decided again, a bounded number of times within the timeout: whoever commits first
counts, and the budget is never decided on a stale read. A refusal writes nothing.

A commit whose answer was lost is settled by re-reading, as the job store does: our write id is
there -> it landed; the document is as we read it -> it did not, decide again. If someone else wrote
meanwhile we cannot tell whether ours landed underneath, so we decide again: at worst the
reservation is counted twice, which slows the mailbox slightly and never lets Gmail's limit be passed.

One deadline covers a whole call, as in the job store: every read and commit gets only the time left
in it (a commit leaves SETTLE_SHARE of the timeout for its settling re-read), so a slow Firestore
cannot hold a send past its request budget.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from ..core import mailbox_budget
from ..core.errors import StoreUnavailableError
from ..core.mailbox_budget import Budget, MailboxSnapshot, Refusal, Reservation
from ..core.mailboxes import Mailbox
from .firestore_rest import FirestoreApiError, FirestoreRestClient, FirestoreTransportError
from .firestore_store import AMBIGUOUS_STATUSES, SETTLE_SHARE, TRANSIENT_READ_STATUSES, WRITE_ID_FIELD
from .firestore_values import decode_fields, encode_fields
from .store_common import BoundedAttempts

T = TypeVar("T")
Document = dict[str, Any]
DEFAULT_COLLECTION = "safesend_mailboxes"
MAX_ATTEMPTS = 40  # decisions per call: contention on one mailbox retries, within the timeout
MAX_READ_ATTEMPTS = 3
_READ_BACKOFF_S = 0.05
_LOST_RACE = frozenset({"FAILED_PRECONDITION", "ALREADY_EXISTS", "NOT_FOUND"})


class FirestoreMailboxLedger:
    """Thread-safe (the REST client keeps one connection per thread)."""

    def __init__(
        self,
        project: str,
        collection: str = DEFAULT_COLLECTION,
        client: FirestoreRestClient | None = None,
        timeout_s: float = 10.0,
    ):
        self._project = project
        self._collection = collection
        self._client = client
        self._timeout_s = timeout_s

    @property
    def client(self) -> FirestoreRestClient:
        if self._client is None:
            self._client = FirestoreRestClient(self._project)
        return self._client

    def reserve(
        self, mailbox: Mailbox, units: int, recipients: int, now: datetime, behind_turns: bool = False
    ) -> Reservation | Refusal:
        return self._apply(
            mailbox, lambda budget: mailbox_budget.reserve(budget, mailbox, units, recipients, now, behind_turns)
        )

    def book_turn(self, mailbox: Mailbox, not_before: datetime, now: datetime) -> datetime:
        return self._apply(mailbox, lambda budget: mailbox_budget.book_turn(budget, mailbox, not_before, now))

    def penalise(self, mailbox: Mailbox, kind: str, now: datetime, until: datetime | None = None) -> bool:
        return self._apply(mailbox, lambda budget: mailbox_budget.penalise(budget, mailbox, kind, now, until))

    def snapshot(self, mailbox: Mailbox, now: datetime) -> MailboxSnapshot:
        return mailbox_budget.snapshot(_budget(self._read(mailbox.id)), mailbox, now)

    def _apply(self, mailbox: Mailbox, change: Callable[[Budget], T]) -> T:
        deadline = time.monotonic() + self._timeout_s
        error: Exception | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if attempt > 1:
                if time.monotonic() >= deadline:
                    break
                time.sleep(random.uniform(0, min(0.01 * attempt, 0.2)))  # noqa: S311 - jitter, not secrecy
            doc = self._read(mailbox.id, deadline)
            budget = _budget(doc)
            result = change(budget)
            if isinstance(result, Refusal):
                return result
            write_id = uuid.uuid4().hex
            write = {
                "update": {
                    "name": self.client.document_name(self._collection, mailbox.id),
                    "fields": encode_fields(
                        {"mailbox": mailbox.id, "budget": budget.to_json(), WRITE_ID_FIELD: write_id}
                    ),
                },
                "currentDocument": {"updateTime": doc["updateTime"]} if doc else {"exists": False},
            }
            try:
                self.client.commit([write], self._time_left(deadline, self._timeout_s * SETTLE_SHARE))
                return result
            except FirestoreApiError as exc:
                error = exc
                if exc.status in _LOST_RACE:
                    continue
                if exc.status not in AMBIGUOUS_STATUSES:
                    raise StoreUnavailableError(f"firestore ledger: {exc}") from exc
            except FirestoreTransportError as exc:
                error = exc
                if not exc.request_sent:
                    continue
            if _fields(self._read(mailbox.id, deadline)).get(WRITE_ID_FIELD) == write_id:
                return result  # the lost answer's commit landed
        raise StoreUnavailableError(f"firestore ledger: {mailbox.id} not updated: {error or 'contention'}")

    @staticmethod
    def _time_left(deadline: float, reserve_s: float) -> float:
        """A commit's timeout: what is left of the call's deadline less the settling re-read's share."""
        return max(deadline - time.monotonic() - reserve_s, 0.001)

    def _read(self, mailbox_id: str, deadline: float | None = None) -> Document | None:
        """The mailbox's document (None: no budget yet), tried again on transient failures until
        `deadline` (the ledger call's; default: the timeout from now)."""
        error: Exception | None = None
        attempts = BoundedAttempts(MAX_READ_ATTEMPTS, self._timeout_s, _READ_BACKOFF_S, deadline)
        for _ in attempts:
            try:
                return self.client.get(self._collection, mailbox_id, attempts.time_left())
            except FirestoreApiError as exc:
                if exc.status not in TRANSIENT_READ_STATUSES:
                    raise StoreUnavailableError(f"firestore ledger: {exc}") from exc
                error = exc
            except FirestoreTransportError as exc:
                error = exc
        raise StoreUnavailableError(f"firestore ledger: read of {mailbox_id} failed after {attempts.made}: {error}")


def _fields(doc: Document | None) -> dict[str, Any]:
    return decode_fields(doc.get("fields")) if doc else {}


def _budget(doc: Document | None) -> Budget:
    text = _fields(doc).get("budget")
    return Budget.from_json(text if isinstance(text, str) else None)
