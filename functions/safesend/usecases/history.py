"""The mailbox's change log as a fast witness: a per-instance checkpoint taken before attempts, and
the search of the log since it for our Message-ID.

Search lags (Gmail's index, ~90 s by default here); the change log lists a message as it is added.
So an ambiguous attempt can be settled in seconds: read the SENT messages added since a checkpoint
older than the attempt, look up their Message-IDs (cached), and match ours. Found is proof of a
copy. Not found proves nothing (the log has its own lag): resends still wait for the search.

The checkpoint costs nothing per send: each instance keeps one in memory, refreshed in the
background (getProfile, 1 unit) when it is older than its TTL; a send uses it only if it was read
before the send began, never one taken after an attempt started (it could already count the copy).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import MailboxUnavailableError
from ..core.model import MailboxHit
from ..logs import log

CHECKPOINT_TTL_S = 600.0  # Gmail keeps the log "typically at least a week": minutes are plenty fresh
MAX_HISTORY_PAGES = 5
MESSAGE_IDS_PER_CALL = 100  # GmailMailer.message_ids_of's bound


@dataclass(frozen=True)
class Checkpoint:
    history_id: str
    read_at: float  # monotonic time the getProfile call was started: it predates anything after it


class CheckpointCache:
    """One mailbox's checkpoint in this instance's memory, refreshed by one background thread at a time."""

    def __init__(
        self,
        read: Callable[[], str],
        monotonic: Callable[[], float] = time.monotonic,
        ttl_s: float = CHECKPOINT_TTL_S,
        background: bool = True,
    ):
        self._read = read
        self._monotonic = monotonic
        self._ttl_s = ttl_s
        self._background = background
        self._current: Checkpoint | None = None
        self._refreshing = False
        self._lock = threading.Lock()

    def for_attempt(self) -> str | None:
        """A checkpoint older than an attempt starting now, or None (fall back to search). Starts a
        refresh when it is missing or stale; never waits for it."""
        with self._lock:
            current = self._current
            stale = current is None or self._monotonic() - current.read_at > self._ttl_s
            start = stale and not self._refreshing
            if start:
                self._refreshing = True
        if start:
            if self._background:
                threading.Thread(target=self.refresh, name="history-checkpoint", daemon=True).start()
            else:
                self.refresh()
                with self._lock:  # synchronous (tests, the sweeper): usable now, it was read before
                    current = self._current
        return current.history_id if current else None

    def refresh(self) -> None:
        started = self._monotonic()
        try:
            history_id = self._read()
        except MailboxUnavailableError as exc:
            log(
                30,
                "could not read the mailbox's history checkpoint; searches settle unknowns meanwhile",
                error=str(exc),
            )
            history_id = None
        except Exception as exc:  # noqa: BLE001 - a checkpoint is an optimisation: never fail a send for it
            log(30, "history checkpoint read failed unexpectedly", error_type=type(exc).__name__)
            history_id = None
        with self._lock:
            if history_id is not None:
                self._current = Checkpoint(history_id, started)
            self._refreshing = False


def copies_in_history(mailer: Any, start_history_id: str, message_id: str) -> tuple[list[MailboxHit], bool]:
    """SENT messages carrying `message_id` that were added after the checkpoint, and whether the log
    was read to its end (only then could absence mean anything). Raises HistoryExpiredError (fall
    back to search) or MailboxUnavailableError (try again later)."""
    page = mailer.added_since(start_history_id, MAX_HISTORY_PAGES)
    ids = list(page.gmail_ids())
    headers: dict[str, str] = {}
    for first in range(0, len(ids), MESSAGE_IDS_PER_CALL):  # cached per instance: repeats cost nothing
        headers.update(mailer.message_ids_of(ids[first : first + MESSAGE_IDS_PER_CALL]))
    by_id = {m.gmail_id: m for m in page.messages}
    hits = [
        MailboxHit(gid, by_id[gid].thread_id, tuple(set(by_id[gid].label_ids) | {"SENT"}))
        for gid, header in headers.items()
        if header == message_id and gid in by_id
    ]
    return hits, page.complete
