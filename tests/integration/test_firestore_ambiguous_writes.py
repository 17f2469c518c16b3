"""FirestoreJobStore when a commit's answer is lost, against the REAL emulator.

A commit that landed but whose answer never came back must be reported as what it was (our
write), never as a lost race; a commit that never left the client must not be reported as a
conflict either; genuine races must still be lost by all but one writer.

Most faults are injected in the store's REST client (devstack/firestore_faults): the request
really runs on the emulator, then its answer is replaced by an error. The last tests need no
in-process injection at all: devstack/relay.py sits on the socket between the store and the
emulator and drops connections itself.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest

from devstack.firestore_faults import (
    FaultCode,
    FaultInjectionError,
    FaultMode,
    FaultyFirestoreClient,
    FirestoreFaults,
    InjectedApiError,
    InjectedTransportError,
    emulator_client,
)
from devstack.relay import FaultRelay
from safesend.adapters.firestore_rest import FirestoreApiError, FirestoreRestClient, FirestoreTransportError
from safesend.adapters.firestore_store import MAX_READ_ATTEMPTS, MAX_WRITE_ATTEMPTS, FirestoreJobStore
from safesend.adapters.firestore_values import decode_fields, encode_fields
from safesend.core.errors import ConcurrentUpdateError, StoreUnavailableError
from safesend.core.model import Job
from safesend.core.states import State
from tests.integration.store_jobs import NOW, draft

PROJECT = "demo-safesend-faults"
TRANSPORT, UNAVAILABLE, DEADLINE = FaultCode.TRANSPORT, FaultCode.UNAVAILABLE, FaultCode.DEADLINE_EXCEEDED
lost_codes = pytest.mark.parametrize(
    "code", [TRANSPORT, UNAVAILABLE, DEADLINE], ids=["transport", "unavailable", "deadline"]
)


@pytest.fixture
def collection() -> str:
    return f"ai_jobs_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def emulator(firestore_emulator, monkeypatch):
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    firestore_emulator.reset(PROJECT)
    return firestore_emulator


@pytest.fixture
def faults() -> FirestoreFaults:
    return FirestoreFaults()


@pytest.fixture
def store(emulator, faults, collection) -> Iterator[FirestoreJobStore]:
    """The store under test: every call of its REST client goes through the fault rules."""
    with emulator_client(PROJECT, faults) as client:
        yield FirestoreJobStore(PROJECT, collection=collection, client=client)


@pytest.fixture
def other(emulator, collection) -> Iterator[FirestoreJobStore]:
    """A second instance on a clean REST client: the genuine concurrent writer, and our witness."""
    client = FirestoreRestClient(PROJECT)
    yield FirestoreJobStore(PROJECT, collection=collection, client=client)
    client.close()


def witness(other: FirestoreJobStore, job_id: str) -> tuple[Job, dict[str, Any], str]:
    """The stored document as the clean client reads it: (job, decoded fields, update time)."""
    doc = other.client.get(other.collection, job_id, timeout_s=10)
    assert doc is not None, f"{job_id} is not stored"
    fields = decode_fields(doc.get("fields"))
    return Job.from_dict(fields), fields, doc["updateTime"]


def documents(other: FirestoreJobStore) -> list[dict[str, Any]]:
    return other.client.run_query({"from": [{"collectionId": other.collection}]}, timeout_s=10)


def write_id_of(writes: Sequence[Mapping[str, Any]]) -> str:
    """The store-private write id a commit carried."""
    return str(decode_fields(writes[0]["update"]["fields"])["_write_id"])


def create(client: FirestoreRestClient, collection: str, document_id: str) -> list[dict[str, Any]]:
    """One write creating a small document, refused if it exists."""
    document = {"name": client.document_name(collection, document_id), "fields": encode_fields({"a": 1})}
    return [{"update": document, "currentDocument": {"exists": False}}]


def changed(job: Job, attempts: int) -> Job:
    result = job.copy()
    result.attempts = attempts
    return result


def run_threads(target: Any, names: Sequence[str], timeout_s: float = 60.0) -> None:
    threads = [threading.Thread(target=target, args=(n,), name=n) for n in names]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a writer is still running"


# ----------------------------------------------------------------------------- the knob itself


def test_the_knob_lets_a_lost_commit_land_and_stops_an_unsent_one(store, other, faults, collection):
    client = store.client
    faults.lose_answers("commit", times=1)
    with pytest.raises(InjectedTransportError) as lost:
        client.commit(create(client, collection, "landed"), timeout_s=10)
    assert lost.value.request_sent is True
    faults.fail_before_send("commit", times=1, code=DEADLINE)
    with pytest.raises(InjectedApiError) as unsent:
        client.commit(create(client, collection, "unsent"), timeout_s=10)
    assert (unsent.value.http_status, unsent.value.status) == (504, "DEADLINE_EXCEEDED")
    faults.fail_before_send("commit", times=1)
    with pytest.raises(FirestoreTransportError) as never_sent:
        client.commit(create(client, collection, "never-sent"), timeout_s=10)
    assert never_sent.value.request_sent is False
    client.commit(create(client, collection, "clean"), timeout_s=10)  # every rule is used up
    faults.lose_answers("commit", times=1, code=UNAVAILABLE)
    with pytest.raises(FirestoreApiError) as refused:  # refused by the emulator, and that answer lost
        client.commit(create(client, collection, "clean"), timeout_s=10)
    assert (refused.value.http_status, refused.value.status) == (503, "UNAVAILABLE")

    stored = {doc["name"].rsplit("/", 1)[-1] for doc in documents(other)}
    assert stored == {"landed", "clean"}
    assert [(f.operation, f.mode, f.code, f.server_status) for f in faults.injected] == [
        ("commit", FaultMode.LOSE_ANSWER, TRANSPORT, "OK"),
        ("commit", FaultMode.FAIL_BEFORE_SEND, DEADLINE, None),
        ("commit", FaultMode.FAIL_BEFORE_SEND, TRANSPORT, None),
        ("commit", FaultMode.LOSE_ANSWER, UNAVAILABLE, "ALREADY_EXISTS"),
    ]
    assert faults.injected[0].request == create(client, collection, "landed")


def test_the_knob_applies_to_reads_and_queries_and_honours_its_filter(store, other, faults, collection):
    client = store.client
    other.client.commit(create(other.client, collection, "doc"), timeout_s=10)
    faults.lose_answers("get", times=1, match=lambda operation, request: request == (collection, "doc"))
    assert client.get(collection, "elsewhere", timeout_s=10) is None  # not matched: untouched
    with pytest.raises(InjectedTransportError) as lost:
        client.get(collection, "doc", timeout_s=10)
    assert lost.value.request_sent is True
    assert decode_fields(client.get(collection, "doc", timeout_s=10)["fields"]) == {"a": 1}
    faults.fail_before_send("run_query", times=2, code=UNAVAILABLE)
    query = {"from": [{"collectionId": collection}]}
    for _ in range(2):
        with pytest.raises(InjectedApiError):
            client.run_query(query, timeout_s=10)
    assert len(client.run_query(query, timeout_s=10)) == 1

    assert [(f.operation, f.mode, f.server_status, f.thread) for f in faults.injected] == [
        ("get", FaultMode.LOSE_ANSWER, "OK", threading.current_thread().name),
        ("run_query", FaultMode.FAIL_BEFORE_SEND, None, threading.current_thread().name),
        ("run_query", FaultMode.FAIL_BEFORE_SEND, None, threading.current_thread().name),
    ]
    assert faults.count(operation="run_query") == 2 and faults.count(FaultMode.LOSE_ANSWER) == 1


def test_the_knob_refuses_misuse_and_never_runs_without_an_emulator(monkeypatch):
    faults = FirestoreFaults()
    with pytest.raises(FaultInjectionError):
        faults.lose_answers("Commit")  # the gRPC method name: not an operation of the REST client
    with pytest.raises(FaultInjectionError):
        faults.fail_before_send(times=0)
    with pytest.raises(FaultInjectionError):
        faults.lose_answers(code="OK")  # type: ignore[arg-type]
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    with pytest.raises(FaultInjectionError):
        FaultyFirestoreClient(PROJECT, faults)
    with pytest.raises(FaultInjectionError), emulator_client(PROJECT, faults):
        pass
    assert faults.injected == []


# ------------------------------------------------------------- (a) landed, answer lost


@lost_codes
@pytest.mark.parametrize("tokenless", [False, True], ids=["token", "tokenless"])
def test_compare_and_set_whose_answer_was_lost_reports_our_write(store, other, faults, code, tokenless):
    stored, _ = store.claim_or_get(draft())
    mine = changed(stored, 7)
    if tokenless:
        mine.store_token = None
    faults.lose_answers("commit", times=1, code=code)

    written = store.compare_and_set(mine, expected_version=1)

    job, fields, update_time = witness(other, stored.id)
    (lost,) = faults.injected
    assert lost.mode is FaultMode.LOSE_ANSWER and lost.server_status == "OK"
    assert written.version == 2 and written.attempts == 7
    assert job == written  # the stored doc is our write, bumped once
    assert fields["_write_id"] == write_id_of(lost.request)  # ... the very write whose answer was lost
    assert written.store_token == update_time  # a usable token for the next write
    assert store.compare_and_set(changed(written, 8), expected_version=2).version == 3


@lost_codes
def test_claim_whose_create_answer_was_lost_is_reported_as_ours(store, other, faults, code):
    faults.lose_answers("commit", times=1, code=code)

    job, claimed = store.claim_or_get(draft())

    stored, fields, update_time = witness(other, job.id)
    (lost,) = faults.injected
    assert claimed and job.version == 1 and lost.server_status == "OK"
    assert stored == job and fields["_write_id"] == write_id_of(lost.request)
    assert job.store_token == update_time
    assert len(documents(other)) == 1


# ---------------------------------------------------------- (b) failed before it was sent


@lost_codes
def test_compare_and_set_that_never_left_the_client_is_retried_not_a_conflict(store, other, faults, code):
    stored, _ = store.claim_or_get(draft())
    faults.fail_before_send("commit", times=1, code=code)

    written = store.compare_and_set(changed(stored, 7), expected_version=1)

    assert faults.count(FaultMode.FAIL_BEFORE_SEND) == 1
    job, _, update_time = witness(other, stored.id)
    assert written.version == 2 and job == written and written.store_token == update_time


@lost_codes
def test_compare_and_set_that_never_gets_through_is_unavailable_not_a_conflict(store, other, faults, code):
    stored, _ = store.claim_or_get(draft())
    faults.fail_before_send("commit", times=100, code=code)

    with pytest.raises(StoreUnavailableError):
        store.compare_and_set(changed(stored, 7), expected_version=1)

    faults.clear()
    assert 1 <= faults.count() <= MAX_WRITE_ATTEMPTS  # bounded: nobody retries a write for a minute
    assert witness(other, stored.id)[0].version == 1
    assert store.compare_and_set(changed(stored, 8), expected_version=1).version == 2


@lost_codes
def test_claim_that_never_gets_through_is_unavailable_and_stores_nothing(store, other, faults, code):
    faults.fail_before_send("commit", times=100, code=code)

    with pytest.raises(StoreUnavailableError):
        store.claim_or_get(draft())

    faults.clear()
    assert 1 <= faults.count() <= MAX_WRITE_ATTEMPTS
    assert documents(other) == []
    job, claimed = store.claim_or_get(draft())
    assert claimed and job.version == 1


def test_a_lost_answer_whose_re_read_fails_too_is_unavailable_never_a_conflict(store, other, faults):
    """The write landed but the store cannot find out: it must say "unknown", not "someone else"."""
    stored, _ = store.claim_or_get(draft())
    faults.lose_answers("commit", times=1)
    faults.fail_before_send("get", times=100, code=UNAVAILABLE)

    with pytest.raises(StoreUnavailableError):
        store.compare_and_set(changed(stored, 7), expected_version=1)

    faults.clear()
    assert 1 <= faults.count(operation="get") <= MAX_READ_ATTEMPTS
    job, fields, _ = witness(other, stored.id)
    assert job.version == 2 and job.attempts == 7  # it did land
    assert fields["_write_id"] == write_id_of(faults.injected[0].request)


def test_reads_and_queries_ride_out_transient_faults_within_their_bound(store, faults):
    stored, _ = store.claim_or_get(draft())
    faults.fail_before_send("get", times=1, code=UNAVAILABLE)
    faults.lose_answers("get", times=1, code=DEADLINE)
    faults.fail_before_send("get", times=1)
    assert store.get(stored.id) == stored
    faults.lose_answers("run_query", times=1)
    faults.fail_before_send("run_query", times=1, code=UNAVAILABLE)
    assert store.find_due(State.SENDING, NOW + timedelta(hours=1), limit=10) == [stored]
    assert faults.count(operation="get") == 3 and faults.count(operation="run_query") == 2

    faults.fail_before_send("get", times=100, code=UNAVAILABLE)
    with pytest.raises(StoreUnavailableError):
        store.get(stored.id)
    faults.clear()
    assert faults.count(operation="get") - 3 <= MAX_READ_ATTEMPTS


# ------------------------------------------------------------ (c) genuine concurrent writer


@pytest.mark.parametrize("ours", ["clean", "answer_lost", "tokenless", "tokenless_answer_lost"])
def test_a_genuine_concurrent_writer_between_our_read_and_write_wins(store, other, faults, ours):
    store.claim_or_get(draft())
    read = store.get(draft().id)
    theirs = other.compare_and_set(changed(other.get(read.id), 42), expected_version=1)
    mine = changed(read, 7)
    if ours.startswith("tokenless"):
        mine.store_token = None
    if ours.endswith("answer_lost"):
        faults.lose_answers("commit", times=1)

    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(mine, expected_version=1)

    assert witness(other, read.id)[0] == theirs
    if ours == "answer_lost":  # our write was refused on the server, then its answer was lost
        assert [f.server_status for f in faults.injected] == ["FAILED_PRECONDITION"]
    if ours == "tokenless_answer_lost":  # the read showed version 2: nothing was sent
        assert faults.injected == []


# ------------------------------------------------------------- (d) claim, create answer lost


@lost_codes
def test_claim_whose_create_answer_was_lost_has_one_winner_across_two_claimers(store, other, faults, code):
    faults.lose_answers(
        "commit", times=1, code=code, match=lambda operation, request: threading.current_thread().name == "claimer-a"
    )
    barrier = threading.Barrier(2)
    outcomes: dict[str, tuple[Job, bool]] = {}
    errors: list[BaseException] = []

    def claim(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            outcomes[name] = store.claim_or_get(draft(owner=name))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(claim, ["claimer-a", "claimer-b"])

    assert errors == [] and faults.count(FaultMode.LOSE_ANSWER) == 1
    winners = [name for name, (_, created) in outcomes.items() if created]
    assert len(winners) == 1
    job, fields, update_time = witness(other, draft().id)
    assert job.lease_owner == winners[0] and job.version == 1
    assert {job.lease_owner for job, _ in outcomes.values()} == {winners[0]}
    assert outcomes[winners[0]][0].store_token == update_time
    (lost,) = faults.injected
    assert lost.thread == "claimer-a"
    assert lost.server_status == ("OK" if winners == ["claimer-a"] else "ALREADY_EXISTS")
    assert (fields["_write_id"] == write_id_of(lost.request)) is (winners == ["claimer-a"])


def test_a_second_claim_with_the_same_lease_owner_is_not_a_second_creation(store):
    """Recognising our own create must not rely on caller data: owners are not the store's to trust."""
    first, created = store.claim_or_get(draft(owner="same-owner"))
    again, created_again = store.claim_or_get(draft(owner="same-owner"))
    assert created and not created_again
    assert again == first


