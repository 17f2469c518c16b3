"""One contract for every JobStore (functions/safesend/core/ports.py), run against each implementation:
the in-memory store (devstack/memory_store.py), Firestore on Google's emulator and PostgreSQL from
Debian's packages (both started by the session's fixtures). A store that drifts from the others
fails here, under its own parameter id.

Covered: claim_or_get (winner, replay, same owner, version 1), get, compare_and_set (version bump,
conflict on a stale or missing version, a chain of writes, tokenless jobs, jobs from queries, the
whole job replaced), find_due / find_open_reviews / find_notices_due (filters, inclusive bound,
oldest first, ties by id, limits), damaged records left out, read past and not raised, the store token never
persisted and no store-private field but the write id, a round trip of every Job field (nested
timestamps in events, notices and decisions; other time zones; naive times as UTC), isolation from
the caller's objects, StoreUnavailableError (never ConcurrentUpdateError) from an unreachable
store, and races: ten claims of one key and ten compare-and-sets from one snapshot, over two store
instances, have exactly one winner. Store-specific failure modes (lost commit answers) have their
own files: test_firestore_ambiguous_writes.py, test_postgres_ambiguous_writes.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from safesend.core.errors import ConcurrentUpdateError, StoreUnavailableError
from safesend.core.lifecycle import new_job
from safesend.core.model import Job
from safesend.core.ports import JobStore
from safesend.core.states import State
from tests.integration.store_jobs import NOW, draft

pytestmark = pytest.mark.integration

PLUS2 = timezone(timedelta(hours=2))
FIRESTORE_PROJECT = "demo-safesend-contract"


# ------------------------------------------------------------------------------------ the stores


@dataclass
class Harness:
    """One store under test, plus what the contract needs to see behind it."""

    name: str
    store: JobStore
    put_document: Callable[[str, dict[str, Any]], None]  # a raw record, as the store keeps this dict
    raw: Callable[[str], dict[str, Any]]  # the stored record: Job fields and store-private ones
    private_fields: frozenset[str]  # store-private fields of a record (never Job fields)
    another: Callable[[], JobStore]  # a second instance over the same data (another process)
    unreachable: Callable[[], JobStore] | None = None  # an instance cut off from its data
    cleanups: list[Callable[[], None]] = field(default_factory=list)


def _memory(request: pytest.FixtureRequest) -> Harness:
    from devstack.memory_store import InMemoryJobStore

    store = InMemoryJobStore()
    return Harness(
        "memory", store, store.put_document, lambda job_id: dict(store._docs[job_id]), frozenset(), lambda: store
    )


def _firestore(request: pytest.FixtureRequest) -> Harness:
    """The store speaks REST; raw records go through google-cloud-firestore (gRPC), so the suite
    also proves that documents written by either are read alike by the other."""
    from google.cloud import firestore

    from safesend.adapters.firestore_store import FirestoreJobStore

    emulator = request.getfixturevalue("firestore_emulator")
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.host)
    collection = f"ai_jobs_{uuid.uuid4().hex[:8]}"
    stores: list[FirestoreJobStore] = []

    def instance(timeout_s: float = 10.0) -> FirestoreJobStore:
        store = FirestoreJobStore(FIRESTORE_PROJECT, collection=collection, timeout_s=timeout_s)
        stores.append(store)
        return store

    def unreachable() -> FirestoreJobStore:
        with _env("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{_dead_port()}"):
            store = instance(timeout_s=1.0)
            store.client  # noqa: B018 - the client reads the emulator address when it is built
            return store

    store = instance()
    raw_client = firestore.Client(project=FIRESTORE_PROJECT)
    docs = raw_client.collection(collection)
    harness = Harness(
        "firestore",
        store,
        lambda job_id, doc: docs.document(job_id).set(doc),
        lambda job_id: docs.document(job_id).get().to_dict(),
        frozenset({"_write_id"}),
        instance,
        unreachable,
    )
    harness.cleanups += [raw_client.close, lambda: [s.client.close() for s in stores]]
    return harness


def _postgres(request: pytest.FixtureRequest) -> Harness:
    from devstack.postgres import PgFaultProxy
    from safesend.adapters.postgres_store import PostgresJobStore, connection_pool, dumps

    server = request.getfixturevalue("postgres_server")
    schema = request.getfixturevalue("postgres_schema")
    dsn = server.schema_dsn(schema)
    stores: list[PostgresJobStore] = []
    proxies: list[PgFaultProxy] = []

    def instance(instance_dsn: str = dsn, timeout_s: float = 10.0) -> PostgresJobStore:
        store = PostgresJobStore(connection_pool(instance_dsn, max_size=12, timeout_s=timeout_s), timeout_s=timeout_s)
        stores.append(store)
        return store

    def unreachable() -> PostgresJobStore:
        proxy = PgFaultProxy(server.port)
        proxies.append(proxy)
        store = instance(proxy.dsn_of(server, schema), timeout_s=1.0)
        store.get("warm-up")  # schema checked and a pooled connection open: then the network goes
        proxy.cut()
        return store

    columns = (
        "id",
        "message_id",
        "state",
        "payload",
        "attempts",
        "claimed_at",
        "provider_ref",
        "next_check_at",
        "notice_due_at",
        "updated_at",
        "version",
    )

    def put_document(job_id: str, doc: dict[str, Any]) -> None:
        store.ensure_schema()
        rest = {k: v for k, v in doc.items() if k not in columns}
        insert = (
            f'INSERT INTO "{schema}".ai_jobs (id, message_id, state, payload, attempts, claimed_at, '  # noqa: S608
            "provider_ref, next_check_at, notice_due_at, updated_at, version, write_id, doc) "
            "VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s::jsonb)"
        )
        server.execute(
            insert,
            (
                job_id,
                doc.get("message_id", ""),
                doc.get("state", ""),
                dumps(doc.get("payload", {})),
                doc.get("attempts", 0),
                doc.get("claimed_at"),
                dumps(doc.get("provider_ref")),
                doc.get("next_check_at"),
                doc.get("notice_due_at"),
                doc.get("updated_at", NOW),
                doc.get("version", 1),
                uuid.uuid4(),
                dumps(rest),
            ),
        )

    def raw(job_id: str) -> dict[str, Any]:
        from safesend.adapters.postgres_store import loads

        names = (*columns, "write_id")
        statement = f'SELECT {", ".join(names)}, doc::text FROM "{schema}".ai_jobs WHERE id = %s'  # noqa: S608
        row = server.execute(statement, (job_id,))[0]
        return {**loads(row[-1]), **dict(zip(names, row[:-1], strict=True))}

    store = instance()
    harness = Harness("postgres", store, put_document, raw, frozenset({"write_id"}), instance, unreachable)
    harness.cleanups += [lambda: [s.close() for s in stores], lambda: [p.close() for p in proxies]]
    return harness


BUILDERS = {"memory": _memory, "firestore": _firestore, "postgres": _postgres}


@pytest.fixture(params=list(BUILDERS))
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    built = BUILDERS[request.param](request)
    try:
        yield built
    finally:
        for cleanup in built.cleanups:
            cleanup()


@pytest.fixture(params=[name for name in BUILDERS if name != "memory"])
def remote_harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The stores that can be cut off from their data (the in-memory one cannot)."""
    built = BUILDERS[request.param](request)
    try:
        yield built
    finally:
        for cleanup in built.cleanups:
            cleanup()


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def _dead_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------ jobs


