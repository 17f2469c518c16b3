"""Real n8n drives the local stack, headless, with the example workflows in examples/n8n/ as shipped.

n8n 2.x (pinned in scripts/n8n-install.sh, installed outside the repo on first use: minutes, once per
machine) imports each example into a temporary N8N_USER_FOLDER; only what examples/n8n/README.md
tells a user to change is changed: the send URL (here the test's counting proxy in front of the
stack), the credentials (created with the stack's API key and HMAC secret), and the sample orders.

One `n8n start` serves the module:
- Manual Trigger workflows run as the editor's "Execute workflow" runs them (n8n's REST API); their
  output is the run data of the named result nodes.
- send-and-wait (a Webhook trigger and a Wait node that resumes "On Webhook Call") is published and
  triggered through its production webhook URL; its output is the Respond to Webhook answer, which
  n8n holds until the last Wait has resumed.

Every "how many emails" assertion reads the Gmail simulator's acceptance log; every "how many
requests" assertion reads the counting proxy, which sees what n8n sent before safesend does.
SAFESEND_SKIP_N8N=1 skips this module (e.g. on a laptop without the 3 GB for n8n).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from devstack.stack import LocalStack, StackConfig
from safesend.core.keys import compose_dedup_key, job_id_for
from tests.emulator_fixtures import SharedEmulators
from tests.integration import n8n_support as ns

_INSTALLED = subprocess.run(["bash", str(ns.INSTALL_SCRIPT), "--check"], capture_output=True).returncode == 0
pytestmark = [
    pytest.mark.integration,
    pytest.mark.functions_out_of_process,
    # The first run installs n8n inside the first test's setup (bounded by ns.INSTALL_TIMEOUT_S).
    pytest.mark.timeout(300 if _INSTALLED else ns.INSTALL_TIMEOUT_S + 300),
    pytest.mark.skipif(os.environ.get("SAFESEND_SKIP_N8N") == "1", reason="SAFESEND_SKIP_N8N=1"),
]

RESULT_NODES = (
    "Sent",
    "Needs review or failed",
    "In progress (look it up)",
    "Rejected (not retried)",
    "Gave up",
    "Final state",
    "Still in progress",
)
WRONG_KEY = "ssk_wrong-key_" + "A" * 43
SERVER_EXAMPLE = "send-and-wait"  # the example `n8n start` serves (a Webhook trigger, Wait nodes)
ORDERS_HEADER = ("X-Orders-Token", uuid.uuid4().hex)  # who may trigger send-and-wait's Webhook


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def n8n_bin() -> Path:
    return ns.ensure_n8n()


@pytest.fixture(scope="module")
def stack(n8n_bin: Path, shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    with shared_emulators.stack_for("n8n", StackConfig(auth=True)) as running:
        assert running.api_key and running.hmac_secret
        yield running


@pytest.fixture(autouse=True)
def clean_relay(stack: LocalStack) -> Iterator[None]:
    stack.relay.set_mode("forward-and-respond")
    yield
    stack.relay.set_mode("forward-and-respond")


@pytest.fixture(scope="module")
def proxy(stack: LocalStack) -> Iterator[ns.CountingProxy]:
    counting = ns.CountingProxy(stack.url).start()
    yield counting
    counting.stop()


def credentials(api_key: str, hmac_secret: str) -> list[dict[str, Any]]:
    """What a user creates in n8n (Credentials > Add): ids as referenced by the example workflows."""
    return [
        {"id": "SafesendApiKey01", "name": "safesend API key", "type": "httpBearerAuth", "data": {"token": api_key}},
        {
            "id": "SafesendHmacKey1",
            "name": "safesend HMAC secret",
            "type": "crypto",
            "data": {"hmacSecret": hmac_secret},
        },
        {
            "id": "SafesendOrdersHk",
            "name": "orders webhook token",
            "type": "httpHeaderAuth",
            "data": {"name": ORDERS_HEADER[0], "value": ORDERS_HEADER[1]},
        },
    ]


class Cli:
    """One n8n user folder and the `n8n start` server on it, every scenario imported up front in one
    go (each n8n CLI command boots n8n: seconds). A scenario is an example workflow as shipped, with
    its sample orders replaced and an id of its own; the examples themselves are imported with their
    ids. Scenarios run on the server, as the editor's "Execute workflow" runs them."""

    EXAMPLES = ("send-with-retry", "send-hmac", "send-and-poll")

    def __init__(self, folder: ns.N8nFolder, proxy_url: str):
        self.folder = folder
        self.proxy_url = proxy_url
        self.scenarios: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.server = ns.N8nServer(folder)

    def add(self, scenario: str, example: str, orders: list[dict[str, Any]]) -> dict[str, Any]:
        workflow = ns.load_example(example, self.proxy_url, orders=orders)
        workflow["id"] = ("T" + uuid.uuid5(uuid.NAMESPACE_URL, scenario).hex)[:16]
        workflow["name"] += f" [{scenario}]"
        self.scenarios[scenario] = (workflow["id"], orders)
        return workflow

    def orders(self, scenario: str) -> list[dict[str, Any]]:
        return self.scenarios[scenario][1]

    def run(self, scenario: str, timeout_s: float = 150) -> ns.Execution:
        result = self.server.execute(self.scenarios[scenario][0], timeout_s=timeout_s)
        assert result.ok, result.describe()
        return result


