"""FirestoreJobStore against Google's Firestore emulator: claims, compare-and-set, due queries.

The store speaks Firestore's REST API (firestore_rest); raw documents are written and read here
through google-cloud-firestore (gRPC), so these tests also prove that a document written by either
client reads the same through the other.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore

from safesend.adapters.firestore_rest import FirestoreRestClient
from safesend.adapters.firestore_store import FirestoreJobStore
from safesend.core.errors import ConcurrentUpdateError, StoreUnavailableError
from safesend.core.model import Job
from safesend.core.states import State
from tests.integration.store_jobs import NOW, draft

PROJECT = "demo-safesend-store"


@pytest.fixture
def store(firestore_emulator, monkeypatch) -> Iterator[FirestoreJobStore]:
    """The store under test, on its own REST client (built lazily from FIRESTORE_EMULATOR_HOST)."""
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    firestore_emulator.reset(PROJECT)
    store = FirestoreJobStore(PROJECT, collection=f"ai_jobs_{uuid.uuid4().hex[:8]}")
    assert isinstance(store.client, FirestoreRestClient)
    yield store
    store.client.close()


@pytest.fixture
def raw_docs(store) -> Iterator[firestore.CollectionReference]:
    """The store's collection through google-cloud-firestore (gRPC): the independent witness."""
    client = firestore.Client(project=PROJECT)
    yield client.collection(store.collection)
    client.close()


def rest_document(host: str, collection: str, document_id: str) -> dict[str, Any]:
    """The document exactly as Firestore's REST API returns it, fetched without the store's client."""
    conn = http.client.HTTPConnection(host, timeout=10)
    try:
        path = f"/v1/projects/{PROJECT}/databases/(default)/documents/{quote(collection)}/{quote(document_id)}"
        conn.request("GET", path, headers={"Authorization": "Bearer owner"})
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 200, body[:300]
    document: dict[str, Any] = json.loads(body)
    return document


def token_instant(token: str) -> tuple[int, int]:
    """(seconds since the epoch, nanoseconds) of an RFC 3339 update time, without rounding."""
    stamp, _, fraction = token.removesuffix("Z").partition(".")
    seconds = int(datetime.fromisoformat(f"{stamp}+00:00").timestamp())
    return seconds, int(fraction.ljust(9, "0"))


def one_microsecond_earlier(token: str) -> str:
    """The update time one microsecond (Firestore's own resolution) before `token`, in its format.
    Earlier, as a stale token is: the emulator answers a token from the future with INVALID_ARGUMENT."""
    stamp, _, fraction = token.removesuffix("Z").partition(".")
    at = datetime.fromisoformat(f"{stamp}.{fraction.ljust(9, '0')[:6]}+00:00") - timedelta(microseconds=1)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nanos(seconds: int, nanosecond: int, **kwargs: int) -> DatetimeWithNanoseconds:
    return DatetimeWithNanoseconds(2026, 11, 29, 11, 59, seconds, nanosecond=nanosecond, tzinfo=UTC, **kwargs)


def rich_document(job_id: str = "rich00000001") -> dict[str, Any]:
    """A job document using every value type the store must carry: nanosecond timestamps, nested
    maps and arrays (empty ones too), int64 extremes, floats (whole, fractional, infinite), bools,
    None, bytes and non-ASCII text."""
    doc = draft("rich:e:o").to_dict()
    plus2 = timezone(timedelta(hours=2))
    doc.update(
        id=job_id,
        state=State.UNKNOWN.value,
        payload={
            "to": ["a@example.com", "b@example.com"],
            "subject": "ünïcødé ✉ – receipt",
            "text": "t",
            "html": None,
            "meta": {
                "big": 2**62 + 1,  # beyond a double's 53 bits: must stay exact
                "min": -(2**63),
                "max": 2**63 - 1,
                "ratio": 0.1,
                "whole": 2.0,
                "inf": float("inf"),
                "flag": False,
                "none": None,
                "empty_list": [],
                "empty_map": {},
                "raw": b"\x00\xff\x10",
                "mixed": [1, "a", 2.5, True, None, {"deep": {"deeper": [0, -1]}}],
            },
        },
        created_at=nanos(1, 123_456_789),
        claimed_at=nanos(2, 5_000),
        next_check_at=DatetimeWithNanoseconds(2026, 11, 29, 13, 0, 0, 1, tzinfo=plus2),  # 11:00 UTC
        verified=True,
        provider_ref={"gmail_id": "g1", "thread_id": None},
        known_copies=["g1", "g2"],
        mailbox_hits=[{"gmail_id": "g1", "labels": ["SENT"], "internal_at": nanos(3, 999_999_999)}],
        last_error={"bucket": "maybe_accepted", "retryable": True, "code": "timeout", "status": None, "detail": ""},
        maybe_landed=1,
        checks=3,
        notice_seq=2**40,
        version=4,
    )
    doc["events"] = [*doc["events"], {"at": nanos(4, 1), "kind": "note", "detail": {"nested": [1, {"x": 1.5}]}}]
    return doc