def stored_draft(h: Harness, key: str, **changes: Any) -> Job:
    """A claimed job, then changed with one compare-and-set (e.g. state, next_check_at)."""
    job, created = h.store.claim_or_get(draft(key, job_id=changes.pop("job_id", None)))
    assert created
    changed = job.copy()
    for name, value in changes.items():
        setattr(changed, name, value)
    return h.store.compare_and_set(changed, expected_version=job.version)


def full_job() -> Job:
    """Every field set to something other than its default, timestamps nested at every depth, some of
    them in another time zone and one naive (a naive time means UTC, as Firestore reads it)."""
    at = NOW.astimezone(PLUS2) + timedelta(microseconds=123456)
    job = Job(
        id="full0000000000000000000000000001",
        dedup_key="cust-1:order_paid:42",
        message_id="<job-full@mail.example.com>",
        channel="payments",
        payload={
            "to": ["Ann Example <ann@example.com>", "b@example.org"],
            "cc": ["c@example.net"],
            "bcc": [],
            "subject": "Grüße, ünïcödé and an emoji 📨",
            "text": "line 1\nline 2\ttab",
            "html": "<p>hi</p>",
            "reply_to": None,
            "from": "Shop <shop@example.com>",
        },
        payload_hash="f" * 64,
        created_at=at - timedelta(hours=1),
        updated_at=at,
        state=State.REVIEW,
        attempts=3,
        history_start="12345",
        maybe_landed=2,
        refusals=1,
        retrying_since=at - timedelta(minutes=50),
        claimed_at=at - timedelta(minutes=40),
        lease_until=at - timedelta(minutes=38),
        lease_owner="owner-z",
        last_attempt_at=at - timedelta(minutes=40),
        next_check_at=at + timedelta(seconds=30),
        checks=4,
        mailboxes=["shop", "shop2"],  # issue 24: moved once, both searched
        queued_since=at - timedelta(minutes=39),
        queue_eta=at + timedelta(minutes=2),
        queue_reason="rate",
        provider_ref={"gmail_id": "18c0ffee", "thread_id": "18c0ffef"},
        known_copies=["18c0ffee", "18c0fff0"],
        verified=False,
        verify_until=(NOW + timedelta(minutes=30)).replace(tzinfo=None),
        stored_message_id="<job-full@mail.example.com>",
        mailbox_hits=[{"gmail_id": "18c0ffee", "thread_id": None, "label_ids": ["SENT", "INBOX"]}],
        last_error={
            "bucket": "maybe_accepted",
            "retryable": False,
            "code": "timeout",
            "detail": "read timed out",
            "status": None,
        },
        review_reason="duplicate",
        review_entries=2,
        review_published_at=at - timedelta(minutes=1),
        decisions=[
            {
                "review_id": "full:1",
                "decision": "acknowledge",
                "reviewer": "r@example.com",
                "note": "ok",
                "at": at - timedelta(minutes=5),
                "result": "acknowledged",
                "applied": True,
                "copies": ["18c0ffee"],
            }
        ],
        review_notified_entry=1,
        callbacks=["https://n8n.example.com/webhook-waiting/1"],
        notices=[
            {
                "id": "full:n0",
                "kind": "callback",
                "url": "https://n8n.example.com/webhook-waiting/1",
                "payload": {"job_id": "full", "state": "review", "nested": {"deep": [1, 2.5, "x", None, True]}},
                "created_at": at - timedelta(minutes=2),
                "due_at": at + timedelta(seconds=10),
                "tries": 1,
                "delivered_at": None,
                "gave_up_at": None,
                "last_error": "HTTP 502",
            },
            {
                "id": "full:n1",
                "kind": "chat",
                "url": None,
                "payload": {},
                "created_at": at - timedelta(minutes=3),
                "due_at": at - timedelta(minutes=3),
                "tries": 2,
                "delivered_at": at - timedelta(minutes=2),
                "gave_up_at": None,
                "last_error": None,
            },
            {  # the outbox's reviewer-notice fields (issue 25): a held, overdue card marked answered
                "id": "full:1:slack",
                "kind": "slack",
                "url": None,
                "thread": "full",
                "entry": "full:1",
                "card": True,
                "marked": "answered",
                "payload": {"text": "needs a person (answered: cancelled)", "blocks": []},
                "created_at": at - timedelta(hours=2),
                "due_at": at + timedelta(seconds=70),
                "held_until": (at + timedelta(seconds=70)).astimezone(PLUS2),
                "overdue_at": at - timedelta(minutes=1),
                "tries": 30,
                "delivered_at": None,
                "gave_up_at": None,
                "last_error": "HTTP 429",
            },
        ],
        notice_seq=2,
        notice_due_at=at + timedelta(seconds=10),
        events_dropped=7,
        write_mark="mark-0001",
        version=0,
    )
    job.add_event(at - timedelta(hours=1), "created")
    job.add_event(
        at - timedelta(minutes=40),
        "attempt_failed",
        error={"code": "timeout", "status": None},
        retry_in_s=1.5,
        due=at + timedelta(seconds=5),
        naive=(NOW + timedelta(seconds=1)).replace(tzinfo=None),
        times=[at, {"inner": at - timedelta(seconds=1)}],
    )
    return job