@pytest.fixture(scope="module")
def cli(
    n8n_bin: Path, stack: LocalStack, proxy: ns.CountingProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cli]:
    """The folder: credentials and workflows imported, send-and-wait published (each n8n CLI command
    boots n8n, and the first in a new folder migrates its database: ~2.5 CPU-s more), then `n8n start`
    on it, for the manual runs and send-and-wait's production webhook."""
    runner = Cli(ns.N8nFolder(n8n_bin, tmp_path_factory.mktemp("n8n-cli")), proxy.url)
    retry = "send-with-retry"
    workflows = [
        runner.add("two orders", retry, orders_of_one_customer("1001", "1002")),
        runner.add("rerun", retry, [order(new_customer(), "7")]),
        runner.add("next to a wrong key", retry, [order(new_customer(), "1")]),
        wrong_key(runner.add("wrong key", retry, orders_of_one_customer("1", "2"))),
        runner.add("invalid", retry, [dict(order(new_customer(), "5"), to=["not an address"])]),
        runner.add("503 then a drop", retry, [order(new_customer(), "42")]),
        runner.add("429", retry, [order(new_customer(), "43")]),
        runner.add("hmac", "send-hmac", orders_of_one_customer("1", "2")),
        runner.add("poll", "send-and-poll", [order(new_customer(), "3")]),
        runner.add("202 is not done", retry, [order(new_customer(), "8")]),
        runner.add("review branch", "send-and-poll", [order(new_customer(), "9", channel="payments")]),
        runner.add("long outage", retry, orders_of_one_customer("10", "11")),
        *(ns.load_example(name, proxy.url) for name in Cli.EXAMPLES),
        ns.load_example(SERVER_EXAMPLE, proxy.url),  # published below: its production webhook
    ]
    runner.folder.import_credentials([*credentials(stack.api_key, stack.hmac_secret), WRONG_KEY_CREDENTIAL])
    runner.folder.import_workflows(workflows)
    served = ns.load_example(SERVER_EXAMPLE, proxy.url)
    runner.folder.check("publish:workflow", f"--id={served['id']}")
    with runner.server:
        runner.server.start(ready_paths=[ns.webhook_path(served)])
        runner.server.webhook = ns.webhook_path(served)
        yield runner


WRONG_KEY_CREDENTIAL = {
    "id": "SafesendWrongKey",
    "name": "wrong API key",
    "type": "httpBearerAuth",
    "data": {"token": WRONG_KEY},
}


