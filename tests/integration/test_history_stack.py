"""Issue 12.1 end to end: with the mailbox's change log, an ambiguous send that landed is certain in
seconds (no wait for the search index), through the real mailer, simulator and entry points."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from devstack.stack import LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators
from tests.integration.test_stack import SETTLED, Client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    config = StackConfig(sim_index_lag_s=4.0)  # the search index is slow here...
    config.service_env = {
        **config.service_env,
        "SAFESEND_INDEX_LAG_S": "4",
        "SAFESEND_UNKNOWN_WINDOW_S": "8",
        "SAFESEND_HISTORY_CHECK_S": "0.5",
    }
    with shared_emulators.stack_for("history", config) as running:
        running.sim.set_history_lag(0.3)  # ...the change log is not
        yield running


@pytest.fixture
def n8n(stack) -> Client:
    return Client(stack)


def test_a_dropped_answer_is_certain_from_the_change_log_before_the_index_could_show_it(stack, n8n):
    # A fresh instance reads its checkpoint in the background on its first send (that send settles by
    # search if it needs to); every later one has it at no cost.
    assert n8n.send(n8n.job()).status_code == 200
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=3)
    response = n8n.send(n8n.job())
    assert response.status_code == 202 and response.json()["state"] == "unknown"
    view = n8n.wait_for(response.json()["job_id"], SETTLED, timeout_s=20)
    status = n8n.status(view["job_id"])
    kinds = [e["kind"] for e in status["events"]]
    assert view["state"] == "sent" and "found_in_history" in kinds and "mailbox_checked" not in kinds
    started = datetime.fromisoformat(next(e["at"] for e in status["events"] if e["kind"] == "attempt_started"))
    settled = datetime.fromisoformat(status["updated_at"])
    assert (settled - started).total_seconds() < 4.0, "certain before the search index could show the copy"
    assert n8n.effects(view["message_id"]) == 1