def as_stored(value: Any) -> Any:
    """What every store gives back: aware UTC timestamps (naive ones read as UTC), lists for tuples."""
    if isinstance(value, Job):
        return Job.from_dict(as_stored(value.to_dict()))
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_stored(v) for v in value]
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def datetimes_in(value: Any) -> Iterator[datetime]:
    if isinstance(value, dict):
        for item in value.values():
            yield from datetimes_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from datetimes_in(item)
    elif isinstance(value, datetime):
        yield value


def race(n: int, work: Callable[[int], Any]) -> tuple[dict[int, Any], dict[int, BaseException]]:
    barrier = threading.Barrier(n)
    results: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=20)
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), name=f"racer-{i}") for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a racer is still running after 120 s"
    return results, errors


# ------------------------------------------------------------------------------------ claim_or_get


def test_claim_stores_a_new_job_at_version_1_and_get_reads_it_back(harness):
    job = draft()
    job.version = 7  # whatever the caller holds: a claim starts the job's history
    claimed, created = harness.store.claim_or_get(job)
    assert created and claimed.version == 1 and claimed.state is State.SENDING
    assert harness.store.get(job.id) == claimed
    assert harness.store.get("0" * 32) is None


def test_a_second_claim_returns_the_stored_job_not_the_callers(harness):
    first, _ = harness.store.claim_or_get(draft(owner="owner-a"))
    again, created = harness.store.claim_or_get(draft(owner="owner-b"))
    assert not created and again == first and again.lease_owner == "owner-a" and again.version == 1
    same_owner, created_again = harness.store.claim_or_get(draft(owner="owner-a"))
    assert not created_again and same_owner == first  # our own owner is no proof of our own create


def test_a_replayed_claim_after_changes_returns_the_latest_version(harness):
    first, _ = harness.store.claim_or_get(draft())
    changed = first.copy()
    changed.state, changed.next_check_at = State.SENT, None
    written = harness.store.compare_and_set(changed, expected_version=1)
    replay, created = harness.store.claim_or_get(draft(owner="owner-b"))
    assert not created and replay == written and replay.version == 2 and replay.state is State.SENT


def test_claims_of_different_ids_do_not_touch_each_other(harness):
    a, created_a = harness.store.claim_or_get(draft("k:a:1"))
    b, created_b = harness.store.claim_or_get(draft("k:b:1"))
    assert created_a and created_b and a.id != b.id
    assert harness.store.get(a.id) == a and harness.store.get(b.id) == b


# --------------------------------------------------------------------------------- compare_and_set


