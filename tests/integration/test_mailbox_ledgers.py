"""The shared MailboxLedgers against real backends: Firestore (Google's emulator) and PostgreSQL.

Two ledger objects on the same backend stand for two function instances: what one reserves, the other
sees. The hypothesis property of tests/unit/test_mailbox_budget.py runs here too, with threads: no
interleaving of reservations through the real compare-and-set or row lock exceeds a budget.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.postgres import PostgresServer
from safesend.adapters.firestore_ledger import FirestoreMailboxLedger
from safesend.adapters.firestore_rest import FirestoreRestClient, FirestoreTransportError
from safesend.adapters.postgres_ledger import PostgresMailboxLedger
from safesend.adapters.postgres_schema import migrations
from safesend.adapters.postgres_store import connect, connection_pool
from safesend.core.mailbox_budget import ARRIVAL_MARGIN_S, Refusal, Reservation
from safesend.core.mailboxes import PRESETS, Mailbox
from safesend.core.ports import MailboxLedger
from tests.ledger_properties import START, TIGHT, Call, assert_within_budget, calls, run_interleaved

pytestmark = pytest.mark.integration

PROJECT = "demo-safesend-ledger"
SHOP = Mailbox("shop", "shop@example.com", token_secret="t", limits=PRESETS["workspace"])
MakeLedger = Callable[[], MailboxLedger]


def at(seconds: float):
    return START + timedelta(seconds=seconds)


@pytest.fixture
def firestore_ledgers(firestore_emulator, monkeypatch) -> Iterator[MakeLedger]:
    """New ledgers (instances) over one fresh collection of the emulator."""
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    collection = f"mailboxes_{uuid.uuid4().hex[:8]}"
    made: list[FirestoreMailboxLedger] = []

    def make() -> MailboxLedger:
        ledger = FirestoreMailboxLedger(PROJECT, collection=collection, client=FirestoreRestClient(PROJECT))
        made.append(ledger)
        return ledger

    yield make
    for ledger in made:
        ledger.client.close()


@pytest.fixture
def postgres_ledgers(postgres_dsn) -> Iterator[MakeLedger]:
    """New ledgers (instances), each with its own connection pool, over this test's schema."""
    pools = []

    def make() -> MailboxLedger:
        pool = connection_pool(postgres_dsn, max_size=4, timeout_s=10.0)
        pools.append(pool)
        return PostgresMailboxLedger(pool, timeout_s=10.0)

    yield make
    for pool in pools:
        pool.close()


@pytest.fixture(params=["firestore", "postgres"])
def ledgers(request) -> MakeLedger:
    return request.getfixturevalue(f"{request.param}_ledgers")


def test_two_instances_share_one_budget(ledgers: MakeLedger):
    first, second = ledgers(), ledgers()
    for i in range(30):
        assert isinstance(first.reserve(SHOP, 100, 1, at(i * 0.1)), Reservation)
        assert isinstance(second.reserve(SHOP, 100, 1, at(i * 0.1 + 0.05)), Reservation)
    refused = second.reserve(SHOP, 100, 1, at(5))
    # 60 sends: the minute's 6,000 units, across both; the first leaves the window at 61 s plus the
    # margin for its arrival at Gmail after the reservation
    assert refused == Refusal(at(61 + ARRIVAL_MARGIN_S), "rate")
    shown = first.snapshot(SHOP, at(6))
    assert (shown.state, shown.minute_used, shown.day_messages, shown.next_free_at) == (
        "ok",
        6000,
        60,
        at(61 + ARRIVAL_MARGIN_S),
    )


def test_refusals_teach_every_instance(ledgers: MakeLedger):
    first, second = ledgers(), ledgers()
    first.penalise(SHOP, "rate", at(0))
    assert second.snapshot(SHOP, at(1)).state == "slowed"
    assert second.snapshot(SHOP, at(1)).minute_limit == 3000
    second.penalise(SHOP, "daily", at(2), until=at(3600))
    assert first.reserve(SHOP, 100, 1, at(3)) == Refusal(at(3600), "exhausted")
    assert isinstance(first.reserve(SHOP, 5, 0, at(4)), Reservation)  # reads go on
    assert first.snapshot(SHOP, at(5)).state == "exhausted"


