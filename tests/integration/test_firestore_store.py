"""FirestoreJobStore against Google's Firestore emulator: claims, compare-and-set, due queries."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from safesend.adapters.firestore_store import FirestoreJobStore
from safesend.errors import ConcurrentUpdateError, StoreUnavailableError
from safesend.lifecycle import Timing, new_job, start_attempt
from safesend.states import State

PROJECT = "demo-safesend-store"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(firestore_emulator, monkeypatch):
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    firestore_emulator.reset(PROJECT)
    client = firestore.Client(project=PROJECT)
    yield FirestoreJobStore(PROJECT, collection=f"ai_jobs_{uuid.uuid4().hex[:8]}", client=client)
    client.close()


def draft(key: str = "c:e:o", owner: str = "owner-a"):
    job = new_job(
        f"id{abs(hash(key)) % 10**12:012d}",
        key,
        "<job-x@mail.example.com>",
        "receipts",
        {"to": ["a@example.com"], "subject": "s", "text": "t", "html": None},
        "h" * 64,
        NOW,
    )
    return start_attempt(job, NOW, owner, Timing())


def test_claim_creates_once_then_returns_the_stored_job(store):
    job = draft()
    created, was_created = store.claim_or_get(job)
    assert was_created and created.version == 1 and created.state is State.SENDING
    again, was_created = store.claim_or_get(draft(owner="owner-b"))
    assert not was_created
    assert again.lease_owner == "owner-a" and again.version == 1
    assert again.events == created.events and again.created_at == NOW


def test_ten_concurrent_claims_have_exactly_one_winner(store):
    barrier = threading.Barrier(10)
    outcomes: list[tuple[str, bool]] = []
    errors: list[BaseException] = []

    def claim(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            job, created = store.claim_or_get(draft(owner=f"owner-{i}"))
            outcomes.append((job.lease_owner, created))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert len(outcomes) == 10
    winners = [owner for owner, created in outcomes if created]
    assert len(winners) == 1
    assert {owner for owner, _ in outcomes} == {winners[0]}  # everyone sees the winner's claim


def test_compare_and_set_bumps_version_and_refuses_stale_writers(store):
    stored, _ = store.claim_or_get(draft())
    changed = stored.copy()
    changed.state = State.SENT
    written = store.compare_and_set(changed, expected_version=1)
    assert written.version == 2 and store.get(stored.id).state is State.SENT
    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(changed, expected_version=1)
    missing = draft("other:key:1")
    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(missing, expected_version=0)


def test_concurrent_compare_and_set_from_one_snapshot_has_one_winner(store):
    stored, _ = store.claim_or_get(draft())
    barrier = threading.Barrier(3)
    wins, losses = [], []

    def write(i: int) -> None:
        changed = stored.copy()
        changed.attempts = 10 + i
        barrier.wait(timeout=10)
        try:
            store.compare_and_set(changed, expected_version=stored.version)
            wins.append(i)
        except ConcurrentUpdateError:
            losses.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(wins) == 1 and len(losses) == 2
    final = store.get(stored.id)
    assert final.version == 2 and final.attempts == 10 + wins[0]


def test_find_due_filters_by_state_and_time_oldest_first(store):
    due_times = [NOW - timedelta(minutes=m) for m in (1, 5, 3)]
    for i, at in enumerate(due_times):
        job, _ = store.claim_or_get(draft(f"due:{i}:x"))
        changed = job.copy()
        changed.state, changed.next_check_at = State.UNKNOWN, at
        store.compare_and_set(changed, expected_version=1)
    future, _ = store.claim_or_get(draft("future:1:x"))
    later = future.copy()
    later.state, later.next_check_at = State.UNKNOWN, NOW + timedelta(minutes=5)
    store.compare_and_set(later, expected_version=1)
    settled, _ = store.claim_or_get(draft("sent:1:x"))
    done = settled.copy()
    done.state, done.next_check_at = State.SENT, None
    store.compare_and_set(done, expected_version=1)

    found = store.find_due(State.UNKNOWN, NOW, limit=10)
    assert [j.next_check_at for j in found] == sorted(due_times)
    assert len(store.find_due(State.UNKNOWN, NOW, limit=2)) == 2
    assert store.find_due(State.SENT, NOW, limit=10) == []
    sending = store.find_due(State.SENDING, NOW + timedelta(hours=1), limit=10)
    assert sending == []  # every claimed job above has moved on


def test_job_round_trips_with_events_and_aware_datetimes(store):
    job = draft()
    job.add_event(NOW, "note", detail={"nested": [1, 2]})
    stored, _ = store.claim_or_get(job)
    loaded = store.get(job.id)
    assert loaded.events == stored.events
    assert loaded.lease_until.tzinfo is not None and loaded.lease_until == NOW + timedelta(seconds=120)
    assert loaded.payload == job.payload and loaded.message_id == job.message_id


def test_unreachable_store_raises_store_unavailable(monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", dead)
    store = FirestoreJobStore(PROJECT, client=firestore.Client(project=PROJECT), timeout_s=1.0)
    with pytest.raises(StoreUnavailableError):
        store.get("anything")
    with pytest.raises(StoreUnavailableError):
        store.claim_or_get(draft())


def test_without_a_store_token_compare_and_set_reads_one_and_checks_the_version(store):
    stored, _ = store.claim_or_get(draft())
    tokenless = stored.copy()
    tokenless.store_token = None
    tokenless.attempts = 5
    written = store.compare_and_set(tokenless, expected_version=1)
    assert written.version == 2 and store.get(stored.id).attempts == 5
    assert written.store_token == store.get(stored.id).store_token  # usable for the next write
    with pytest.raises(ConcurrentUpdateError):  # version 1 is gone
        store.compare_and_set(tokenless, expected_version=1)
    with pytest.raises(ConcurrentUpdateError):  # and the original token is stale
        store.compare_and_set(stored, expected_version=1)


def test_store_token_never_reaches_the_document(store, firestore_emulator):
    stored, _ = store.claim_or_get(draft())
    assert stored.store_token is not None
    raw = store.client.collection(store._collection).document(stored.id).get().to_dict()
    assert "store_token" not in raw and raw["version"] == 1


def test_the_write_id_is_the_only_store_private_field_and_changes_on_every_write(store):
    stored, _ = store.claim_or_get(draft())
    docs = store.client.collection(store._collection)
    created = docs.document(stored.id).get().to_dict()
    assert set(created) - set(stored.to_dict()) == {"_write_id"}
    store.compare_and_set(stored.copy(), expected_version=1)
    updated = docs.document(stored.id).get().to_dict()
    assert set(updated) - set(stored.to_dict()) == {"_write_id"}
    assert len({created["_write_id"], updated["_write_id"]}) == 2
    assert store.get(stored.id).version == 2  # Job.from_dict ignores the private field


def test_a_damaged_document_is_skipped_by_find_due_and_the_jobs_after_it_are_returned(store):
    """Issue 8.5: one document that is not a job (a bad state value here) must not stop the sweeper."""
    good = []
    for i in range(3):
        job = draft(f"c:e:{i}")
        job.next_check_at = NOW + timedelta(seconds=i)
        good.append(store.claim_or_get(job)[0])
    store._ref("damaged0000").set(
        {"state": "sending", "next_check_at": NOW - timedelta(seconds=5), "id": "damaged0000", "events": "not a list"}
    )
    store._ref("damaged0001").set({"state": "sending", "next_check_at": NOW - timedelta(seconds=4), "dedup_key": 7})
    due = store.find_due(State.SENDING, NOW + timedelta(seconds=10), limit=10)
    assert [j.id for j in due] == [j.id for j in good]