def assert_same_types(left: Any, right: Any, where: str = "job") -> None:
    """Equal values may still differ in type (True == 1 == 1.0): compare the types, recursively."""
    if isinstance(left, datetime) or isinstance(right, datetime):
        assert isinstance(left, datetime) and isinstance(right, datetime), where
        assert left.tzinfo is not None and right.tzinfo is not None, where
        return
    assert type(left) is type(right), f"{where}: {type(left).__name__} != {type(right).__name__}"
    if isinstance(left, dict):
        assert left.keys() == right.keys(), where
        for key in left:
            assert_same_types(left[key], right[key], f"{where}.{key}")
    elif isinstance(left, list):
        assert len(left) == len(right), where
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_same_types(a, b, f"{where}[{i}]")


# ----------------------------------------------------------------------------- claims and writes


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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", dead)
    store = FirestoreJobStore(PROJECT, timeout_s=1.0)  # its REST client reads the dead address
    with pytest.raises(StoreUnavailableError):
        store.get("anything")
    with pytest.raises(StoreUnavailableError):
        store.claim_or_get(draft())
    explicit = FirestoreJobStore(PROJECT, client=FirestoreRestClient(PROJECT, emulator_host=dead), timeout_s=1.0)
    with pytest.raises(StoreUnavailableError):
        explicit.find_due(State.SENDING, NOW, limit=1)


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


def test_store_token_never_reaches_the_document(store, raw_docs):
    stored, _ = store.claim_or_get(draft())
    assert stored.store_token is not None
    raw = raw_docs.document(stored.id).get().to_dict()
    assert "store_token" not in raw and raw["version"] == 1


def test_the_write_id_is_the_only_store_private_field_and_changes_on_every_write(store, raw_docs):
    stored, _ = store.claim_or_get(draft())
    created = raw_docs.document(stored.id).get().to_dict()
    assert set(created) - set(stored.to_dict()) == {"_write_id"}
    store.compare_and_set(stored.copy(), expected_version=1)
    updated = raw_docs.document(stored.id).get().to_dict()
    assert set(updated) - set(stored.to_dict()) == {"_write_id"}
    assert len({created["_write_id"], updated["_write_id"]}) == 2
    assert store.get(stored.id).version == 2  # Job.from_dict ignores the private field


def test_a_damaged_document_is_skipped_by_find_due_and_the_jobs_after_it_are_returned(store, raw_docs):
    """Issue 8.5: one document that is not a job (a bad state value here) must not stop the sweeper."""
    good = []
    for i in range(3):
        job = draft(f"c:e:{i}")
        job.next_check_at = NOW + timedelta(seconds=i)
        good.append(store.claim_or_get(job)[0])
    raw_docs.document("damaged0000").set(
        {"state": "sending", "next_check_at": NOW - timedelta(seconds=5), "id": "damaged0000", "events": "not a list"}
    )
    raw_docs.document("damaged0001").set(
        {"state": "sending", "next_check_at": NOW - timedelta(seconds=4), "dedup_key": 7}
    )
    due = store.find_due(State.SENDING, NOW + timedelta(seconds=10), limit=10)
    assert [j.id for j in due] == [j.id for j in good]


# ------------------------------------------------------- documents shared with google-cloud-firestore