def wrong_key(workflow: dict[str, Any]) -> dict[str, Any]:
    """The workflow with its API-key credential swapped for one that holds a wrong key (a user's typo)."""
    swapped = json.dumps(workflow).replace('"SafesendApiKey01"', f'"{WRONG_KEY_CREDENTIAL["id"]}"')
    assert swapped != json.dumps(workflow)
    return json.loads(swapped)


@pytest.fixture(scope="module")
def server(cli: Cli) -> ns.N8nServer:
    """The `n8n start` of `cli`, serving send-and-wait's production webhook."""
    return cli.server


# --------------------------------------------------------------------------- helpers
def order(customer: str, order_id: str, channel: str = "transactional") -> dict[str, Any]:
    return {
        "customer_id": customer,
        "event_type": "order_paid",
        "order_id": order_id,
        "channel": channel,
        "to": ["Ann <ann@example.com>"],
        "subject": f"Your receipt for order {order_id}",
        "text": f"Thanks for order {order_id}!",
    }


def new_customer() -> str:
    return f"n8n-{uuid.uuid4().hex[:10]}"


def orders_of_one_customer(*order_ids: str) -> list[dict[str, Any]]:
    customer = new_customer()
    return [order(customer, order_id) for order_id in order_ids]


def emails_for(stack: LocalStack, job: dict[str, Any]) -> int:
    """Accepted copies in the simulator's mailbox for this order's job (Message-ID from its dedup key)."""
    job_id = job_id_for(compose_dedup_key(job["customer_id"], job["event_type"], job["order_id"]))
    return sum(1 for effect in stack.sim.effects() if f"<job-{job_id}@" in effect["message_id"])


def outputs(result: ns.Execution) -> dict[str, list[dict[str, Any]]]:
    return {node: result.items(node) for node in RESULT_NODES if result.items(node)}


def by_order(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["order_id"]: item for item in items}


# --------------------------------------------------------------------------- send-with-retry (manual runs)
def test_send_with_retry_two_orders_two_emails(cli, stack, proxy):
    orders = cli.orders("two orders")
    result = cli.run("two orders")
    assert set(outputs(result)) == {"Sent"}, outputs(result)
    accepted = by_order(result.items("Sent"))
    assert set(accepted) == {"1001", "1002"}
    for job in orders:
        assert (accepted[job["order_id"]]["http_status"], accepted[job["order_id"]]["state"]) == (200, "sent")
        assert emails_for(stack, job) == 1
    assert len(proxy.sends_for(customer_id=orders[0]["customer_id"])) == 2


def test_send_with_retry_rerun_replays_and_sends_nothing_more(cli, stack):
    first = cli.run("rerun")
    again = cli.run("rerun")  # someone runs the workflow again
    assert first.items("Sent")[0]["replayed"] is False
    assert again.items("Sent")[0]["replayed"] is True
    assert again.items("Sent")[0]["message_id"] == first.items("Sent")[0]["message_id"]
    assert emails_for(stack, cli.orders("rerun")[0]) == 1


