"""The community node package n8n-nodes-safesend (integrations/n8n), for real.

scripts/n8n-node-build.sh builds it from source on the pinned Node (npm ci, n8n-node lint, n8n-node
build with its tsc type check) and packs it with `npm pack`, or reuses the tarball of a passing build
of the very same inputs; the tarball is installed with npm into a folder that
N8N_CUSTOM_EXTENSIONS names, as a self-hosted user installs a community package, and loaded by the
same pinned n8n as test_n8n_e2e.py. Workflows that use the node run against the local stack with
auth on, behind the counting proxy (what n8n sent) and the Gmail simulator (what was sent).

One `n8n start` serves the module:
- manual runs (as the editor's "Execute workflow" starts them): Send Email (No / Poll), Get Status,
  Decide; the outputs are read from the node's run data;
- production webhooks: Wait for Outcome "Callback" (resumed by safesend's signed callback) and the
  Safesend Trigger; their results are posted by HTTP Request nodes to a recording receiver, one path
  per output;
- the credential test (n8n's REST API, as the editor's "Test" button calls it).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.receiver import RecordingReceiver
from devstack.stack import LocalStack, StackConfig
from safesend.core.auth import SIGNATURE_HEADER, sign
from tests.emulator_fixtures import SharedEmulators
from tests.integration import n8n_support as ns
from tests.integration.test_n8n_e2e import WRONG_KEY, emails_for, new_customer, order

_INSTALLED = subprocess.run(["bash", str(ns.INSTALL_SCRIPT), "--check"], capture_output=True).returncode == 0
pytestmark = [
    pytest.mark.integration,
    pytest.mark.functions_out_of_process,
    pytest.mark.timeout(420 if _INSTALLED else ns.INSTALL_TIMEOUT_S + 420),
    pytest.mark.skipif(os.environ.get("SAFESEND_SKIP_N8N") == "1", reason="SAFESEND_SKIP_N8N=1"),
]

BUILD_SCRIPT = ns.REPO_ROOT / "scripts" / "n8n-node-build.sh"
NODE_TYPE = "CUSTOM.safesend"  # what n8n names the nodes of N8N_CUSTOM_EXTENSIONS folders
TRIGGER_TYPE = "CUSTOM.safesendTrigger"
DEDUPE = "Skip re-delivered notices"  # examples/n8n/node-trigger.json: n8n's Remove Duplicates node
FULL_HISTORY_WEBHOOK = "safesend-full-history"  # a copy of it with a history of 2 ids
CREDENTIAL = {"safesendApi": {"id": "SafesendNodeKey1", "name": "Safesend API"}}
OUTPUTS = ("sent", "in_progress", "needs_review_or_failed", "rejected")


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def n8n_bin() -> Path:
    return ns.ensure_n8n()


@pytest.fixture(scope="module")
def extensions(n8n_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built from source, packed, and npm-installed where N8N_CUSTOM_EXTENSIONS points."""
    out = tmp_path_factory.mktemp("n8n-node-pack")
    built = subprocess.run(["bash", str(BUILD_SCRIPT), str(out)], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-4000:]
    tarball = Path(built.stdout.strip().splitlines()[-1])
    assert tarball.is_file() and tarball.name.startswith("n8n-nodes-safesend-")
    ext = tmp_path_factory.mktemp("n8n-custom")
    (ext / "package.json").write_text('{"private": true}\n')
    node_dir = Path(subprocess.check_output(["bash", str(ns.INSTALL_SCRIPT)], text=True).strip()).parent
    env = dict(os.environ, PATH=f"{node_dir}:{os.environ['PATH']}")
    installed = subprocess.run(
        [
            "npm",
            "install",
            "--offline",
            "--legacy-peer-deps",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            str(tarball),
        ],
        cwd=ext,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-4000:]
    assert (ext / "node_modules" / "n8n-nodes-safesend" / "dist" / "nodes" / "Safesend" / "Safesend.node.js").is_file()
    return ext / "node_modules"


