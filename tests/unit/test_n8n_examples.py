"""The plain n8n example workflows route what the issue-19 check found misrouted (static checks of the
files; tests/integration/test_n8n_e2e.py runs them in a real n8n)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "n8n"
PLAIN = ("send-with-retry", "send-hmac", "send-and-poll", "send-and-wait")


def workflow(name: str) -> dict[str, Any]:
    return json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def node(flow: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in flow["nodes"] if n["name"] == name)


def route_rules(flow: dict[str, Any]) -> list[tuple[str, str]]:
    rules = node(flow, "Route by status")["parameters"]["rules"]["values"]
    return [(r["outputKey"], r["conditions"]["conditions"][0]["leftValue"]) for r in rules]


@pytest.mark.parametrize("name", ["send-with-retry", "send-hmac"])
def test_no_202_is_counted_as_sent_and_review_has_its_own_branch(name):
    flow = workflow(name)
    rules = route_rules(flow)
    targets = [branch[0]["node"] for branch in flow["connections"]["Route by status"]["main"]]
    assert "state === 'sent'" in rules[0][1] and "202" not in rules[0][1]
    assert targets[0] == "Sent"
    review = next(i for i, (_, expr) in enumerate(rules) if "'review'" in expr)
    assert targets[review] == "Needs review or failed" and review < [e for _, e in rules].index(
        "={{ $json.statusCode === 202 }}"
    )
    assert "In progress (look it up)" in targets


@pytest.mark.parametrize("name", PLAIN)
def test_cloud_run_429_and_408_are_retried_not_rejected(name):
    """Cloud Run answers 429 when every instance of send is busy (nothing reached safesend): the rejected
    branch ("fix, never retry") took it, so the email was never sent; it belongs to the retry loop."""
    flow = workflow(name)
    [rejected] = [expr for key, expr in route_rules(flow) if key.startswith("rejected")]
    assert "![408, 429].includes($json.statusCode)" in rejected
    assert node(flow, "Route by status")["parameters"]["options"]["fallbackOutput"] == "extra"


def test_send_and_poll_separates_review_from_sent():
    flow = workflow("send-and-poll")
    assert route_rules(flow)[0][1] == "={{ $json.body?.state === 'sent' }}"
    assert flow["connections"]["Settled?"]["main"][1][0]["node"] == "Needs review?"
    assert flow["connections"]["Needs review?"]["main"][0][0]["node"] == "Needs review or failed"


@pytest.mark.parametrize("name", PLAIN)
def test_gave_up_keeps_the_dedup_key_and_says_to_look_the_job_up(name):
    expression = node(workflow(name), "Gave up")["parameters"]["jsonOutput"]
    assert "dedup_key:" in expression and "/status?dedup_key=" in expression
    assert " error:" not in expression  # a top-level `error` makes n8n treat the item as failed


def test_node_examples_use_the_safesend_node_and_its_credential():
    send = workflow("node-send-and-poll")
    assert node(send, "Safesend")["type"] == "n8n-nodes-safesend.safesend"
    assert node(send, "Safesend")["credentials"] == {"safesendApi": {"id": "SafesendNodeKey1", "name": "Safesend API"}}
    assert {n["type"] for n in send["nodes"]} & {"n8n-nodes-base.code", "n8n-nodes-base.switch"} == set()
    assert node(workflow("node-trigger"), "Safesend Trigger")["type"] == "n8n-nodes-safesend.safesendTrigger"


def test_node_trigger_dedupes_in_the_workflow_and_never_drops_a_notice():
    """Callbacks are at least once: the trigger runs every notice and the workflow drops a re-delivered
    `notice_id` with n8n's Remove Duplicates (recorded in the run, so a run n8n never started records
    nothing). An id-less notice gets a key of its own (an empty key would drop every one after the
    first); a failure of the node (n8n 2.41 fails it for good once its history is full) resets the
    history and runs the notice, restored from the trigger (n8n's error output carries only the error).
    tests/integration/test_n8n_node_e2e.py runs it in a real n8n."""
    flow = workflow("node-trigger")
    targets = {name: [[c["node"] for c in out] for out in links["main"]] for name, links in flow["connections"].items()}
    dedupe = node(flow, "Skip re-delivered notices")
    assert (dedupe["type"], dedupe["typeVersion"], dedupe["onError"]) == (
        "n8n-nodes-base.removeDuplicates",
        2,
        "continueErrorOutput",
    )
    assert dedupe["parameters"]["operation"] == "removeItemsSeenInPreviousExecutions"
    assert dedupe["parameters"]["options"]["scope"] == "workflow"
    assert (
        dedupe["parameters"]["dedupeValue"].startswith("={{ $json.notice_id || ")
        and "$execution.id" in dedupe["parameters"]["dedupeValue"]
    )
    reset = node(flow, "Dedupe failed: reset its history")
    assert (reset["type"], reset["parameters"]["operation"]) == (
        "n8n-nodes-base.removeDuplicates",
        "clearDeduplicationHistory",
    )
    assert reset["parameters"]["options"]["scope"] == "workflow"
    assert "$('Safesend Trigger').first().json" in node(flow, "Back to the notice")["parameters"]["jsonOutput"]
    assert targets["Safesend Trigger"] == [["Skip re-delivered notices"]]
    assert targets["Skip re-delivered notices"] == [["Needs review?"], ["Dedupe failed: reset its history"]]
    assert targets["Dedupe failed: reset its history"] == [["Back to the notice"]]
    assert targets["Back to the notice"] == [["Needs review?"]]