def test_wrong_api_key_is_401_on_the_error_branch_and_never_retried(cli, stack, proxy):
    """Two runs at once on one n8n: one with a credential that holds a wrong key."""
    with ThreadPoolExecutor(2) as pool:
        bad_future = pool.submit(cli.server.execute, cli.scenarios["wrong key"][0], 150)
        good_future = pool.submit(cli.run, "next to a wrong key")
        bad, good = bad_future.result(), good_future.result()
    assert bad.ok, bad.describe()
    bad_orders = cli.orders("wrong key")
    bad_customer = bad_orders[0]["customer_id"]

    rejected = by_order(bad.items("Rejected (not retried)"))
    assert set(outputs(bad)) == {"Rejected (not retried)"}, outputs(bad)
    for job in bad_orders:
        assert rejected[job["order_id"]]["http_status"] == 401
        assert rejected[job["order_id"]]["error"] == "unauthenticated"
        assert rejected[job["order_id"]]["message"]  # says what to do
        assert emails_for(stack, job) == 0
        # exactly one request per order reached the service: no Retry On Fail, no retry loop
        assert len(proxy.sends_for(customer_id=bad_customer, order_id=job["order_id"])) == 1
    assert bad.runs("Send to safesend") == 1 and bad.runs("Wait before retry") == 0
    seen = proxy.sends_for(customer_id=bad_customer)
    assert [r.status for r in seen] == [401, 401]
    assert all(r.headers["authorization"] == f"Bearer {WRONG_KEY}" for r in seen)

    assert good.items("Sent")[0]["state"] == "sent"
    assert emails_for(stack, cli.orders("next to a wrong key")[0]) == 1


def test_invalid_request_400_is_not_retried(cli, proxy):
    result = cli.run("invalid")
    rejected = result.items("Rejected (not retried)")
    assert [(r["http_status"], r["error"]) for r in rejected] == [(400, "invalid_request")]
    assert "to" in rejected[0]["fields"]
    assert len(proxy.sends_for(customer_id=cli.orders("invalid")[0]["customer_id"])) == 1


def test_503_is_retried_after_retry_after_and_network_errors_by_retry_on_fail(cli, stack, proxy):
    """What Retry On Fail cannot do without retrying 4xx too: 5xx go round the Wait loop."""
    [job] = cli.orders("503 then a drop")
    proxy.inject("status", count=1, status=503)  # store unavailable before a claim: nothing was sent
    proxy.inject("drop", count=1)  # then the connection closes without an answer (Retry On Fail)
    result = cli.run("503 then a drop")
    assert [a["state"] for a in result.items("Sent")] == ["sent"]
    assert result.runs("Wait before retry") == 1
    assert [r.status for r in proxy.sends_for(customer_id=job["customer_id"])] == [503, 0, 200]
    assert emails_for(stack, job) == 1


def test_cloud_run_429_goes_round_the_wait_loop_not_to_rejected(cli, stack, proxy):
    """Cloud Run answers 429 when every instance of send is busy (nothing reached safesend): the
    rejected branch ("fix, never retry") took it, and the email was never sent."""
    [job] = cli.orders("429")
    proxy.inject("status", count=1, status=429)
    result = cli.run("429")
    assert [a["state"] for a in result.items("Sent")] == ["sent"] and not result.items("Rejected (not retried)")
    assert result.runs("Wait before retry") == 1
    assert [r.status for r in proxy.sends_for(customer_id=job["customer_id"])] == [429, 200]
    assert emails_for(stack, job) == 1


def test_send_with_retry_a_202_is_in_progress_not_done(cli, stack, proxy):
    """Issue 19: every 202 went to Accepted with the 200s; an execution ended in success with outcomes unknown."""
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    result = cli.run("202 is not done")
    assert set(outputs(result)) == {"In progress (look it up)"}, outputs(result)
    [item] = result.items("In progress (look it up)")
    assert item["http_status"] == 202 and item["state"] != "sent" and item["job_id"] and item["dedup_key"]
    assert f"/status?job_id={item['job_id']}" in item["message"]


def test_send_and_poll_review_has_its_own_branch(cli, stack):
    stack.relay.set_mode("fail-before-forward", count=1)  # payments: Gmail never got it; nobody can know that
    [job] = cli.orders("review branch")
    result = cli.run("review branch")
    assert set(outputs(result)) == {"Needs review or failed"}, outputs(result)
    [item] = result.items("Needs review or failed")
    assert (item["state"], item["review_reason"]) == ("review", "ambiguous")
    assert "review console" in item["message"]
    assert emails_for(stack, job) == 0


