"""FirestoreMailboxLedger's failure paths over a scripted REST client (the emulator tests cover the rest)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from safesend.adapters.firestore_ledger import MAX_ATTEMPTS, FirestoreMailboxLedger
from safesend.adapters.firestore_rest import FirestoreApiError, FirestoreRestClient
from safesend.core.errors import StoreUnavailableError
from safesend.core.mailbox_budget import Reservation
from safesend.core.mailboxes import PRESETS, Mailbox
from tests.ledger_properties import START

SHOP = Mailbox("shop", "shop@example.com", token_secret="t", limits=PRESETS["workspace"])


class ScriptedClient(FirestoreRestClient):
    def __init__(self, reads: list[Any], commit_error: FirestoreApiError | None = None):
        super().__init__("p", emulator_host="127.0.0.1:1")
        self.reads = reads
        self.commit_error = commit_error
        self.commits: list[Any] = []

    def get(self, collection: str, document_id: str, timeout_s: float) -> dict[str, Any] | None:
        outcome = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def commit(self, writes, timeout_s: float) -> dict[str, Any]:
        self.commits.append(writes)
        if self.commit_error:
            raise self.commit_error
        return {"writeResults": [{"updateTime": "2026-12-01T09:00:00.000001Z"}]}


def test_a_transient_read_failure_is_tried_again_and_the_first_budget_is_created():
    client = ScriptedClient([FirestoreApiError(503, "UNAVAILABLE", "later"), None])
    ledger = FirestoreMailboxLedger("p", client=client, timeout_s=5)
    assert isinstance(ledger.reserve(SHOP, 100, 1, START), Reservation)
    assert client.commits[0][0]["currentDocument"] == {"exists": False}


def test_a_refused_read_is_store_unavailable_and_nothing_is_reserved():
    client = ScriptedClient([FirestoreApiError(403, "PERMISSION_DENIED", "no")])
    with pytest.raises(StoreUnavailableError):
        FirestoreMailboxLedger("p", client=client, timeout_s=5).reserve(SHOP, 100, 1, START)
    assert client.commits == []


def test_endless_contention_ends_in_a_bounded_number_of_tries():
    client = ScriptedClient([None], FirestoreApiError(409, "ALREADY_EXISTS", "lost the race"))
    with pytest.raises(StoreUnavailableError, match="lost the race"):
        FirestoreMailboxLedger("p", client=client, timeout_s=30).reserve(SHOP, 100, 1, START)
    assert len(client.commits) == MAX_ATTEMPTS


def test_a_refusal_writes_nothing():
    client = ScriptedClient([None])
    ledger = FirestoreMailboxLedger("p", client=client, timeout_s=5)
    assert ledger.reserve(SHOP, 100, 101, START + timedelta(seconds=1)).reason == "too_many_recipients"  # type: ignore[union-attr]
    assert client.commits == []


class _Clock:
    """Stands in for the `time` module of the ledger and the retry skeleton: calls advance it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SlowClient(ScriptedClient):
    """Every read takes 3 s; every commit hangs for its whole timeout and answers DEADLINE_EXCEEDED."""

    def __init__(self, clock: _Clock):
        super().__init__([None])
        self.clock = clock
        self.ends: list[float] = []  # when each call's own timeout would run out

    def get(self, collection: str, document_id: str, timeout_s: float) -> dict[str, Any] | None:
        self.ends.append(self.clock.now + timeout_s)
        self.clock.now += min(3.0, timeout_s)
        return None

    def commit(self, writes, timeout_s: float) -> dict[str, Any]:
        self.ends.append(self.clock.now + timeout_s)
        self.clock.now += timeout_s
        raise FirestoreApiError(504, "DEADLINE_EXCEEDED", "slow")


def test_one_deadline_covers_the_whole_call_reads_commits_and_settling(monkeypatch):
    from safesend.adapters import firestore_ledger, store_common

    clock = _Clock()
    monkeypatch.setattr(firestore_ledger, "time", clock)
    monkeypatch.setattr(store_common, "time", clock)
    client = SlowClient(clock)
    start = clock.now
    with pytest.raises(StoreUnavailableError):
        FirestoreMailboxLedger("p", client=client, timeout_s=10).reserve(SHOP, 100, 1, START)
    assert max(client.ends) <= start + 10 + 0.01, "a call was given time past the ledger call's deadline"
