"""A FakeMailer that names copies as GraphMailer does (a 202 has no id: see adapters/graph_mailer.py),
so the service's never-silent properties can be run once per provider over the same fake mailbox."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from safesend.adapters.graph_mailer import FIRST_COPY_PREFIX, first_copy_id, named_copies
from safesend.core.model import Accepted, Failure, HistoryPage, MailboxHit
from tests.fakes import FakeMailer


class GraphNamingMailer:
    """Wraps a FakeMailer: Accepted is the first copy of its Message-ID, reads name copies like Graph."""

    def __init__(self, inner: FakeMailer):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # script, sends, searches, mailbox ... of the fake
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_inner":
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def _named(self, hits: Sequence[MailboxHit], drafts: Sequence[str] = ()) -> list[MailboxHit]:
        effects = {e["gmail_id"]: e for e in self._inner.mailbox.effects}
        items = [
            {
                "id": gmail_id,
                "internetMessageId": effects[gmail_id]["message_id"],
                "createdDateTime": effects[gmail_id]["at"].isoformat(),
            }
            for gmail_id in [h.gmail_id for h in hits] + list(drafts)
        ]
        return named_copies(items, set(drafts))

    def send(self, raw: bytes) -> Accepted | Failure:
        outcome = self._inner.send(raw)
        if isinstance(outcome, Accepted):
            message_id = next(e["message_id"] for e in self._inner.mailbox.effects if e["gmail_id"] == outcome.gmail_id)
            return Accepted(gmail_id=first_copy_id(message_id), stored=False)
        return outcome

    def find_by_message_id(self, message_id: str) -> list[MailboxHit]:
        """Sent Items: the copies past the fake's index lag. With `drafts_shown` set (on the fake),
        the others are drafts that transport has not moved yet, as GraphMailer reads Drafts."""
        hits = self._inner.find_by_message_id(message_id)
        drafts: list[str] = []
        if getattr(self._inner, "drafts_shown", False):
            shown = {h.gmail_id for h in hits}
            drafts = [
                e["gmail_id"]
                for e in self._inner.mailbox.effects
                if e["message_id"] == message_id and e["gmail_id"] not in shown
            ]
        return self._named(hits, drafts)

    def stored_message_id(self, gmail_id: str) -> str | None:
        if gmail_id.startswith(FIRST_COPY_PREFIX):
            message_id = gmail_id[len(FIRST_COPY_PREFIX) :]
            return message_id if self._inner.mailbox.count(message_id) else None
        return self._inner.stored_message_id(gmail_id)

    def current_history_id(self) -> str:
        return self._inner.current_history_id()

    def added_since(self, start_history_id: str, max_pages: int = 5) -> HistoryPage:
        page = self._inner.added_since(start_history_id, max_pages)
        return HistoryPage(tuple(self._named(page.messages)), page.history_id, page.complete, page.pages)

    def message_ids_of(self, gmail_ids: Sequence[str]) -> dict[str, str]:
        out = {g: g[len(FIRST_COPY_PREFIX) :] for g in gmail_ids if g.startswith(FIRST_COPY_PREFIX)}
        out.update(self._inner.message_ids_of([g for g in gmail_ids if not g.startswith(FIRST_COPY_PREFIX)]))
        return out