def test_send_with_retry_gave_up_keeps_the_dedup_key_and_says_to_look_it_up(cli, proxy):
    """Every answer a 503 for longer than the retries: the items must say which job to look up."""
    orders = cli.orders("long outage")
    proxy.inject("status", count=60, status=503)
    try:
        result = cli.run("long outage")
    finally:
        with proxy._lock:
            proxy._faults.clear()
    gave_up = by_order(result.items("Gave up"))
    assert set(gave_up) == {"10", "11"}, outputs(result)
    for job in orders:
        item = gave_up[job["order_id"]]
        key = f"{job['customer_id']}:order_paid:{job['order_id']}"
        assert item["dedup_key"] == key and item["http_status"] == 503
        assert "/status?dedup_key=" in item["message"] and "error" not in item


# --------------------------------------------------------------------------- send-hmac, send-and-poll
def test_send_hmac_signs_each_item_with_the_crypto_node(cli, stack, proxy):
    orders = cli.orders("hmac")
    result = cli.run("hmac")
    assert set(outputs(result)) == {"Sent"}, outputs(result)
    assert {a["order_id"]: a["state"] for a in result.items("Sent")} == {"1": "sent", "2": "sent"}
    seen = proxy.sends_for(customer_id=orders[0]["customer_id"])
    assert len(seen) == 2
    for request in seen:
        assert "authorization" not in request.headers
        assert request.headers["x-safesend-signature"].startswith("t=")
        assert request.headers["content-type"] == "application/json"
    for job in orders:
        assert emails_for(stack, job) == 1


def test_send_and_poll_follows_a_dropped_gmail_response_to_sent(cli, stack, proxy):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    [job] = cli.orders("poll")
    result = cli.run("poll")
    assert [(f["order_id"], f["state"]) for f in result.items("Final state")] == [("3", "sent")]
    assert set(outputs(result)) == {"Final state"}, outputs(result)
    assert [r.status for r in proxy.sends_for(customer_id=job["customer_id"])] == [202]
    assert proxy.requests("GET", "/status")
    assert emails_for(stack, job) == 1


def test_reimport_keeps_one_copy_per_example(cli, proxy):
    cli.folder.import_workflows(ns.load_example(name, proxy.url) for name in Cli.EXAMPLES)  # again
    # Listed by the running n8n, from the same database (`n8n list:workflow` booted n8n: 3.7 CPU-s).
    status, listed = cli.server.rest("GET", "workflows")
    assert status == 200, listed
    ids = [workflow["id"] for workflow in listed["data"]]
    assert sorted(set(ids)) == sorted(ids), listed
    assert {"SafesendRetry001", "SafesendHmac0001", "SafesendPoll0001"} <= set(ids), listed


# --------------------------------------------------------------------------- send-and-wait (n8n start)
def wait_for(server: ns.N8nServer, orders: list[dict[str, Any]], timeout_s: float = 90) -> list[dict[str, Any]]:
    status, body = server.post_webhook(
        server.webhook, {"orders": orders}, timeout_s=timeout_s, headers=dict([ORDERS_HEADER])
    )
    assert status == 200 and isinstance(body, list), (status, body, server.log_tail())
    return body


def test_send_and_wait_refuses_a_trigger_without_the_orders_token(server, proxy):
    customer = new_customer()
    status, _ = server.post_webhook(server.webhook, {"orders": [order(customer, "1")]}, timeout_s=30)
    assert status in (401, 403)
    assert proxy.sends_for(customer_id=customer) == []


def test_send_and_wait_happy_path_resumes_with_sent(server, stack):
    job = order(new_customer(), "1")
    [final] = wait_for(server, [job])
    assert (final["order_id"], final["state"], final["from"]) == ("1", "sent", "callback")
    assert emails_for(stack, job) == 1