def test_mailboxes_have_separate_budgets(ledgers: MakeLedger):
    ledger = ledgers()
    other = Mailbox("other", "other@example.com", token_secret="t", limits=PRESETS["workspace"])
    ledger.penalise(SHOP, "daily", at(0))
    assert isinstance(ledger.reserve(other, 100, 1, at(1)), Reservation)
    assert ledger.snapshot(other, at(2)).state == "ok"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=calls, threads=st.integers(2, 6))
def test_no_interleaving_exceeds_the_budget_on_firestore(firestore_ledgers: MakeLedger, script: list[Call], threads):
    mailbox = dataclasses.replace(TIGHT, id=f"t{uuid.uuid4().hex[:12]}")  # a fresh budget per example
    admitted = run_interleaved(firestore_ledgers(), mailbox, script, threads)
    assert_within_budget(admitted, mailbox)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=calls, threads=st.integers(2, 6))
def test_no_interleaving_exceeds_the_budget_on_postgres(postgres_ledgers: MakeLedger, script: list[Call], threads):
    mailbox = dataclasses.replace(TIGHT, id=f"t{uuid.uuid4().hex[:12]}")  # a fresh budget per example
    admitted = run_interleaved(postgres_ledgers(), mailbox, script, threads)
    assert_within_budget(admitted, mailbox)


def test_the_postgres_ledger_migrates_its_table(postgres_server: PostgresServer, postgres_dsn):
    assert "mailbox_budgets" in [m.name for m in migrations()]  # 0002; later ones follow it
    pool = connection_pool(postgres_dsn, max_size=1)
    try:
        PostgresMailboxLedger(pool).reserve(SHOP, 100, 1, at(0))
    finally:
        pool.close()
    with connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT mailbox, budget->'day' FROM safesend_mailbox_budgets").fetchall()
    assert rows == [("shop", [[START.timestamp() // 600 * 600, 1, 1]])]


def test_a_concurrent_burst_admits_exactly_the_budget(ledgers: MakeLedger):
    """8 instances fire 12 sends each at the same moment: exactly the minute's 5 sends get through."""
    mailbox = dataclasses.replace(TIGHT, id=f"b{uuid.uuid4().hex[:12]}")
    instances = [ledgers() for _ in range(8)]
    barrier = threading.Barrier(len(instances))
    outcomes: list[Reservation | Refusal] = []
    lock = threading.Lock()

    def burst(ledger: MailboxLedger) -> None:
        barrier.wait(timeout=30)
        for _ in range(12):
            outcome = ledger.reserve(mailbox, 100, 1, at(0))
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=burst, args=(ledger,), daemon=True) for ledger in instances]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(outcomes) == 96
    assert sum(isinstance(o, Reservation) for o in outcomes) == 5  # floor(520 / 100)
    assert instances[0].snapshot(mailbox, at(1)).minute_used == 500


class LosingClient(FirestoreRestClient):
    """Loses the answer of the first commit: after applying it (`applied`), or before it reached Firestore."""

    def __init__(self, applied: bool):
        super().__init__(PROJECT)
        self.applied = applied
        self.commits = 0

    def commit(self, writes, timeout_s):
        self.commits += 1
        if self.commits == 1:
            if self.applied:
                super().commit(writes, timeout_s)
            raise FirestoreTransportError("answer lost", request_sent=True)
        return super().commit(writes, timeout_s)


@pytest.mark.parametrize("applied", [True, False])
def test_a_lost_commit_answer_is_settled_by_the_write_id(firestore_emulator, monkeypatch, applied: bool):
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore_emulator.host)
    client = LosingClient(applied)
    ledger = FirestoreMailboxLedger(PROJECT, collection=f"lost_{uuid.uuid4().hex[:8]}", client=client)
    try:
        assert isinstance(ledger.reserve(SHOP, 100, 1, at(0)), Reservation)
        assert ledger.snapshot(SHOP, at(1)).minute_used == 100  # counted once, whatever became of the answer
        assert client.commits == (1 if applied else 2)
    finally:
        client.close()
