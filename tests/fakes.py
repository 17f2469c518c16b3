"""In-memory fakes of the ports, for fast unit tests. Integration tests use the real adapters instead."""

from __future__ import annotations

import email
import hashlib
import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email import policy as email_policy
from typing import Any

from safesend.core.errors import HistoryExpiredError
from safesend.core.model import Accepted, Failure, HistoryPage, MailboxHit

FAKE_FIRST_HISTORY_ID = 5000


class FakeClock:
    """A clock tests move by hand; `sleep` advances it instead of waiting."""

    def __init__(self, start: datetime | None = None):
        self.now = start or datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
        self.mono = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def monotonic(self) -> float:
        with self._lock:
            return self.mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += timedelta(seconds=seconds)
            self.mono += seconds

    sleep = advance


class FakeMailbox:
    """A mailbox with search-index lag and a change log. `effects` is the acceptance log: one entry
    per accepted message.

    The change log behaves like Gmail's history (see devstack/gmail_sim.py): every accepted message
    gets a new, larger historyId (gaps of 3); `added_since` lists SENT messages added after a start
    id once they are `history_lag_s` old (independent of the search-index lag); a start id older
    than `expire_history()` left raises HistoryExpiredError. `current_history_id` includes messages
    the lag still hides.
    """

    def __init__(self, clock: Callable[[], datetime], index_lag_s: float = 0.0, history_lag_s: float = 0.0):
        self.clock = clock
        self.index_lag_s = index_lag_s
        self.history_lag_s = history_lag_s
        self.effects: list[dict[str, Any]] = []
        self.raws: list[bytes] = []
        self.history_id = FAKE_FIRST_HISTORY_ID
        self.history_expired_through = FAKE_FIRST_HISTORY_ID
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def accept(self, raw: bytes, labels: tuple[str, ...] = ("SENT",)) -> Accepted:
        msg = email.message_from_bytes(raw, policy=email_policy.default)
        with self._lock:
            gmail_id = f"{next(self._ids):016x}"
            self.history_id += 3
            self.raws.append(raw)
            self.effects.append(
                {
                    "gmail_id": gmail_id,
                    "message_id": msg["Message-ID"],
                    "labels": labels,
                    "at": self.clock(),
                    "raw_sha256": hashlib.sha256(raw).hexdigest(),
                    "history_id": self.history_id,
                }
            )
        return Accepted(gmail_id, gmail_id)

    def expire_history(self) -> None:
        """Gmail dropped its change log up to now: every older start id raises HistoryExpiredError."""
        with self._lock:
            self.history_expired_through = self.history_id

    def added_since(self, start_history_id: str, limit: int | None = None) -> HistoryPage:
        start = int(start_history_id)
        horizon = self.clock() - timedelta(seconds=self.history_lag_s)
        with self._lock:
            if start < self.history_expired_through or start > self.history_id:
                raise HistoryExpiredError(f"history from {start} expired")
            added = [
                MailboxHit(e["gmail_id"], e["gmail_id"], tuple(e["labels"]))
                for e in self.effects
                if e["history_id"] > start and e["at"] <= horizon and "SENT" in e["labels"]
            ]
            current = str(self.history_id)
        complete = limit is None or len(added) <= limit
        return HistoryPage(tuple(added if complete else added[:limit]), current, complete)

    def message_id_of(self, gmail_id: str) -> str | None:
        with self._lock:
            return next((e["message_id"] for e in self.effects if e["gmail_id"] == gmail_id), None)

    def search(self, message_id: str) -> list[MailboxHit]:
        horizon = self.clock() - timedelta(seconds=self.index_lag_s)
        with self._lock:
            return [
                MailboxHit(e["gmail_id"], e["gmail_id"], tuple(e["labels"]))
                for e in self.effects
                if e["message_id"] == message_id and e["at"] <= horizon
            ]

    def count(self, message_id: str) -> int:
        with self._lock:
            return sum(1 for e in self.effects if e["message_id"] == message_id)