def test_a_document_written_by_google_cloud_firestore_reads_back_as_an_equal_job(store, raw_docs, firestore_emulator):
    doc = rich_document()
    raw_docs.document(doc["id"]).set(doc)
    snapshot = raw_docs.document(doc["id"]).get()
    stored_fields = rest_document(firestore_emulator.host, store.collection, doc["id"])["fields"]
    assert stored_fields["created_at"]["timestampValue"].startswith("2026-11-29T11:59:01.123456")  # micros kept
    expected = Job.from_dict(doc)

    loaded = store.get(doc["id"])

    assert loaded == expected
    assert_same_types(loaded.to_dict(), expected.to_dict())
    assert loaded.payload["meta"]["big"] == 2**62 + 1 and loaded.payload["meta"]["raw"] == b"\x00\xff\x10"
    assert loaded.created_at == datetime(2026, 11, 29, 11, 59, 1, 123_456, tzinfo=UTC)  # truncated, not rounded
    assert loaded.mailbox_hits[0]["internal_at"] == datetime(2026, 11, 29, 11, 59, 3, 999_999, tzinfo=UTC)
    assert loaded == Job.from_dict(snapshot.to_dict())  # what the gRPC client reads back, too
    assert loaded.store_token == rest_document(firestore_emulator.host, store.collection, doc["id"])["updateTime"]
    (due,) = store.find_due(State.UNKNOWN, NOW, limit=10)  # the query path decodes it alike
    assert due == expected and due.store_token == loaded.store_token
    assert_same_types(due.to_dict(), expected.to_dict())

    changed = loaded.copy()
    changed.checks = 4
    written = store.compare_and_set(changed, expected_version=4)  # its token works as a precondition
    assert written.version == 5
    after = Job.from_dict(raw_docs.document(doc["id"]).get().to_dict())
    assert after == written and after.payload == expected.payload and after.created_at == expected.created_at


def test_a_job_written_by_the_rest_store_reads_equal_through_google_cloud_firestore(store, raw_docs):
    job = Job.from_dict(rich_document())
    job.version = 0

    created, was_created = store.claim_or_get(job)

    assert was_created and created.version == 1
    snapshot = raw_docs.document(job.id).get()
    through_grpc = Job.from_dict(snapshot.to_dict())
    assert through_grpc == created
    assert_same_types(through_grpc.to_dict(), created.to_dict())
    assert snapshot.get("created_at") == datetime(2026, 11, 29, 11, 59, 1, 123_456, tzinfo=UTC)
    assert isinstance(snapshot.get("_write_id"), str)

    changed = created.copy()
    changed.payload["meta"]["mixed"].append({"added": [True, 0.5]})
    changed.verified = False
    changed.known_copies.append("g3")
    written = store.compare_and_set(changed, expected_version=1)
    through_grpc = Job.from_dict(raw_docs.document(job.id).get().to_dict())
    assert through_grpc == written and through_grpc.verified is False and written.version == 2
    assert_same_types(through_grpc.to_dict(), written.to_dict())
    assert store.get(job.id) == through_grpc


def test_the_cas_token_is_the_update_time_exactly_as_the_rest_api_returns_it(store, raw_docs, firestore_emulator):
    created, _ = store.claim_or_get(draft())
    update_time = rest_document(firestore_emulator.host, store.collection, created.id)["updateTime"]
    assert isinstance(created.store_token, str) and created.store_token == update_time
    assert store.get(created.id).store_token == update_time
    # The same instant google-cloud-firestore reports, to the nanosecond.
    grpc_time = raw_docs.document(created.id).get().update_time.timestamp_pb()
    assert token_instant(update_time) == (grpc_time.seconds, grpc_time.nanos)

    # The precondition is compared exactly: a token one microsecond older is refused. (The emulator
    # keeps microseconds and refuses a finer precondition; production update times carry nanoseconds,
    # which is why the token is the server's string, never a rounded datetime.)
    off = created.copy()
    off.store_token = one_microsecond_earlier(update_time)
    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(off, expected_version=1)

    written = store.compare_and_set(created.copy(), expected_version=1)
    new_time = rest_document(firestore_emulator.host, store.collection, created.id)["updateTime"]
    assert written.store_token == new_time != update_time
    assert store.compare_and_set(written.copy(), expected_version=2).version == 3
