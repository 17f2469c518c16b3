"""An in-memory MailboxLedger for unit tests, benchmarks and one-process local runs.

Local tooling (devstack/), never deployed. Like the shared ledgers it keeps each budget as its stored
text (Budget JSON) and applies safesend.core.mailbox_budget's rules under one lock, so what the tests
prove of it (no interleaving exceeds a budget) is a property of those rules, not of shared objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from safesend.core import mailbox_budget
from safesend.core.mailbox_budget import Budget, MailboxSnapshot, Refusal, Reservation
from safesend.core.mailboxes import Mailbox

T = TypeVar("T")


class InMemoryMailboxLedger:
    """MailboxLedger in this process: one lock, one stored text per mailbox."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stored: dict[str, str] = {}

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
        with self._lock:
            budget = Budget.from_json(self._stored.get(mailbox.id))
        return mailbox_budget.snapshot(budget, mailbox, now)

    def _apply(self, mailbox: Mailbox, change: Callable[[Budget], T]) -> T:
        with self._lock:
            budget = Budget.from_json(self._stored.get(mailbox.id))
            result = change(budget)
            if not isinstance(result, Refusal):  # a refusal counts nothing: no write, as in the shared ledgers
                self._stored[mailbox.id] = budget.to_json()
            return result
