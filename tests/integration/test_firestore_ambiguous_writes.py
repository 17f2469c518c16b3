"""FirestoreJobStore when a commit's answer is lost, against the REAL emulator (devstack/firestore_faults).

A commit that landed but whose answer never came back must be reported as what it was (our
write), never as a lost race; a commit that never left the client must not be reported as a
conflict either; genuine races must still be lost by all but one writer.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore

from devstack.firestore_faults import FaultMode, FirestoreFaults, emulator_client
from safesend.adapters.firestore_store import FirestoreJobStore
from safesend.errors import ConcurrentUpdateError, StoreUnavailableError
from safesend.lifecycle import Timing, new_job, start_attempt
from safesend.model import Job

PROJECT = "demo-safesend-faults"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
UNAVAILABLE, DEADLINE = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED
lost_codes = pytest.mark.parametrize("code", [UNAVAILABLE, DEADLINE], ids=["unavailable", "deadline"])


@pytest.fixture
def collection() -> str:
    return f"ai_jobs_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def faults() -> FirestoreFaults:
    return FirestoreFaults()


@pytest.fixture
def store(firestore_emulator, monkeypatch, faults, collection):
    """The store under test: every RPC goes through the fault interceptor."""
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    firestore_emulator.reset(PROJECT)
    with emulator_client(PROJECT, faults) as client:
        yield FirestoreJobStore(PROJECT, collection=collection, client=client)


@pytest.fixture
def other(store, collection):
    """A second instance on a clean channel: the genuine concurrent writer, and our witness."""
    yield FirestoreJobStore(PROJECT, collection=collection, client=firestore.Client(project=PROJECT))


def draft(key: str = "c:e:o", owner: str = "owner-a") -> Job:
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


def raw(other: FirestoreJobStore, job_id: str) -> firestore.DocumentSnapshot:
    return other.client.collection(other._collection).document(job_id).get()


def changed(job: Job, attempts: int) -> Job:
    result = job.copy()
    result.attempts = attempts
    return result


# ----------------------------------------------------------------------------- the knob itself


def test_the_knob_lets_a_lost_commit_land_and_stops_an_unsent_one(store, other, faults):
    docs = store.client.collection(store._collection)
    faults.lose_answers("Commit", times=1)
    with pytest.raises(gexc.ServiceUnavailable):
        docs.document("landed").create({"a": 1}, retry=None)
    faults.fail_before_send("Commit", times=1, code=DEADLINE)
    with pytest.raises(gexc.DeadlineExceeded):
        docs.document("unsent").create({"a": 1}, retry=None)
    docs.document("clean").create({"a": 1}, retry=None)  # both rules are used up

    assert raw(other, "landed").exists and not raw(other, "unsent").exists and raw(other, "clean").exists
    assert [(f.mode, f.code, f.server_code) for f in faults.injected] == [
        (FaultMode.LOSE_ANSWER, UNAVAILABLE, grpc.StatusCode.OK),
        (FaultMode.FAIL_BEFORE_SEND, DEADLINE, None),
    ]


# ------------------------------------------------------------- (a) landed, answer lost


@lost_codes
@pytest.mark.parametrize("tokenless", [False, True], ids=["token", "tokenless"])
def test_compare_and_set_whose_answer_was_lost_reports_our_write(store, other, faults, code, tokenless):
    stored, _ = store.claim_or_get(draft())
    mine = changed(stored, 7)
    if tokenless:
        mine.store_token = None
    faults.lose_answers("Commit", times=1, code=code)

    written = store.compare_and_set(mine, expected_version=1)

    snapshot = raw(other, stored.id)
    assert faults.count(FaultMode.LOSE_ANSWER) == 1
    assert written.version == 2 and written.attempts == 7
    assert Job.from_dict(snapshot.to_dict()) == written  # the stored doc is our write, bumped once
    assert written.store_token == snapshot.update_time  # a usable token for the next write
    assert store.compare_and_set(changed(written, 8), expected_version=2).version == 3


# ---------------------------------------------------------- (b) failed before it was sent


@lost_codes
def test_compare_and_set_that_never_left_the_client_is_retried_not_a_conflict(store, other, faults, code):
    stored, _ = store.claim_or_get(draft())
    faults.fail_before_send("Commit", times=1, code=code)

    written = store.compare_and_set(changed(stored, 7), expected_version=1)

    assert faults.count(FaultMode.FAIL_BEFORE_SEND) == 1
    assert written.version == 2 and Job.from_dict(raw(other, stored.id).to_dict()) == written


@lost_codes
def test_compare_and_set_that_never_gets_through_is_unavailable_not_a_conflict(store, other, faults, code):
    stored, _ = store.claim_or_get(draft())
    faults.fail_before_send("Commit", times=100, code=code)

    with pytest.raises(StoreUnavailableError):
        store.compare_and_set(changed(stored, 7), expected_version=1)

    faults.clear()
    assert 1 <= faults.count() <= 5  # bounded: nobody retries a write for a minute
    assert raw(other, stored.id).to_dict()["version"] == 1
    assert store.compare_and_set(changed(stored, 8), expected_version=1).version == 2


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
        faults.lose_answers("Commit", times=1)

    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(mine, expected_version=1)

    assert Job.from_dict(raw(other, read.id).to_dict()) == theirs


# ------------------------------------------------------------- (d) claim, create answer lost


@lost_codes
def test_claim_whose_create_answer_was_lost_has_one_winner_across_two_claimers(store, other, faults, code):
    faults.lose_answers(
        "Commit", times=1, code=code, match=lambda method, request: threading.current_thread().name == "claimer-a"
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

    threads = [threading.Thread(target=claim, args=(n,), name=n) for n in ("claimer-a", "claimer-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == [] and faults.count(FaultMode.LOSE_ANSWER) == 1
    winners = [name for name, (_, created) in outcomes.items() if created]
    assert len(winners) == 1
    snapshot = raw(other, draft().id)
    assert snapshot.to_dict()["lease_owner"] == winners[0] and snapshot.to_dict()["version"] == 1
    assert {job.lease_owner for job, _ in outcomes.values()} == {winners[0]}
    assert outcomes[winners[0]][0].store_token == snapshot.update_time


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
            "Commit",
            times=len(lossy_names),
            match=lambda method, request: threading.current_thread().name in lossy_names,
        )
    barrier = threading.Barrier(10)
    wins: dict[int, Job] = {}
    losses: list[int] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        mine = changed(stored, 10 + i)
        try:
            barrier.wait(timeout=10)
            wins[i] = store.compare_and_set(mine, expected_version=1)
        except ConcurrentUpdateError:
            losses.append(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,), name=f"writer-{i}") for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert errors == []
    assert faults.count(FaultMode.LOSE_ANSWER) == len(lossy_names)
    assert len(wins) == 1 and len(losses) == 9
    ((winner, job),) = wins.items()
    snapshot = raw(other, stored.id)
    assert Job.from_dict(snapshot.to_dict()) == job and job.attempts == 10 + winner and job.version == 2
    assert job.store_token == snapshot.update_time