def test_send_and_wait_two_orders_two_emails(server, stack):
    customer = new_customer()
    orders = [order(customer, "1"), order(customer, "2")]
    finals = by_order(wait_for(server, orders))
    assert {k: (v["state"], v["from"]) for k, v in finals.items()} == {
        "1": ("sent", "callback"),
        "2": ("sent", "callback"),
    }
    assert finals["1"]["job_id"] != finals["2"]["job_id"]
    for job in orders:
        assert emails_for(stack, job) == 1


def test_send_and_wait_dropped_gmail_response_resumes_with_sent(server, stack, proxy):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    customer = new_customer()
    job = order(customer, "1")
    [final] = wait_for(server, [job])
    assert [r.status for r in proxy.sends_for(customer_id=customer)] == [202]  # outcome unknown at first
    assert (final["state"], final["from"]) == ("sent", "callback")
    assert emails_for(stack, job) == 1


def test_send_and_wait_payments_ambiguous_resumes_with_review_and_sends_nothing(server, stack):
    stack.relay.set_mode("fail-before-forward", count=1)  # Gmail never got it; nobody can know that
    job = order(new_customer(), "1", channel="payments")
    [final] = wait_for(server, [job])
    assert (final["state"], final["review_reason"], final["from"]) == ("review", "ambiguous", "callback")
    assert emails_for(stack, job) == 0


def test_send_and_wait_ignores_a_late_callback_for_another_job(server, stack, proxy):
    """A repeated notice for order 1 reaching the Wait meant for order 2 must not become order 2's result."""
    orders = orders_of_one_customer("1", "2")
    first_job_id = job_id_for(compose_dedup_key(orders[0]["customer_id"], "order_paid", "1"))
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(wait_for, server, orders)
        stray = deliver_when_waiting(
            proxy, orders[1], {"job_id": first_job_id, "state": "review", "notice_id": "stray"}
        )
        finals = by_order(answer.result())
    assert stray == 200  # it did resume the Wait for order 2 ...
    assert finals["2"]["state"] == "sent" and finals["2"]["job_id"] != first_job_id  # ... and was ignored
    assert finals["1"]["state"] == "sent"
    for job in orders:
        assert emails_for(stack, job) == 1


def deliver_when_waiting(
    proxy: ns.CountingProxy, job: dict[str, Any], notice: dict[str, Any], timeout_s: float = 20
) -> int:
    """POST `notice` to the callback_url of `job`'s send as soon as n8n accepts it (it answers 409 until
    the execution has reached its Wait node); safesend's own first delivery comes a second later."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = proxy.sends_for(customer_id=job["customer_id"], order_id=job["order_id"])
        if seen and seen[0].status is not None:
            request = urllib.request.Request(
                seen[0].json["callback_url"],
                data=json.dumps(notice).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    return exc.code
        time.sleep(0.05)
    raise AssertionError(f"order {job['order_id']} was not waiting within {timeout_s}s")


def test_send_and_wait_rerun_of_a_sent_order_resumes_with_the_stored_outcome(server, stack, proxy):
    customer = new_customer()
    job = order(customer, "1")
    [first] = wait_for(server, [job])
    [again] = wait_for(server, [job])  # the shop fires the same order again later
    assert (first["state"], again["state"], again["from"]) == ("sent", "sent", "callback")
    assert again["job_id"] == first["job_id"] and again["message_id"] == first["message_id"]
    assert [r.json["callback_url"] != "" for r in proxy.sends_for(customer_id=customer)] == [True, True]
    assert emails_for(stack, job) == 1


def test_send_and_wait_same_key_from_two_executions_at_once(server, stack, proxy):
    customer = new_customer()
    job = order(customer, "1")
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: wait_for(server, [job]), range(2)))
    assert [[(a["state"], a["from"]) for a in answer] for answer in answers] == [[("sent", "callback")]] * 2
    assert answers[0][0]["job_id"] == answers[1][0]["job_id"]
    seen = proxy.sends_for(customer_id=customer)
    assert len(seen) == 2 and seen[0].json["callback_url"] != seen[1].json["callback_url"]
    assert emails_for(stack, job) == 1