@pytest.fixture(scope="module")
def stack(n8n_bin: Path, shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    config = StackConfig(auth=True)
    # Decisions by API for the node's API key only: the HMAC credential stays without them.
    config.service_env = {**config.service_env, "SAFESEND_API_DECIDERS": "key:local-caller"}
    with shared_emulators.stack_for("n8n-node", config) as running:
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


@pytest.fixture(scope="module")
def receiver() -> Iterator[RecordingReceiver]:
    with RecordingReceiver() as recording:
        yield recording


HMAC_CREDENTIAL = {"safesendApi": {"id": "SafesendNodeHmac", "name": "Safesend API (HMAC)"}}


def hmac_credential(stack: LocalStack, base_url: str) -> dict[str, Any]:
    ref = HMAC_CREDENTIAL["safesendApi"]
    data = {"baseUrl": base_url, "authMode": "hmac", "hmacSecret": stack.hmac_secret}
    return {"id": ref["id"], "name": ref["name"], "type": "safesendApi", "data": data}


def credential(stack: LocalStack, base_url: str, api_key: str | None = None) -> dict[str, Any]:
    return {
        "id": CREDENTIAL["safesendApi"]["id"],
        "name": CREDENTIAL["safesendApi"]["name"],
        "type": "safesendApi",
        "data": {
            "baseUrl": base_url,
            "authMode": "apiKey",
            "apiKey": api_key or stack.api_key,
            "callbackSecret": stack.callback_secret,
        },
    }


def folder(n8n_bin: Path, extensions: Path, path: Path) -> ns.N8nFolder:
    return ns.N8nFolder(n8n_bin, path, extra_env={"N8N_CUSTOM_EXTENSIONS": str(extensions)})


# --------------------------------------------------------------------------- workflows
def safesend_node(**parameters: Any) -> dict[str, Any]:
    defaults = {
        "operation": "sendEmail",
        "keyMode": "fields",
        "customerId": "={{ $json.customer_id }}",
        "eventType": "={{ $json.event_type }}",
        "orderId": "={{ $json.order_id }}",
        "channel": "={{ $json.channel }}",
        "to": "={{ $json.to }}",
        "subject": "={{ $json.subject }}",
        "text": "={{ $json.text }}",
        "retryFor": 20,
    }
    return {
        "id": str(uuid.uuid4()),
        "name": "Safesend",
        "type": NODE_TYPE,
        "typeVersion": 1,
        "position": [600, 0],
        "parameters": {**defaults, **parameters},
        "credentials": CREDENTIAL,
    }


def load_node_example(name: str, orders: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """examples/n8n/<name>.json as shipped, with the node types that a custom-extensions install gives
    (`CUSTOM.`, not the community package's `n8n-nodes-safesend.`), as examples/n8n/README.md says."""
    return ns.load_example(name, ns.EXAMPLE_BASE_URL, orders=orders, **{"n8n-nodes-safesend.": "CUSTOM."})


def manual_workflow(name: str, orders: list[dict[str, Any]], **parameters: Any) -> dict[str, Any]:
    """examples/n8n/node-send-and-poll.json with its sample orders and the Safesend node's parameters replaced."""
    workflow = load_node_example("node-send-and-poll", orders)
    workflow["id"] = ("N" + uuid.uuid5(uuid.NAMESPACE_URL, name).hex)[:16]
    workflow["name"] += f" [{name}]"
    node = ns.node_named(workflow, "Safesend")
    assert node["type"] == NODE_TYPE
    node["parameters"].update({"waitForOutcome": "no", "retryFor": 20, **parameters})
    return workflow


def report_node(name: str, url: str, x: int, y: int) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "name": name,
        "type": "n8n-nodes-base.httpRequest",
        "typeVersion": 4.2,
        "position": [x, y],
        "parameters": {
            "method": "POST",
            "url": url,
            "sendBody": True,
            "specifyBody": "json",
            "jsonBody": "={{ JSON.stringify($json) }}",
            "options": {},
        },
    }


def server_workflows(receiver_url: str) -> list[dict[str, Any]]:
    """A webhook that sends its orders with Wait for Outcome "Callback" (each output reported to the
    receiver), and a Safesend Trigger that reports what it receives."""
    send_nodes = [
        {
            "id": str(uuid.uuid4()),
            "name": "Orders webhook",
            "type": "n8n-nodes-base.webhook",
            "typeVersion": 2,
            "position": [0, 0],
            "webhookId": str(uuid.uuid4()),
            "parameters": {"httpMethod": "POST", "path": "node-callback", "responseMode": "onReceived", "options": {}},
        },
        {
            "id": str(uuid.uuid4()),
            "name": "Jobs",
            "type": "n8n-nodes-base.splitOut",
            "typeVersion": 1,
            "position": [200, 0],
            "parameters": {"fieldToSplitOut": "body.orders", "options": {}},
        },
        safesend_node(waitForOutcome="callback", maxWait=60),
        *(report_node(f"Report {out}", f"{receiver_url}/{out}", 900, 150 * n) for n, out in enumerate(OUTPUTS)),
    ]
    send = {
        "id": "NodeCallback0001",
        "name": "safesend node [callback]",
        "nodes": send_nodes,
        "connections": {
            "Orders webhook": {"main": [[{"node": "Jobs", "type": "main", "index": 0}]]},
            "Jobs": {"main": [[{"node": "Safesend", "type": "main", "index": 0}]]},
            "Safesend": {"main": [[{"node": f"Report {out}", "type": "main", "index": 0}] for out in OUTPUTS]},
        },
        "settings": {"executionOrder": "v1"},
        "active": False,
    }
    full = trigger_workflow(receiver_url, "/full")
    full.update(id="SafesendNodeTrg2", name=f"{full['name']} [history of 2]")
    ns.node_named(full, "Safesend Trigger")["webhookId"] = FULL_HISTORY_WEBHOOK
    ns.node_named(full, DEDUPE)["parameters"]["options"]["historySize"] = 2
    return [send, trigger_workflow(receiver_url), full]


def trigger_workflow(receiver_url: str, prefix: str = "") -> dict[str, Any]:
    """examples/n8n/node-trigger.json, reporting to `<prefix>/trigger` what its flow receives after
    the Remove Duplicates node and to `<prefix>/arrival` every notice that started a run. Arrival is
    below the flow, so n8n (execution order v1: depth first, the topmost branch first) reports it
    once the notice's pass through the flow has ended: an ordering proof, not a sleep."""
    trigger = load_node_example("node-trigger")
    assert ns.node_named(trigger, "Safesend Trigger")["type"] == TRIGGER_TYPE
    assert ns.node_named(trigger, DEDUPE)["type"] == "n8n-nodes-base.removeDuplicates"
    trigger["nodes"].append(report_node("Report trigger", f"{receiver_url}{prefix}/trigger", 960, 0))
    trigger["connections"]["Needs review?"] = {"main": [[{"node": "Report trigger", "type": "main", "index": 0}]] * 2}
    trigger["nodes"].append(report_node("Report arrival", f"{receiver_url}{prefix}/arrival", 240, 480))
    trigger["connections"]["Safesend Trigger"]["main"][0].append({"node": "Report arrival", "type": "main", "index": 0})
    return trigger


# --------------------------------------------------------------------------- the manual runs
class Runs:
    def __init__(self, folder: ns.N8nFolder, proxy_url: str):
        self.folder = folder
        self.server = ns.N8nServer(folder)
        self.proxy_url = proxy_url
        self.scenarios: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.workflows: list[dict[str, Any]] = []

    def add(
        self, name: str, orders: list[dict[str, Any]], settings: dict[str, Any] | None = None, **parameters: Any
    ) -> None:
        workflow = manual_workflow(name, orders, **parameters)
        ns.node_named(workflow, "Safesend").update(settings or {})
        self.scenarios[name] = (workflow["id"], orders)
        self.workflows.append(workflow)

    def orders(self, name: str) -> list[dict[str, Any]]:
        return self.scenarios[name][1]

    def run(self, name: str, timeout_s: float = 300) -> dict[str, list[dict[str, Any]]]:
        result = self.server.execute(self.scenarios[name][0], timeout_s=timeout_s)
        assert result.ok, result.describe()
        return {out: result.items("Safesend", n) for n, out in enumerate(OUTPUTS)}


def by_order(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["order_id"] if "order_id" in item else item["dedup_key"].rsplit(":", 1)[1]: item for item in items}


@pytest.fixture(scope="module")
def runs(n8n_bin, extensions, stack, proxy, receiver, tmp_path_factory) -> Iterator[Runs]:
    """The one n8n folder of this module and its `n8n start`: the credentials imported with n8n's CLI
    (the only way to give them the ids the workflows name; the first command in a new folder migrates
    its database), then the server, on which every workflow is saved and the webhook workflows are
    published as the editor does it. Each n8n CLI command boots n8n: the workflows' import and the two
    publish commands took ~13.5 CPU-s of the module's n8n processes (2-core machine, 2026-12-02)."""
    runner = Runs(folder(n8n_bin, extensions, tmp_path_factory.mktemp("n8n-node")), proxy.url)
    customer = new_customer()
    runner.add("two orders", [order(customer, "1"), order(customer, "2")])
    runner.add("replay", [order(new_customer(), "1")])
    runner.add("poll", [order(new_customer(), "1")], waitForOutcome="poll", maxWait=60)
    runner.add("review", [order(new_customer(), "1", channel="payments")], waitForOutcome="poll", maxWait=60)
    runner.add("to decide", [order(new_customer(), "1", channel="payments")], waitForOutcome="poll", maxWait=60)
    bad = new_customer()
    runner.add("4xx", [order(bad, "1"), dict(order(bad, "2"), to=["not an address"]), order(bad, "3")])
    runner.add("503", [order(new_customer(), "1")])
    runner.add("429", [order(new_customer(), "1")])
    runner.add("outage", [order(new_customer(), "1"), order(new_customer(), "2")], retryFor=3)
    hundred = new_customer()
    runner.add("hundred", [order(hundred, str(n)) for n in range(100)], waitForOutcome="poll", maxWait=60)
    runner.add("hmac", [order(new_customer(), "1")], settings={"credentials": HMAC_CREDENTIAL})
    runner.add(
        "get status",
        runner.orders("two orders"),
        operation="getStatus",
        lookupBy="dedupKey",
        dedupKey="={{ $json.customer_id }}:{{ $json.event_type }}:{{ $json.order_id }}",
    )
    flaky = new_customer()
    runner.add(
        "continue on fail",
        [
            dict(order(flaky, "1"), key={"value": f"{flaky}-1"}),
            order(flaky, "2"),
            dict(order(flaky, "3"), key={"value": f"{flaky}-3"}),
        ],
        settings={"onError": "continueRegularOutput"},
        keyMode="dedupKey",
        dedupKey="={{ $json.key.value }}",  # order 2 has no key: the expression fails for that item only
    )
    runner.folder.import_credentials([credential(stack, proxy.url), hmac_credential(stack, proxy.url)])
    webhooks = server_workflows(receiver.url)
    with runner.server:
        runner.server.start()
        for workflow in [*runner.workflows, *webhooks]:
            runner.server.create_workflow(workflow)
        for workflow in webhooks:
            runner.server.publish(workflow["id"])
        runner.server.wait_ready(["node-callback"])
        yield runner


def test_sent_two_items_two_emails(runs, stack, proxy):
    out = runs.run("two orders")
    assert [len(out[o]) for o in OUTPUTS] == [2, 0, 0, 0], out
    for job in runs.orders("two orders"):
        item = by_order(out["sent"])[job["order_id"]]
        assert (item["state"], item["http_status"], item["outcome"], item["replayed"]) == ("sent", 200, "sent", False)
        assert item["message"].startswith("Done")
        assert emails_for(stack, job) == 1
    assert all(r.headers["authorization"] == f"Bearer {stack.api_key}" for r in proxy.requests("POST", "/send"))


def test_get_status_by_dedup_key_and_no_secret_in_any_item(runs, stack):
    runs.run("two orders")  # idempotent: replays when the test above ran first
    out = runs.run("get status")
    assert sorted(i["order_id"] if "order_id" in i else i["dedup_key"][-1] for i in out["sent"]) == ["1", "2"]
    assert all(i["state"] == "sent" and i["events"] for i in out["sent"])
    assert stack.api_key not in json.dumps(out) and stack.callback_secret not in json.dumps(out)


def test_hmac_credential_signs_each_request(runs, stack, proxy):
    [job] = runs.orders("hmac")
    out = runs.run("hmac")
    assert [i["state"] for i in out["sent"]] == ["sent"]
    [seen] = proxy.sends_for(customer_id=job["customer_id"])
    assert seen.headers["x-safesend-signature"].startswith("t=") and "authorization" not in seen.headers
    assert stack.hmac_secret not in json.dumps(out)
    assert emails_for(stack, job) == 1


def test_continue_on_fail_puts_the_bad_item_on_rejected_and_sends_the_others(runs, stack, proxy):
    orders = runs.orders("continue on fail")
    out = runs.run("continue on fail")
    assert sorted(i["dedup_key"] for i in out["sent"]) == [orders[0]["key"]["value"], orders[2]["key"]["value"]]
    [bad] = out["rejected"]
    assert bad["outcome"] == "rejected" and bad["error"] and bad["message"]
    assert len(proxy.sends_for(dedup_key=orders[0]["key"]["value"])) == 1


def test_replayed_run_sends_nothing_more(runs, stack):
    first = runs.run("replay")["sent"]
    again = runs.run("replay")["sent"]
    assert [first[0]["replayed"], again[0]["replayed"]] == [False, True]
    assert again[0]["message_id"] == first[0]["message_id"]
    assert emails_for(stack, runs.orders("replay")[0]) == 1


def test_dropped_gmail_answer_in_progress_then_sent_by_poll(runs, stack, proxy):
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)
    [job] = runs.orders("poll")
    out = runs.run("poll")
    assert [len(out[o]) for o in OUTPUTS] == [1, 0, 0, 0], out
    assert out["sent"][0]["state"] == "sent"
    assert [r.status for r in proxy.sends_for(customer_id=job["customer_id"])] == [202]  # in progress at first
    assert proxy.requests("GET", "/status")
    assert emails_for(stack, job) == 1


