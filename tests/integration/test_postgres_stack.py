"""End to end with SAFESEND_STORE=postgres: the local stack (devstack/stack.py, StackConfig(store="postgres"))
runs the four functions against a throwaway PostgreSQL server instead of the Firestore emulator, and
the scenarios of test_stack.py that exercise the store hardest run unchanged: the happy path and its
replays, a dropped Gmail response settled from the mailbox, a worker killed right after its claim,
and ten concurrent duplicate webhooks. Every job is also read straight from the ai_jobs table, so a
runtime that silently kept Firestore would fail here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from devstack.stack import LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import SETTLED, Client, job_id_of

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    with shared_emulators.stack_for("postgres", StackConfig(store="postgres")) as running:
        yield running


@pytest.fixture(autouse=True)
def clean_relay(stack: LocalStack) -> Iterator[None]:
    stack.relay.set_mode("forward-and-respond")
    yield
    stack.relay.set_mode("forward-and-respond")


@pytest.fixture
def n8n(stack: LocalStack) -> Client:
    return Client(stack)


def stored_row(stack: LocalStack, job_id: str) -> dict[str, Any]:
    """The job's row in PostgreSQL, read past the service."""
    assert stack.postgres is not None
    assert stack.postgres.execute("SELECT to_regclass('ai_jobs') IS NOT NULL")[0][0], (
        "no ai_jobs table in PostgreSQL: the functions did not use it. Is the runtime's store chosen by "
        "SAFESEND_STORE? (functions/safesend/bootstrap/runtime.py: build_store)"
    )
    rows = stack.postgres.execute(
        "SELECT state, attempts, version, provider_ref->>'gmail_id', message_id FROM ai_jobs WHERE id = %s", (job_id,)
    )
    assert rows, f"job {job_id} is missing in PostgreSQL: is the runtime's store chosen by SAFESEND_STORE?"
    state, attempts, version, gmail_id, message_id = rows[0]
    return {"state": state, "attempts": attempts, "version": version, "gmail_id": gmail_id, "message_id": message_id}


def test_the_stack_runs_on_postgres(stack):
    assert stack.postgres is not None and stack.postgres.is_running()
    env = stack.service_env()
    assert env["SAFESEND_STORE"] == "postgres" and env["SAFESEND_POSTGRES_DSN"].startswith("postgresql://")
    assert stack.process_groups()["postgres"] == stack.postgres.pgid


def test_retry_with_the_same_key_gives_exactly_one_effect(n8n, stack):
    body = n8n.job()
    first = n8n.send(body)
    assert first.status_code == 200 and first.json()["state"] == "sent"
    for _ in range(4):
        again = n8n.send(body)
        assert again.status_code == 200 and again.json()["replayed"] is True
        assert again.json()["provider_ref"] == first.json()["provider_ref"]
    assert n8n.effects(first.json()["message_id"]) == 1
    row = stored_row(stack, first.json()["job_id"])
    assert row == {
        "state": "sent",
        "attempts": 1,
        "version": 2,
        "gmail_id": first.json()["provider_ref"]["gmail_id"],
        "message_id": first.json()["message_id"],
    }  # claim + outcome: two writes


def test_dropped_response_gives_no_duplicate_and_ends_sent(n8n, stack):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    response = n8n.send(n8n.job())
    assert response.status_code == 202 and response.json()["state"] == "unknown"
    view = n8n.wait_for(response.json()["job_id"], SETTLED)  # Cloud Tasks emulator calls reconcile
    assert view["state"] == "sent" and view["provider_ref"]["gmail_id"]
    assert {"found_in_history", "found_in_mailbox"} & {e["kind"] for e in view["events"]}
    assert n8n.effects(view["message_id"]) == 1
    assert stored_row(stack, view["job_id"])["state"] == "sent"


def test_a_crash_after_the_claim_recovers_through_the_sweeper_with_one_effect(n8n, stack):
    body = n8n.job()
    with pytest.raises(requests.ConnectionError):
        n8n.send(body, fault="after_claim")  # the worker process dies mid-request, pooled connections too
    job_id = job_id_of(body)
    assert stored_row(stack, job_id)["state"] == "sending"
    view = n8n.wait_for(job_id, SETTLED, timeout_s=45, sweep=True)  # Cloud Scheduler's sweeps
    assert view["state"] == "sent" and view["attempts"] == 2
    assert "outcome_unknown" in [e["kind"] for e in view["events"]]
    assert n8n.effects(view["message_id"]) == 1
    assert stored_row(stack, job_id)["state"] == "sent"


def test_ten_concurrent_duplicate_webhooks_give_one_effect(n8n, stack):
    body = n8n.job()
    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(lambda _: n8n.send(body), range(10)))
    assert all(r.status_code in (200, 202) for r in responses), [r.text for r in responses]
    assert sum(1 for r in responses if r.json()["replayed"] is False) == 1
    view = n8n.wait_for(responses[0].json()["job_id"], SETTLED)
    assert view["state"] == "sent" and n8n.effects(view["message_id"]) == 1
    assert stored_row(stack, view["job_id"])["attempts"] == 1


def test_a_sweep_with_nothing_due_answers_from_postgres(n8n, stack):
    started = time.monotonic()
    report = n8n.sweep()
    assert report.get("errors", 0) == 0, report
    assert time.monotonic() - started < 10