def test_compare_and_set_bumps_the_version_and_refuses_a_stale_one(harness):
    stored, _ = harness.store.claim_or_get(draft())
    changed = stored.copy()
    changed.state, changed.attempts = State.UNKNOWN, 2
    written = harness.store.compare_and_set(changed, expected_version=1)
    assert written.version == 2 and written.attempts == 2
    assert harness.store.get(stored.id) == written
    for stale in (1, 0, 3, 99):
        with pytest.raises(ConcurrentUpdateError):
            harness.store.compare_and_set(changed, expected_version=stale)
    assert harness.store.get(stored.id) == written


def test_compare_and_set_of_a_job_that_does_not_exist_is_a_conflict(harness):
    with pytest.raises(ConcurrentUpdateError):
        harness.store.compare_and_set(draft("never:claimed:1"), expected_version=0)
    with pytest.raises(ConcurrentUpdateError):
        harness.store.compare_and_set(draft("never:claimed:2"), expected_version=1)
    assert harness.store.get(draft("never:claimed:2").id) is None


def test_each_written_job_is_good_for_the_next_compare_and_set(harness):
    job, _ = harness.store.claim_or_get(draft())
    for attempt in range(2, 6):
        changed = job.copy()
        changed.attempts = attempt
        job = harness.store.compare_and_set(changed, expected_version=job.version)
    assert job.version == 5 and harness.store.get(job.id) == job


@pytest.mark.parametrize("source", ["get", "find_due", "tokenless"])
def test_a_job_read_back_in_any_way_is_good_for_compare_and_set(harness, source):
    stored = stored_draft(harness, "c:e:read", state=State.UNKNOWN, next_check_at=NOW - timedelta(seconds=1))
    if source == "find_due":
        (read,) = harness.store.find_due(State.UNKNOWN, NOW, 10)
    else:
        read = harness.store.get(stored.id)
    if source == "tokenless":
        read.store_token = None  # e.g. a job rebuilt from somewhere else: the store may read first
    changed = read.copy()
    changed.checks = 9
    assert harness.store.compare_and_set(changed, expected_version=read.version).version == 3
    with pytest.raises(ConcurrentUpdateError):
        harness.store.compare_and_set(changed, expected_version=read.version)


def test_compare_and_set_replaces_the_whole_job(harness):
    job = full_job()
    stored, _ = harness.store.claim_or_get(job)
    smaller = stored.copy()
    smaller.provider_ref = {"gmail_id": "only"}  # a key dropped from a nested map
    smaller.last_error = None
    smaller.known_copies = []
    smaller.notices = smaller.notices[:1]
    smaller.notices[0]["payload"] = {"job_id": "full"}
    smaller.next_check_at = smaller.notice_due_at = None
    written = harness.store.compare_and_set(smaller, expected_version=1)
    smaller.version = 2
    read = harness.store.get(job.id)
    assert read == as_stored(written) == as_stored(smaller) and read.version == 2  # (naive times in the
    # job handed in stay naive in the copy handed back; a read gives them as UTC)
    assert read.provider_ref == {"gmail_id": "only"} and read.notices[0]["payload"] == {"job_id": "full"}


# ---------------------------------------------------------------------------- what a record holds


def test_every_job_field_round_trips_with_nested_timestamps_as_aware_utc(harness):
    job = full_job()
    assert {f.name for f in fields(Job)} - {"store_token"} <= set(job.to_dict())
    defaults = Job(
        id="d", dedup_key="d", message_id="d", channel="d", payload={}, payload_hash="d", created_at=NOW, updated_at=NOW
    )
    same_as_default = [
        f.name
        for f in fields(Job)
        if f.name not in ("store_token", "version") and getattr(job, f.name) == getattr(defaults, f.name)
    ]
    assert same_as_default == []  # the test really exercises every field

    harness.store.claim_or_get(job)
    expected = as_stored(job)
    expected.version = 1
    read = harness.store.get(job.id)
    assert read == expected
    stamps = list(datetimes_in(read.to_dict()))
    assert len(stamps) == 28 and all(d.utcoffset() == timedelta(0) for d in stamps)
    assert read.events[-1]["times"][1]["inner"] == NOW.astimezone(PLUS2) + timedelta(microseconds=123456, seconds=-1)

    rewritten = harness.store.compare_and_set(read, expected_version=1)  # and through an update
    again = harness.store.get(job.id)
    assert again == rewritten and again.to_dict() == {**read.to_dict(), "version": 2}
    assert all(d.utcoffset() == timedelta(0) for d in datetimes_in(again.to_dict()))


def test_the_store_token_is_never_persisted_and_the_write_id_is_the_only_private_field(harness):
    job = draft()
    job.store_token = "caller's token"  # whatever the caller holds is not the store's to keep
    claimed, _ = harness.store.claim_or_get(job)
    assert claimed.store_token != "caller's token"
    record = harness.raw(job.id)
    assert "store_token" not in record
    assert set(record) - set(claimed.to_dict()) == harness.private_fields
    assert harness.store.get(job.id).store_token != "caller's token"

    changed = claimed.copy()
    changed.store_token = None if harness.name == "firestore" else "another token"
    written = harness.store.compare_and_set(changed, expected_version=1)
    assert "store_token" not in harness.raw(job.id) and written.store_token != "another token"
    assert set(harness.raw(job.id)) - set(written.to_dict()) == harness.private_fields


