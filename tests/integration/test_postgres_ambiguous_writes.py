"""PostgresJobStore when a write's answer is lost, against a REAL server through a fault proxy
(devstack.postgres.PgFaultProxy), the counterpart of test_firestore_ambiguous_writes.py.

A write the server committed but whose answer never came back (the connection dropped after the
implicit COMMIT) must be reported as what it was (our write), never as a lost race; a write that
never left the client must not be reported as a conflict either; genuine races must still be lost
by all but one writer. The proxy picks its victim by bytes the request carries (here the lease
owner inside the row's JSON), as the Firestore tests pick a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from devstack.postgres import PgFaultProxy, PostgresServer
from safesend.adapters.postgres_store import PostgresJobStore, connection_pool
from safesend.core.errors import ConcurrentUpdateError, StoreUnavailableError
from safesend.core.model import Job
from tests.integration.store_jobs import draft

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(postgres_server: PostgresServer) -> Iterator[PgFaultProxy]:
    with PgFaultProxy(postgres_server.port) as running:
        yield running


@pytest.fixture
def store(postgres_server, postgres_schema, proxy) -> Iterator[PostgresJobStore]:
    """The store under test: every connection goes through the fault proxy."""
    made = PostgresJobStore(connection_pool(proxy.dsn_of(postgres_server, postgres_schema), max_size=12))
    made.ensure_schema()
    yield made
    made.close()


@pytest.fixture
def other(postgres_server, postgres_schema) -> Iterator[PostgresJobStore]:
    """A second instance on a clean connection: the genuine concurrent writer, and our witness."""
    made = PostgresJobStore(connection_pool(postgres_server.schema_dsn(postgres_schema), max_size=12))
    yield made
    made.close()


def changed(job: Job, attempts: int, owner: str | None = None) -> Job:
    result = job.copy()
    result.attempts = attempts
    if owner is not None:
        result.lease_owner = owner
    return result


def needle(owner: str) -> bytes:
    return f'"lease_owner":"{owner}"'.encode()


# ----------------------------------------------------------------------------- the knob itself


def test_the_knob_loses_the_answer_of_a_committed_write_and_stops_an_unsent_one(store, other, proxy):
    proxy.lose_write_answers(times=1, needle=needle("lost"))
    proxy.fail_before_send(times=1, needle=needle("unsent"))
    with store.pool.connection() as conn:  # raw statements, no store logic
        conn.execute(
            "INSERT INTO ai_jobs SELECT 'x', 'm', 's', '{}', 0, NULL, NULL, NULL, NULL, now(), 1, "
            "gen_random_uuid(), '{}'"
        )
    import psycopg

    for owner in ("lost", "unsent"):
        with pytest.raises(psycopg.OperationalError), store.pool.connection() as conn:
            conn.execute(
                "UPDATE ai_jobs SET doc = %s::jsonb, version = version + 1 WHERE id = 'x'",
                (f'{{"lease_owner":"{owner}"}}',),
            )
    with other.pool.connection() as conn:
        assert conn.execute("SELECT version, doc->>'lease_owner' FROM ai_jobs").fetchone() == (2, "lost")
    assert proxy.injected == ["lose_answer", "fail_before_send"]


# ------------------------------------------------------------- (a) landed, answer lost


def test_compare_and_set_whose_answer_was_lost_reports_our_write(store, other, proxy):
    stored, _ = store.claim_or_get(draft())
    proxy.lose_write_answers(times=1, needle=needle("mine"))

    written = store.compare_and_set(changed(stored, 7, "mine"), expected_version=1)

    assert proxy.count("lose_answer") == 1
    assert written.version == 2 and written.attempts == 7
    assert other.get(stored.id) == written  # the stored row is our write, bumped once
    assert store.compare_and_set(changed(written, 8), expected_version=2).version == 3


def test_claim_whose_insert_answer_was_lost_is_still_ours(store, other, proxy):
    proxy.lose_write_answers(times=1, needle=needle("owner-a"))
    claimed, created = store.claim_or_get(draft(owner="owner-a"))
    assert proxy.count("lose_answer") == 1
    assert created and claimed.version == 1 and other.get(claimed.id) == claimed


# ---------------------------------------------------------- (b) failed before it was sent


def test_compare_and_set_that_never_left_the_client_is_retried_not_a_conflict(store, other, proxy):
    stored, _ = store.claim_or_get(draft())
    proxy.fail_before_send(times=1, needle=needle("mine"))

    written = store.compare_and_set(changed(stored, 7, "mine"), expected_version=1)

    assert proxy.count("fail_before_send") == 1
    assert written.version == 2 and other.get(stored.id) == written


def test_compare_and_set_that_never_gets_through_is_unavailable_not_a_conflict(store, other, proxy):
    stored, _ = store.claim_or_get(draft())
    proxy.fail_before_send(times=100, needle=needle("mine"))

    with pytest.raises(StoreUnavailableError):
        store.compare_and_set(changed(stored, 7, "mine"), expected_version=1)

    proxy.clear()
    assert 1 <= proxy.count() <= 5  # bounded: nobody retries a write for a minute
    assert other.get(stored.id).version == 1
    assert store.compare_and_set(changed(stored, 8), expected_version=1).version == 2


# ------------------------------------------------------------ (c) genuine concurrent writer


@pytest.mark.parametrize("ours", ["clean", "answer_lost", "never_sent"])
def test_a_genuine_concurrent_writer_between_our_read_and_write_wins(store, other, proxy, ours):
    store.claim_or_get(draft())
    read = store.get(draft().id)
    theirs = other.compare_and_set(changed(other.get(read.id), 42, "theirs"), expected_version=1)
    if ours == "answer_lost":
        proxy.lose_write_answers(times=1, needle=needle("mine"))  # nothing to lose: the UPDATE changes no row
    elif ours == "never_sent":
        proxy.fail_before_send(times=1, needle=needle("mine"))

    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(changed(read, 7, "mine"), expected_version=1)

    assert other.get(read.id) == theirs


# ------------------------------------------------------------- (d) claim, insert answer lost


def test_claim_whose_insert_answer_was_lost_has_one_winner_across_two_claimers(store, other, proxy):
    proxy.lose_write_answers(times=1, needle=needle("claimer-a"))
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

    assert errors == []
    winners = [name for name, (_, created) in outcomes.items() if created]
    assert len(winners) == 1
    stored = other.get(draft().id)
    assert stored.lease_owner == winners[0] and stored.version == 1
    assert {job.lease_owner for job, _ in outcomes.values()} == {winners[0]}
    assert proxy.count("lose_answer") == (1 if winners == ["claimer-a"] else 0)


def test_a_second_claim_with_the_same_lease_owner_is_not_a_second_creation(store):
    first, created = store.claim_or_get(draft(owner="same-owner"))
    again, created_again = store.claim_or_get(draft(owner="same-owner"))
    assert created and not created_again and again == first


# ------------------------------------------------------ (e) ten racing writers, answers lost


@pytest.mark.parametrize("lossy", [(), (0, 2, 4, 6, 8), tuple(range(10))], ids=["none", "even", "all"])
def test_ten_racing_compare_and_sets_have_one_winner_even_with_lost_answers(store, other, proxy, lossy):
    stored, _ = store.claim_or_get(draft())
    for i in lossy:
        proxy.lose_write_answers(times=1, needle=needle(f"writer-{i}"))
    barrier = threading.Barrier(10)
    wins: dict[int, Job] = {}
    losses: list[int] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        mine = changed(stored, 10 + i, f"writer-{i}")
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
    assert len(wins) == 1 and len(losses) == 9
    ((winner, job),) = wins.items()
    assert other.get(stored.id) == job and job.attempts == 10 + winner and job.version == 2
    assert proxy.count("lose_answer") == (1 if winner in lossy else 0)  # only the winner's answer can be lost