def test_review_goes_to_its_own_output(runs, stack):
    stack.relay.set_mode("fail-before-forward", count=1)  # payments: an ambiguous attempt needs a person
    [job] = runs.orders("review")
    out = runs.run("review")
    [item] = out["needs_review_or_failed"]
    assert (item["state"], item["review_reason"], item["outcome"]) == ("review", "ambiguous", "needs_review_or_failed")
    assert "review" in item["message"] and item["dedup_key"] and item["job_id"]
    assert not out["sent"] and emails_for(stack, job) == 0


def decide_workflow(name: str, items: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """The Decide operation over `items` ({review_id, job_id, decision}), each decided on its own."""
    workflow = manual_workflow(
        name,
        items,
        operation="decide",
        reviewId="={{ $json.review_id }}",
        decideBy="jobId",
        jobId="={{ $json.job_id }}",
        decision="={{ $json.decision }}",
        note="decided in n8n",
        reviewer="Ann (Slack)",
    )
    ns.node_named(workflow, "Safesend").update(settings)
    return workflow


def test_decide_resends_a_job_in_review_and_a_stale_review_id_is_a_clear_item_error(runs, stack, proxy):
    """Item 0 resends the job in review (sent, one email); item 1 answers the same, now stale, review
    entry: an item error on Rejected (Continue On Fail), the first item unharmed. With the HMAC
    credential, which SAFESEND_API_DECIDERS does not name, the node stops with a clear error."""
    stack.relay.set_mode("fail-before-forward", count=1)
    [job] = runs.orders("to decide")
    [held] = runs.run("to decide")["needs_review_or_failed"]
    assert held["state"] == "review" and held["review_id"] == f"{held['job_id']}:1"
    ask = {"review_id": held["review_id"], "job_id": held["job_id"]}
    decided = decide_workflow("decide", [{**ask, "decision": "resend"}, {**ask, "decision": "cancel"}])
    decided["nodes"] = [
        dict(n, onError="continueRegularOutput") if n["name"] == "Safesend" else n for n in decided["nodes"]
    ]
    refused = decide_workflow("decide off", [{**ask, "decision": "cancel"}], credentials=HMAC_CREDENTIAL)
    for workflow in (decided, refused):
        runs.server.create_workflow(workflow)  # as a user adds one in the editor, beside the running n8n

    result = runs.server.execute(decided["id"], timeout_s=120)
    assert result.ok, result.describe()
    sent, stale = result.items("Safesend", 0), result.items("Safesend", 3)
    assert [(i["state"], i["result"], i["replayed"], i["outcome"]) for i in sent] == [("sent", "resent", False, "sent")]
    assert sent[0]["message"].startswith("Decision resend: resent")
    [item] = stale
    assert (item["http_status"], item["error_code"], item["current_review_id"]) == (409, "stale_review", None)
    assert f"Review ID {held['review_id']} is stale" in item["error"] and "Get Status" in item["message"]
    assert emails_for(stack, job) == 1
    [decision] = [e for e in status_of(stack, held["job_id"])["events"] if e["kind"] == "decision"]
    assert decision["reviewer"] == "api key:local-caller for Ann (Slack)"

    off = runs.server.execute(refused["id"], timeout_s=120)
    assert not off.ok and "Decisions by API are off for this credential (403)" in json.dumps(off.error), off.describe()
    assert [r.status for r in proxy.requests("POST", "/decide")][-1] == 403
    assert emails_for(stack, job) == 1 and stack.hmac_secret not in json.dumps(off.result)


def status_of(stack: LocalStack, job_id: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{stack.url}/status?job_id={job_id}", headers=stack.caller_headers())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_4xx_is_not_retried_and_the_other_items_are_sent(runs, stack, proxy):
    """Item 0 is fine, item 1 is refused (400), item 2 is fine: one bad item never drops the others."""
    orders = runs.orders("4xx")
    out = runs.run("4xx")
    assert sorted(by_order(out["sent"])) == ["1", "3"]
    [rejected] = out["rejected"]
    assert (rejected["http_status"], rejected["error_code"], rejected["order_id"]) == (400, "invalid_request", "2")
    assert "error" not in rejected and "to" in rejected["fields"] and rejected["message"]
    assert len(proxy.sends_for(customer_id=orders[1]["customer_id"], order_id="2")) == 1
    assert [emails_for(stack, job) for job in orders] == [1, 0, 1]


def test_503_before_claim_and_a_dropped_connection_are_retried_with_the_same_key(runs, stack, proxy):
    [job] = runs.orders("503")
    proxy.inject("status", count=1, status=503)  # nothing reached safesend
    proxy.inject("drop", count=1)  # the connection closes without an answer
    out = runs.run("503")
    assert [i["state"] for i in out["sent"]] == ["sent"]
    seen = proxy.sends_for(customer_id=job["customer_id"])
    assert [r.status for r in seen] == [503, 0, 200]
    assert len({r.body for r in seen}) == 1  # the same bytes, the same key
    assert emails_for(stack, job) == 1


def test_cloud_run_429_is_retried_with_the_same_key_not_rejected(runs, stack, proxy):
    """Cloud Run answers 429 when every instance of send is busy (max instances reached, its queue full):
    nothing reached safesend. The node put that on Rejected ("never retried: fix ...") and the email was
    never sent."""
    [job] = runs.orders("429")
    proxy.inject("status", count=2, status=429)
    out = runs.run("429")
    assert [i["state"] for i in out["sent"]] == ["sent"] and not out["rejected"], out
    seen = proxy.sends_for(customer_id=job["customer_id"])
    assert [r.status for r in seen] == [429, 429, 200]
    assert len({r.body for r in seen}) == 1  # the same bytes, the same key
    assert emails_for(stack, job) == 1


def test_long_outage_gives_up_with_the_dedup_key_and_says_to_look_it_up(runs, stack, proxy):
    orders = runs.orders("outage")
    proxy.inject("status", count=40, status=503)
    try:
        out = runs.run("outage")
    finally:
        with proxy._lock:
            proxy._faults.clear()
    assert [len(out[o]) for o in OUTPUTS] == [0, 2, 0, 0], out
    for item, job in zip(out["in_progress"], orders, strict=True):
        assert item["dedup_key"] == f"{job['customer_id']}:order_paid:{job['order_id']}"
        assert item["http_status"] == 503 and "Get Status" in item["message"]
        assert len(proxy.sends_for(customer_id=job["customer_id"])) >= 2  # retried within Retry For


def test_hundred_items_with_faults_give_exactly_hundred_emails(runs, stack, proxy):
    orders = runs.orders("hundred")
    proxy.inject("status", count=4, status=503)
    proxy.inject("drop", count=4)
    stack.relay.set_mode("forward-then-drop-response", count=3, delay_s=6)
    out = runs.run("hundred", timeout_s=400)
    assert len(out["sent"]) == 100, {o: len(v) for o, v in out.items()}
    assert sorted(int(k) for k in by_order(out["sent"])) == list(range(100))
    assert [emails_for(stack, job) for job in orders] == [1] * 100


# ----------------------------------------------------- n8n start: callback, trigger, credential test
@pytest.fixture(scope="module")
def server(runs: Runs) -> ns.N8nServer:
    """The `n8n start` of `runs`, serving the callback and trigger workflows' production webhooks."""
    return runs.server


def test_callback_resumes_with_sent_after_a_dropped_gmail_answer(server, stack, proxy, receiver):
    customer = new_customer()
    job, fine = order(customer, "1"), order(customer, "2")
    stack.relay.set_mode("forward-then-drop-response", count=1, delay_s=6)  # the first send: 202, then sent
    status, _ = server.post_webhook("node-callback", {"orders": [job, fine]}, timeout_s=30)
    assert status == 200
    seen = receiver.wait_for(
        lambda got: (
            len([r for r in got if r.path == "/sent" and r.json().get("dedup_key", "").startswith(customer)]) == 2
        ),
        timeout_s=90,
    )
    sent = {r.json()["dedup_key"]: r.json() for r in seen if r.path == "/sent"}
    assert {k.rsplit(":", 1)[1] for k in sent if k.startswith(customer)} == {"1", "2"}
    sends = proxy.sends_for(customer_id=customer)
    assert sorted(r.status for r in sends) == [200, 202]  # one was in progress when the send answered
    assert all(r.json["callback_url"].startswith(server.url) for r in sends)
    # resumed by the signed callback, not by the Max Wait (which forwards the job as In Progress)
    assert not [r for r in receiver.received if r.path != "/sent" and customer in r.body.decode()]
    assert [emails_for(stack, j) for j in (job, fine)] == [1, 1]


def test_trigger_starts_on_a_signed_outcome_and_refuses_a_bad_signature(server, stack, receiver):
    url = f"{server.url}/webhook/safesend-outcomes/safesend"  # as examples/n8n/node-trigger.json says
    customer = new_customer()
    job = dict(order(customer, "1"), callback_url=url)
    request = urllib.request.Request(
        f"{stack.url}/send",
        data=json.dumps(job).encode(),
        headers={"Content-Type": "application/json", **stack.caller_headers()},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
    seen = receiver.wait_for(
        lambda got: any(r.path == "/trigger" and r.json().get("dedup_key", "").startswith(customer) for r in got),
        timeout_s=60,
    )
    notice = next(r.json() for r in seen if r.path == "/trigger" and r.json()["dedup_key"].startswith(customer))
    assert (notice["state"], notice["event"]) == ("sent", "outcome")
    forged = urllib.request.Request(
        url,
        data=json.dumps(dict(notice, state="review")).encode(),
        headers={"Content-Type": "application/json", "X-Safesend-Signature": "t=1,v1=00"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, timeout=30)
    assert refused.value.code == 401


def post_signed(
    server: ns.N8nServer, path: str, notice: dict[str, Any], secret: str, stamp: int | None = None
) -> tuple[int, Any]:
    """POST `notice` to a production webhook as safesend's deliverer does: signed at `stamp` (now)
    over the exact bytes post_webhook sends (json.dumps). Status and answer (JSON, else text)."""
    at = int(time.time()) if stamp is None else stamp
    signature = sign(secret.encode(), at, json.dumps(notice).encode())
    return server.post_webhook(path, notice, timeout_s=30, headers={SIGNATURE_HEADER: signature})


def signed_notices(job_id: str, customer: str) -> Callable[[int], dict[str, Any]]:
    """Notice n of job `job_id`, as safesend's deliverer builds it (id `<job id>:n<seq>`)."""

    def notice(n: int) -> dict[str, Any]:
        return {
            "notice_id": f"{job_id}:n{n}",
            "job_id": job_id,
            "dedup_key": f"{customer}:order_paid:{n}",
            "state": "sent",
        }

    return notice


def reported(receiver: RecordingReceiver, path: str, dedup_key: str) -> list[Any]:
    return [r for r in receiver.for_path(path) if r.json().get("dedup_key") == dedup_key]


def test_trigger_workflow_runs_a_re_delivered_notice_once_and_every_other_notice(server, stack, receiver):
    """At least once (README, Callbacks): a crash between safesend's POST and its record re-sends the
    same body, freshly signed. The trigger starts a run for it (never answers it as a duplicate: a
    notice whose run n8n failed to start must run when re-sent), and the example's Remove Duplicates
    node stops it: the flow after it gets the notice once. A notice with another id runs, and one
    without an id runs each time (never dropped as a repeat of the first id-less one)."""
    path = "safesend-outcomes/safesend"
    notice = signed_notices(uuid.uuid4().hex, new_customer())
    first, other = notice(1), notice(2)
    anonymous = {k: v for k, v in notice(3).items() if k != "notice_id"}
    stamp = int(time.time())
    assert post_signed(server, path, first, stack.callback_secret, stamp)[0] == 200
    receiver.wait_for(lambda _: len(reported(receiver, "/arrival", first["dedup_key"])) == 1, timeout_s=60)
    again = max(int(time.time()), stamp + 1)  # a re-delivery is signed afresh
    assert post_signed(server, path, first, stack.callback_secret, again)[0] == 200
    assert post_signed(server, path, other, stack.callback_secret)[0] == 200
    for _ in range(2):
        assert post_signed(server, path, anonymous, stack.callback_secret)[0] == 200
    receiver.wait_for(
        lambda _: [len(reported(receiver, "/arrival", n["dedup_key"])) for n in (first, other, anonymous)] == [2, 1, 2],
        timeout_s=60,
    )
    assert [r.json()["notice_id"] for r in reported(receiver, "/trigger", first["dedup_key"])] == [first["notice_id"]]
    assert [r.json()["event"] for r in reported(receiver, "/trigger", other["dedup_key"])] == ["outcome"]
    assert len(reported(receiver, "/trigger", anonymous["dedup_key"])) == 2


def test_trigger_workflow_keeps_running_and_deduping_once_its_history_is_full(server, stack, receiver):
    """n8n 2.41's Remove Duplicates fails every run once its history holds History Size ids
    (n8n-io/n8n#38475): the example routes that failure to a reset of the history, so the notice runs
    and the ids after it are deduped again. Here with a history of 2: the third id fills it."""
    path = f"{FULL_HISTORY_WEBHOOK}/safesend"
    notice = signed_notices(uuid.uuid4().hex, new_customer())
    sent = [notice(n) for n in range(1, 5)] + [notice(4)]  # the last: a re-delivery after the reset
    for n in sent:
        assert post_signed(server, path, n, stack.callback_secret)[0] == 200
        receiver.wait_for(lambda _, n=n: len(reported(receiver, "/full/arrival", n["dedup_key"])) >= 1, timeout_s=60)
    receiver.wait_for(lambda _: len(reported(receiver, "/full/arrival", notice(4)["dedup_key"])) == 2, timeout_s=60)
    ran = [[r.json()["notice_id"] for r in reported(receiver, "/full/trigger", n["dedup_key"])] for n in sent[:4]]
    assert ran == [[n["notice_id"]] for n in sent[:4]]


def test_credential_test_fails_for_a_wrong_key_and_passes_for_the_right_one(server, stack, proxy):
    results = {}
    for name, key in (("right", stack.api_key), ("wrong", WRONG_KEY)):
        cred = credential(stack, proxy.url, api_key=key)
        status, body = server.rest(
            "POST",
            "credentials/test",
            {"credentials": {"id": cred["id"], "name": cred["name"], "type": cred["type"], "data": cred["data"]}},
        )
        assert status == 200, body
        results[name] = body["data"]
    assert results["right"]["status"] == "OK", results
    assert results["wrong"]["status"] == "Error" and "401" in results["wrong"]["message"], results
    assert WRONG_KEY not in json.dumps(results) and stack.api_key not in json.dumps(results)
    lookups = [r for r in proxy.requests("GET", "/status") if "00000000000000000000000000000000" in r.query]
    assert sorted(r.status for r in lookups)[-2:] == [401, 404]