def test_jobs_handed_out_or_handed_in_share_nothing_with_the_stored_record(harness):
    job = draft()
    claimed, _ = harness.store.claim_or_get(job)
    job.payload["to"].append("intruder@example.com")  # the caller's objects, after the call
    job.events[0]["kind"] = "tampered"
    claimed.payload["to"].append("intruder@example.com")
    claimed.events.append({"at": NOW, "kind": "tampered"})
    read = harness.store.get(job.id)
    assert read.payload["to"] == ["a@example.com"]
    assert [e["kind"] for e in read.events] == ["created", "attempt_started"]
    read.payload["to"].append("intruder@example.com")
    read.events[0]["kind"] = "tampered"
    assert harness.store.get(job.id).payload["to"] == ["a@example.com"]
    assert harness.store.get(job.id).events[0]["kind"] == "created"


# ------------------------------------------------------------------------------------------ queries


def test_find_due_filters_by_state_and_time_oldest_first_ties_by_id_within_the_limit(harness):
    minutes = {"due:0": 1, "due:1": 5, "due:2": 3, "due:3": 0}  # 0: exactly now, which is due
    for key, m in minutes.items():
        stored_draft(harness, key, state=State.UNKNOWN, next_check_at=NOW - timedelta(minutes=m))
    tie_ids = ["tie" + "b" * 29, "tie" + "a" * 29]
    for tie_id in tie_ids:
        stored_draft(
            harness, f"tie:{tie_id}", job_id=tie_id, state=State.UNKNOWN, next_check_at=NOW - timedelta(minutes=3)
        )
    stored_draft(harness, "future:0", state=State.UNKNOWN, next_check_at=NOW + timedelta(microseconds=1))
    stored_draft(harness, "other:0", state=State.RETRY_WAIT, next_check_at=NOW - timedelta(minutes=9))
    stored_draft(harness, "none:0", state=State.SENT, next_check_at=None)

    found = harness.store.find_due(State.UNKNOWN, NOW, limit=10)
    assert [j.next_check_at for j in found] == sorted(NOW - timedelta(minutes=m) for m in [*minutes.values(), 3, 3])
    threes = [j.id for j in found if j.next_check_at == NOW - timedelta(minutes=3)]
    assert threes == sorted(threes) and set(tie_ids) <= set(threes)  # ties: by id, like Firestore's __name__
    assert [j.next_check_at for j in harness.store.find_due(State.UNKNOWN, NOW, limit=2)] == [
        NOW - timedelta(minutes=5),
        NOW - timedelta(minutes=3),
    ]
    assert [j.state for j in harness.store.find_due(State.RETRY_WAIT, NOW, 10)] == [State.RETRY_WAIT]
    assert harness.store.find_due(State.SENT, NOW + timedelta(days=1), 10) == []
    assert harness.store.find_due(State.SENDING, NOW + timedelta(days=1), 10) == []  # all moved on
    later = harness.store.find_due(State.UNKNOWN, (NOW + timedelta(microseconds=1)).astimezone(PLUS2), 10)
    assert len(later) == 7  # `now` in another time zone is the same instant


def test_find_open_reviews_lists_review_and_failed_oldest_update_first(harness):
    for i, (state, age) in enumerate(
        [
            (State.REVIEW, 3),
            (State.FAILED, 9),
            (State.REVIEW, 1),
            (State.SENT, 20),
            (State.UNKNOWN, 30),
            (State.CANCELLED, 40),
        ]
    ):
        stored_draft(harness, f"open:{i}", state=state, updated_at=NOW - timedelta(minutes=age))
    for tie_id in ("rev" + "d" * 29, "rev" + "c" * 29):
        stored_draft(harness, f"tie:{tie_id}", job_id=tie_id, state=State.REVIEW, updated_at=NOW - timedelta(minutes=3))
    found = harness.store.find_open_reviews(limit=10)
    assert [(j.state, j.updated_at) for j in found] == [
        (State.FAILED, NOW - timedelta(minutes=9)),
        (State.REVIEW, NOW - timedelta(minutes=3)),
        (State.REVIEW, NOW - timedelta(minutes=3)),
        (State.REVIEW, NOW - timedelta(minutes=3)),
        (State.REVIEW, NOW - timedelta(minutes=1)),
    ]
    threes = [j.id for j in found[1:4]]
    assert threes == sorted(threes)
    assert len(harness.store.find_open_reviews(limit=2)) == 2


def test_find_notices_due_across_states_oldest_first_within_the_limit(harness):
    for i, (state, seconds) in enumerate(
        [(State.SENT, -30), (State.FAILED, -60), (State.REVIEW, 0), (State.SENT, 1), (State.SENT, None)]
    ):
        stored_draft(
            harness,
            f"notice:{i}",
            state=state,
            next_check_at=None,
            notice_due_at=None if seconds is None else NOW + timedelta(seconds=seconds),
        )
    found = harness.store.find_notices_due(NOW, limit=10)
    assert [j.notice_due_at for j in found] == [NOW - timedelta(seconds=60), NOW - timedelta(seconds=30), NOW]
    assert [j.notice_due_at for j in harness.store.find_notices_due(NOW, limit=1)] == [NOW - timedelta(seconds=60)]