class FakeMailer:
    """Scripted send outcomes. A script entry is 'accept', a Failure, or ('accept', Failure):
    accepted by the mailbox, but the caller sees the failure (a dropped response)."""

    def __init__(self, mailbox: FakeMailbox, script: list[Any] | None = None):
        self.mailbox = mailbox
        self.script = list(script or [])
        self.sends = 0
        self.searches = 0
        self.search_error: Exception | None = None
        self.on_send: Callable[[], None] | None = None
        self.on_search: Callable[[], None] | None = None
        self.profile_reads = 0  # current_history_id calls (1 Gmail unit each)
        self.history_reads = 0  # added_since calls (2 units a page)
        self.message_id_reads = 0  # messages.get a real mailer would have made (5 units each; uncached)
        self.history_error: Exception | None = None  # raised by current_history_id and added_since
        self.message_ids_error: Exception | None = None
        self.history_page_size = 500  # changes per history.list page: max_pages * this bounds added_since
        self._message_id_cache: dict[str, str] = {}
        self._lock = threading.Lock()

    def send(self, raw: bytes) -> Accepted | Failure:
        with self._lock:
            self.sends += 1
            step = self.script.pop(0) if self.script else "accept"
        if self.on_send:
            self.on_send()
        if step == "accept":
            return self.mailbox.accept(raw)
        if isinstance(step, tuple):
            self.mailbox.accept(raw)
            return step[1]
        return step

    def find_by_message_id(self, message_id: str) -> list[MailboxHit]:
        self.searches += 1
        if self.on_search:
            self.on_search()
        if self.search_error:
            raise self.search_error
        return self.mailbox.search(message_id)

    def stored_message_id(self, gmail_id: str) -> str | None:
        for effect in self.mailbox.effects:
            if effect["gmail_id"] == gmail_id:
                return effect["message_id"]
        return None

    def current_history_id(self) -> str:
        self.profile_reads += 1
        if self.history_error:
            raise self.history_error
        with self.mailbox._lock:
            return str(self.mailbox.history_id)

    def added_since(self, start_history_id: str, max_pages: int = 5) -> HistoryPage:
        self.history_reads += 1
        if self.history_error:
            raise self.history_error
        return self.mailbox.added_since(start_history_id, limit=max_pages * self.history_page_size)

    def message_ids_of(self, gmail_ids: list[str]) -> dict[str, str]:
        if self.message_ids_error:
            raise self.message_ids_error
        out: dict[str, str] = {}
        for gmail_id in dict.fromkeys(gmail_ids):
            if gmail_id not in self._message_id_cache:
                self.message_id_reads += 1
                found = self.mailbox.message_id_of(gmail_id)
                if found is None:
                    continue
                self._message_id_cache[gmail_id] = found
            out[gmail_id] = self._message_id_cache[gmail_id]
        return out


class FakeScheduler:
    def __init__(self) -> None:
        self.tasks: dict[str, datetime] = {}
        self.queues: dict[str, str] = {}  # task -> the mailbox queue it went on ("" : the reconcile queue)
        self.calls = 0

    def schedule_check(self, job_id: str, step: str, at: datetime, mailbox: str | None = None) -> None:
        self.calls += 1
        self.tasks.setdefault(f"{job_id}-{step}", at)
        self.queues.setdefault(f"{job_id}-{step}", mailbox or "")


class FakePublisher:
    def __init__(self) -> None:
        self.items: list[tuple[dict[str, Any], dict[str, str]]] = []
        self.fail_next = 0

    def publish(self, item: dict[str, Any], attributes: dict[str, str]) -> str:
        from safesend.core.errors import PublishError

        if self.fail_next:
            self.fail_next -= 1
            raise PublishError("injected")
        self.items.append((item, attributes))
        return str(len(self.items))


class FakeNotifier:
    """Records callback POSTs; `script` holds Delivery results to return, then every POST succeeds."""

    def __init__(self) -> None:
        from safesend.core.model import Delivery

        self.posts: list[tuple[str, bytes]] = []
        self.script: list[Delivery] = []
        self._ok = Delivery(True, 200)
        self._lock = threading.Lock()

    def can_deliver(self, notice: Any) -> bool:
        return True

    def deadline_s(self, notice: Any) -> float:
        return 10.0

    def deliver(self, notice):
        from safesend.core.callbacks import notice_body

        with self._lock:
            self.posts.append((notice.get("url") or notice["kind"], notice_body(notice)))
            return self.script.pop(0) if self.script else self._ok

    def bodies_for(self, url: str) -> list[dict[str, Any]]:
        import json

        return [json.loads(body) for posted, body in self.posts if posted == url]