# ------------------------------------------------------ (e) ten racing writers, answers lost


@pytest.mark.parametrize("lossy", [(), (0, 2, 4, 6, 8), tuple(range(10))], ids=["none", "even", "all"])
def test_ten_racing_compare_and_sets_have_one_winner_even_with_lost_answers(store, other, faults, lossy):
    stored, _ = store.claim_or_get(draft())
    lossy_names = {f"writer-{i}" for i in lossy}
    if lossy_names:
        faults.lose_answers(
            "commit",
            times=len(lossy_names),
            match=lambda operation, request: threading.current_thread().name in lossy_names,
        )
    barrier = threading.Barrier(10)
    wins: dict[int, Job] = {}
    losses: list[int] = []
    errors: list[BaseException] = []

    def write(name: str) -> None:
        i = int(name.rsplit("-", 1)[1])
        mine = changed(stored, 10 + i)
        try:
            barrier.wait(timeout=10)
            wins[i] = store.compare_and_set(mine, expected_version=1)
        except ConcurrentUpdateError:
            losses.append(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(write, [f"writer-{i}" for i in range(10)], timeout_s=120)

    assert errors == []
    assert faults.count(FaultMode.LOSE_ANSWER) == len(lossy_names)
    assert len(wins) == 1 and len(losses) == 9
    ((winner, job),) = wins.items()
    stored_job, _, update_time = witness(other, stored.id)
    assert stored_job == job and job.attempts == 10 + winner and job.version == 2
    assert job.store_token == update_time


# ------------------------------------------------- a real socket between the store and Firestore


class RecordingClient(FirestoreRestClient):
    """The real REST client, noting the writes of every commit it sends: observation, no fault."""

    def __init__(self, project: str, emulator_host: str):
        super().__init__(project, emulator_host=emulator_host)
        self._lock = threading.Lock()
        self.commits: list[list[dict[str, Any]]] = []

    def commit(self, writes: Sequence[Mapping[str, Any]], timeout_s: float) -> dict[str, Any]:
        with self._lock:
            self.commits.append([dict(w) for w in writes])
        return super().commit(writes, timeout_s)


@pytest.fixture
def firestore_relay(emulator) -> Iterator[FaultRelay]:
    """devstack/relay.py between a client and the emulator: faults made by closing real sockets."""
    relay = FaultRelay(f"http://{emulator.host}/").start()
    try:
        yield relay
    finally:
        relay.stop()


@pytest.fixture
def relayed(firestore_relay, collection) -> Iterator[tuple[FirestoreJobStore, RecordingClient]]:
    client = RecordingClient(PROJECT, emulator_host=f"127.0.0.1:{firestore_relay.port}")
    yield FirestoreJobStore(PROJECT, collection=collection, client=client, timeout_s=1.0), client
    client.close()


@pytest.mark.parametrize("mode", ["close-after-forward", "forward-then-drop-response", "forward-then-5xx"])
def test_through_a_real_socket_a_claim_that_landed_without_an_answer_is_ours(firestore_relay, relayed, other, mode):
    """The relay forwards the create to the emulator, then closes the connection without a byte
    (or holds the answer past the client's deadline, or answers 503): the store must find its claim."""
    store, client = relayed
    firestore_relay.set_mode(mode, match="all", count=1, delay_s=5.0)

    job, claimed = store.claim_or_get(draft())

    stats = firestore_relay.stats()
    assert stats["faulted"][mode] == 1 and stats["remaining"] is None  # the fault hit the commit
    assert stats["forwarded"] == 2  # the create reached the emulator; then the store's re-read
    assert claimed and job.version == 1
    (doc,) = documents(other)  # exactly one document
    (sent,) = client.commits  # the re-read showed our create: nothing was sent again
    assert decode_fields(doc["fields"])["_write_id"] == write_id_of(sent)
    assert Job.from_dict(decode_fields(doc["fields"])) == job and job.store_token == doc["updateTime"]


@pytest.mark.parametrize("operation", ["claim", "compare_and_set"])
def test_through_a_real_socket_a_commit_never_forwarded_is_sent_again_not_a_conflict(
    firestore_relay, relayed, other, operation
):
    """The relay reads the commit and closes the connection without forwarding it: the client
    cannot tell this from a lost answer, the re-read shows nothing changed, the commit goes again."""
    store, client = relayed
    before = None
    if operation == "compare_and_set":
        before, _ = store.claim_or_get(draft())
    firestore_relay.set_mode("fail-before-forward", match="all", count=1)

    if before is None:
        job, claimed = store.claim_or_get(draft())
        assert claimed and job.version == 1
    else:
        job = store.compare_and_set(changed(before, 7), expected_version=1)
        assert job.version == 2 and job.attempts == 7

    stats = firestore_relay.stats()
    assert stats["faulted"]["fail-before-forward"] == 1
    *_, first, second = client.commits  # the unforwarded commit and its second sending, alike
    assert first == second
    (doc,) = documents(other)
    assert decode_fields(doc["fields"])["_write_id"] == write_id_of(second)
    assert Job.from_dict(decode_fields(doc["fields"])) == job and job.store_token == doc["updateTime"]