def _walk(query: Callable[[tuple[datetime, str] | None], list[Job]], due_of: Callable[[Job], Any]) -> list[str]:
    """Every page after the last one's (due time, id), as the sweeper walks them (bounded)."""
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        page = query(cursor)
        if not page:
            return seen
        seen += [j.id for j in page]
        cursor = (due_of(page[-1]), page[-1].id)
    raise AssertionError("keyset pages never ended")


def test_keyset_pages_visit_every_due_job_once_in_order_across_ties(harness):
    """Issue 18.2: pages start after the last (due time, id) seen, ties at a page boundary included."""
    same = NOW - timedelta(minutes=2)
    ids = [f"key{c * 29}" for c in "edcba"]
    for i, job_id in enumerate(ids):
        stored_draft(harness, f"page:{i}", job_id=job_id, state=State.REVIEW, next_check_at=same, notice_due_at=same)
    stored_draft(harness, "page:old", job_id="key" + "z" * 29, state=State.REVIEW, next_check_at=same - timedelta(1))
    stored_draft(harness, "page:new", job_id="key" + "0" * 29, state=State.REVIEW, next_check_at=NOW, notice_due_at=NOW)
    expected = ["key" + "z" * 29, *sorted(ids), "key" + "0" * 29]
    for size in (1, 2, 3, 50):
        due = _walk(
            lambda c, size=size: list(harness.store.find_due(State.REVIEW, NOW, size, start_after=c)),
            lambda j: j.next_check_at,
        )
        assert due == expected, size
        notices = _walk(
            lambda c, size=size: list(harness.store.find_notices_due(NOW, size, start_after=c)),
            lambda j: j.notice_due_at,
        )
        assert notices == [*sorted(ids), "key" + "0" * 29], size
    after = harness.store.find_due(State.REVIEW, NOW, 10, start_after=(same.astimezone(PLUS2), sorted(ids)[1]))
    assert [j.id for j in after] == [*sorted(ids)[2:], "key" + "0" * 29]  # the cursor's zone does not matter


STUCK_JOBS = 2000


def test_a_sweep_gets_past_thousands_of_stuck_review_jobs_to_the_one_behind_them(harness):
    """Issue 18.2 on every store: 2,000 review jobs that are due but have nothing to do (published and
    notified, a left-over due time) ahead of one whose review item was never published."""
    from concurrent.futures import ThreadPoolExecutor

    from safesend.core.notify import ReviewerTargets
    from tests.unit.conftest import make_world

    world = make_world(reviewers=ReviewerTargets(frozenset({"chat"}), notify_timeout_s=600))
    world.store = world.service.store = harness.store
    old = world.clock() - timedelta(hours=1)

    def stuck(i: int) -> None:
        job = new_job(f"stuck{i:027d}", f"stuck:{i}", f"<s{i}@x>", "payments", {}, "h", old)
        job.state, job.review_reason, job.review_entries, job.review_notified_entry = State.REVIEW, "ambiguous", 1, 1
        job.review_published_at = job.next_check_at = old
        assert harness.store.claim_or_get(job)[1]

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(stuck, range(STUCK_JOBS)))
    target = new_job("target" + "0" * 26, "target:1", "<t@x>", "payments", {}, "h", old)
    target.state, target.review_reason, target.review_entries = State.REVIEW, "ambiguous", 1
    target.next_check_at = world.clock()
    harness.store.claim_or_get(target)
    world.clock.advance(1)
    report = world.service.sweep(batch=50, budget_s=600)
    assert [a["job_id"] for _, a in world.publisher.items] == [target.id]
    assert report.examined >= STUCK_JOBS + 1 and not report.stopped_early
    assert harness.store.find_due(State.REVIEW, world.clock(), 10) == []  # the left-over due times are cleared


def _damaged(base: Job, damage: str) -> dict[str, Any]:
    doc = as_stored(base.to_dict())
    if damage == "events":
        doc["events"] = "not a list"
    elif damage == "notices":
        doc["notices"] = "not a list"
    elif damage == "no_dedup_key":
        del doc["dedup_key"]
    elif damage == "bad_state":
        doc["state"] = "no-such-state"
    return doc


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_damaged_records_are_left_out_of_every_query_and_never_raised(harness):
    logger, collect = logging.getLogger("safesend"), _Collect()
    logger.addHandler(collect)
    try:
        _check_damaged_records_are_skipped(harness)
    finally:
        logger.removeHandler(collect)
    logged = [r for r in collect.records if "cannot be read as a job" in r.getMessage()]
    assert len(logged) >= 9 and all(r.levelno == logging.ERROR for r in logged)  # loud, every time


def _check_damaged_records_are_skipped(harness: Harness) -> None:
    good = [
        stored_draft(
            harness,
            f"good:{i}",
            state=State.REVIEW,
            next_check_at=NOW - timedelta(seconds=10 - i),
            notice_due_at=NOW - timedelta(seconds=10 - i),
            updated_at=NOW - timedelta(seconds=10 - i),
        )
        for i in range(3)
    ]
    base = good[0].copy()
    base.next_check_at = base.notice_due_at = base.updated_at = NOW - timedelta(seconds=30)
    for i, damage in enumerate(["events", "notices", "no_dedup_key"]):
        harness.put_document(f"damaged{i:025d}", _damaged(base, damage))
    harness.put_document("damaged-state", _damaged(base, "bad_state"))  # matches no state's query

    assert [j.id for j in harness.store.find_due(State.REVIEW, NOW, 10)] == [j.id for j in good]
    assert [j.id for j in harness.store.find_open_reviews(10)] == [j.id for j in good]
    assert [j.id for j in harness.store.find_notices_due(NOW, 10)] == [j.id for j in good]
    # The limit counts readable jobs: damaged records are read past, so more of them than the limit
    # never make a page short or empty (a sweeper would take it for the end), and the next page
    # starts after the last job without meeting them again.
    for query in (
        lambda after: harness.store.find_due(State.REVIEW, NOW, 1, start_after=after),
        lambda after: harness.store.find_notices_due(NOW, 1, start_after=after),
    ):
        first = query(None)
        assert [j.id for j in first] == [good[0].id]
        second = query((first[0].next_check_at, first[0].id))
        assert [j.id for j in second] == [good[1].id]
    assert [j.id for j in harness.store.find_open_reviews(1)] == [good[0].id]  # the oldest open review


# ------------------------------------------------------------------------------- failures and races


def test_an_unreachable_store_raises_store_unavailable_never_a_conflict(remote_harness):
    stored, _ = remote_harness.store.claim_or_get(draft())
    assert remote_harness.unreachable is not None
    cut_off = remote_harness.unreachable()
    calls: dict[str, Callable[[], Any]] = {
        "claim_or_get": lambda: cut_off.claim_or_get(draft("new:key:1")),
        "get": lambda: cut_off.get(stored.id),
        "compare_and_set": lambda: cut_off.compare_and_set(stored.copy(), expected_version=1),
        "compare_and_set tokenless": lambda: cut_off.compare_and_set(_tokenless(stored), expected_version=1),
        "find_due": lambda: cut_off.find_due(State.SENDING, NOW, 10),
        "find_open_reviews": lambda: cut_off.find_open_reviews(10),
        "find_notices_due": lambda: cut_off.find_notices_due(NOW, 10),
    }
    for name, call in calls.items():
        with pytest.raises(StoreUnavailableError):
            call()
            pytest.fail(f"{name} did not raise")
    assert remote_harness.store.get(stored.id) == stored  # nothing was written through the cut-off instance


def _tokenless(job: Job) -> Job:
    copy = job.copy()
    copy.store_token = None
    return copy


def test_ten_concurrent_claims_of_one_key_over_two_instances_have_exactly_one_winner(harness):
    stores = [harness.store, harness.another()]
    results, errors = race(10, lambda i: stores[i % 2].claim_or_get(draft(owner=f"owner-{i}")))
    assert errors == {}
    winners = [i for i, (_, created) in results.items() if created]
    assert len(winners) == 1
    assert {job.lease_owner for job, _ in results.values()} == {f"owner-{winners[0]}"}
    assert harness.store.get(draft().id).lease_owner == f"owner-{winners[0]}"


def test_ten_racing_compare_and_sets_from_one_snapshot_have_exactly_one_winner(harness):
    stored, _ = harness.store.claim_or_get(draft())
    stores = [harness.store, harness.another()]

    def write(i: int) -> Job:
        mine = stored.copy()
        mine.attempts = 10 + i
        return stores[i % 2].compare_and_set(mine, expected_version=1)

    results, errors = race(10, write)
    assert len(results) == 1 and len(errors) == 9
    assert all(isinstance(e, ConcurrentUpdateError) for e in errors.values()), errors
    ((winner, job),) = results.items()
    assert job.version == 2 and harness.store.get(stored.id) == job and job.attempts == 10 + winner


def test_racing_writers_on_different_jobs_all_win(harness):
    jobs = [harness.store.claim_or_get(draft(f"many:{i}:x"))[0] for i in range(8)]
    stores = [harness.store, harness.another()]

    def write(i: int) -> Job:
        mine = jobs[i].copy()
        mine.checks = i
        return stores[i % 2].compare_and_set(mine, expected_version=1)

    results, errors = race(8, write)
    assert errors == {} and sorted(j.checks for j in results.values()) == list(range(8))


# ------------------------------------------------------------------------ the sweep's record (issue 20)


def test_the_last_sweep_record_round_trips_and_the_newest_wins(harness):
    store = harness.store
    assert store.last_sweep() is None
    store.record_sweep({"at": NOW, "due": 3, "overdue": 1, "oldest_overdue_s": 420.5, "oldest_review_s": None})
    store.record_sweep({"at": NOW + timedelta(minutes=5), "due": 0, "overdue": 0, "oldest_overdue_s": 0.0})
    for reader in (store, harness.another()):
        record = reader.last_sweep()
        assert record is not None and record["at"] == NOW + timedelta(minutes=5)
        assert record["at"].tzinfo is not None and (record["due"], record["overdue"]) == (0, 0)
    assert store.find_open_reviews(10) == []  # the record is not a job


def test_an_unreachable_store_cannot_say_when_the_last_sweep_was(remote_harness):
    cut_off = remote_harness.unreachable()
    with pytest.raises(StoreUnavailableError):
        cut_off.last_sweep()
    with pytest.raises(StoreUnavailableError):
        cut_off.record_sweep({"at": NOW})


# --------------------------------------------------------------------- the mailboxes' index lag


def test_a_mailbox_lag_record_is_written_by_compare_and_set_and_read_by_every_instance(harness):
    """Issue 20.3: one record per sender mailbox (index_lag.py), written only over the version read."""
    store, other = harness.store, harness.another()
    mailbox = "sender/1@shop.example"  # any id: an address may hold characters a document id may not
    assert store.read_mailbox_lag(mailbox) == (None, None) and store.mailbox_lags() == {}
    first = {"search_s": [0.5, 4.25], "history_s": [], "window_s": 8.5, "raised_at": NOW, "updated_at": NOW}
    assert store.write_mailbox_lag(mailbox, first, None) is True
    assert other.write_mailbox_lag(mailbox, {"search_s": [9.0]}, None) is False  # it exists now
    record, token = other.read_mailbox_lag(mailbox)
    assert record == first and record["raised_at"].tzinfo is not None
    second = {**first, "search_s": [0.5, 4.25, 1.0]}
    assert other.write_mailbox_lag(mailbox, second, token) is True
    assert store.write_mailbox_lag(mailbox, {"search_s": []}, token) is False  # a stale token loses
    assert store.write_mailbox_lag("b@shop.example", {"search_s": [2.0]}, None) is True
    for reader in (store, other):
        assert reader.mailbox_lags() == {mailbox: second, "b@shop.example": {"search_s": [2.0]}}
    assert store.find_open_reviews(10) == [] and store.last_sweep() is None  # records, not jobs


def test_an_untold_raise_survives_the_store_and_is_cleared_once_told(harness):
    """A raise's notice not yet confirmed stays in the record (index_lag.untold) through every store,
    so another instance can tell it; told() removes exactly its fields."""
    from safesend.core.index_lag import claim_untold, observe, told, untold

    store, other = harness.store, harness.another()
    changed, raised = observe(None, "m@shop.example", "search", 7.5, NOW, 3.0, 10.0)
    assert raised is not None and store.write_mailbox_lag("m@shop.example", changed, None) is True
    record, token = other.read_mailbox_lag("m@shop.example")
    assert untold(record, "m@shop.example") == (raised, NOW)
    later = NOW + timedelta(minutes=5)
    claimed, again = claim_untold(record, "m@shop.example", later)
    assert again == raised and other.write_mailbox_lag("m@shop.example", claimed, token) is True
    record, token = store.read_mailbox_lag("m@shop.example")
    cleared = told(record, raised)
    assert cleared is not None and store.write_mailbox_lag("m@shop.example", cleared, token) is True
    record, _ = other.read_mailbox_lag("m@shop.example")
    assert untold(record, "m@shop.example") is None and record["window_s"] == raised.window_s


def test_concurrent_lag_observations_over_two_instances_are_all_kept(harness):
    from safesend.core.index_lag import observe

    stores = [harness.store, harness.another()]

    def add(n: int) -> None:
        store = stores[n % 2]
        for _ in range(50):
            record, token = store.read_mailbox_lag("m@shop.example")
            changed, _ = observe(record, "m@shop.example", "search", float(n), NOW, 3.0, 10.0)
            if store.write_mailbox_lag("m@shop.example", changed, token):
                return
        raise AssertionError("an observation lost every race")

    threads = [threading.Thread(target=add, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    record, _ = harness.store.read_mailbox_lag("m@shop.example")
    assert record is not None and sorted(record["search_s"]) == [float(n) for n in range(10)]


def test_an_unreachable_store_cannot_read_or_write_lag_records(remote_harness):
    cut_off = remote_harness.unreachable()
    with pytest.raises(StoreUnavailableError):
        cut_off.mailbox_lags()
    with pytest.raises(StoreUnavailableError):
        cut_off.read_mailbox_lag("m@shop.example")
    with pytest.raises(StoreUnavailableError):
        cut_off.write_mailbox_lag("m@shop.example", {"search_s": [1.0]}, None)


def test_named_ops_records_round_trip_and_the_newest_wins(harness):
    """Issue 20.4: the last notice given up / overdue, for /health (notice_watch.py)."""
    store = harness.store
    assert store.read_op("callback_given_up") is None
    store.record_op("callback_given_up", {"at": NOW, "job_id": "a" * 32, "kind": "callback"})
    store.record_op("callback_given_up", {"at": NOW + timedelta(minutes=1), "job_id": "b" * 32, "kind": None})
    store.record_sweep({"at": NOW, "due": 0})
    for reader in (store, harness.another()):
        record = reader.read_op("callback_given_up")
        assert record == {"at": NOW + timedelta(minutes=1), "job_id": "b" * 32, "kind": None}
        assert record["at"].tzinfo is not None and reader.read_op("reviewer_notice_overdue") is None
        assert reader.last_sweep() == {"at": NOW, "due": 0}  # a separate record
    assert store.find_open_reviews(10) == []
