"""Issue 20.1: the log lines the alerts are built on. Their names and fields are pinned here (an alert
must not go quiet because a line was renamed), and the code is driven through each path over the
in-memory world to show it really writes each one, as the production formatter prints it."""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core import signals
from safesend.core.api_keys import ApiKeyRing
from safesend.core.auth import Authenticator, AuthPolicy
from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import IndexMissingError, StoreUnavailableError
from safesend.core.lifecycle import current_review_id
from safesend.core.model import Delivery
from safesend.core.states import State
from safesend.entrypoints.http_api import HttpApi
from safesend.logs import CloudLoggingFormatter, get_logger, log
from tests.unit.conftest import make_world
from tests.unit.test_http_api import BODY, SECRET, call
from tests.unit.test_messengers import FlakyReceiver
from tests.unit.test_reviewers import in_review

CAPTURE_ENV = "SAFESEND_SIGNAL_CAPTURE"
TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
HOOK = "https://n8n.example.com/webhook-waiting/77"

# The contract with infra/modules/safesend/monitoring.json: change it only together with the metrics.
PINNED = {
    "job_needs_review": ("job_id", "state", "reason"),
    "duplicate_found": ("job_id", "reason", "copies"),
    "sweep_completed": ("due", "advanced", "overdue", "oldest_overdue_s", "oldest_review_s", "errors"),
    "gmail_refused": ("job_id", "reason", "code", "status", "mailbox"),
    "store_unavailable": ("where", "error"),
    "index_missing": ("error",),
    "notify_delivery_failed": ("job_id", "kind", "notice_id", "status"),
    "callback_given_up": ("job_id", "kind", "notice_id", "error"),
    "reviewer_notice_overdue": ("job_id", "kind", "notice_id", "tries", "error"),
    "index_lag_observed": ("mailbox", "kind", "lag_s", "beyond_horizon"),
    "index_window_raised": ("mailbox", "window_s", "previous_s", "observed_s"),
    "index_lag_beyond_horizon": ("mailbox", "lag_s", "horizon_s"),
    "internal_call_refused": ("path", "status", "reason"),
}


def open_api(world: Any) -> HttpApi:
    """The HTTP entry points over the world, authentication off (as run-local --no-auth)."""
    policy = AuthPolicy(SECRET, frozenset(), frozenset(), disabled=True, internal_keys=ApiKeyRing({}))
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    runtime = Runtime(settings, world.service.policies, world.service, Authenticator(policy, None, time.time))
    return HttpApi(lambda: runtime)


def test_the_signal_names_and_fields_are_pinned():
    assert {name: s.fields for name, s in signals.SIGNALS.items()} == PINNED
    assert all(name == s.event for name, s in signals.SIGNALS.items())


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Iterator[io.StringIO]:
    """The safesend logger's JSON lines, as the functions print them on stdout."""
    logger = get_logger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        capture = os.environ.get(CAPTURE_ENV)
        if capture:  # refreshes tests/infra/fixtures/signal_lines.jsonl (see tests/infra/test_monitoring.py)
            with open(capture, "a", encoding="utf-8") as out:
                out.writelines(line + "\n" for line in stream.getvalue().splitlines() if '"event": "' in line)


def events(stream: io.StringIO, event: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    return [entry for entry in found if entry.get("event") == event]


def one_line_with_fields(stream: io.StringIO, event: str) -> dict[str, Any]:
    found = events(stream, event)
    assert found, f"no {event} line was logged"
    for entry in found:
        missing = set(PINNED[event]) - set(entry)
        assert not missing, f"{event} line without {missing}: {entry}"
    return found[-1]


def test_a_duplicate_is_signalled_once_with_review(lines):
    world = make_world(script=[("accept", TIMEOUT)])
    job, _ = world.service.submit(world.request())
    world.mailbox.accept(world.mailbox.raws[0])  # a second copy of the same Message-ID
    world.run_until_settled(job.id)
    world.service.sweep()
    world.service.sweep()
    assert world.store.get(job.id).review_reason == "duplicate"
    assert len(events(lines, "duplicate_found")) == 1
    duplicate = one_line_with_fields(lines, "duplicate_found")
    assert duplicate["severity"] == "ERROR" and duplicate["copies"] == 2 and duplicate["job_id"] == job.id
    review = one_line_with_fields(lines, "job_needs_review")
    assert (review["state"], review["reason"]) == ("review", "duplicate")


def test_a_failed_job_is_signalled_with_its_reason(lines):
    world = make_world(script=[classify_http(400, "invalidArgument", "bad header")])
    job, _ = world.service.submit(world.request())
    assert world.store.get(job.id).state is State.FAILED
    review = one_line_with_fields(lines, "job_needs_review")
    assert review["state"] == "failed" and review["reason"] == "permanent_error"


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (classify_http(429, "rateLimitExceeded", "User-rate limit exceeded"), "rate_limit"),
        (classify_http(403, "dailyLimitExceeded", "Daily Limit Exceeded"), "daily_limit"),
    ],
)
def test_gmail_refusals_are_signalled_by_reason(lines, failure, reason):
    world = make_world(script=[failure])
    world.service.submit(world.request())
    refused = one_line_with_fields(lines, "gmail_refused")
    assert refused["reason"] == reason and refused["status"] in (429, 403)
    assert refused["mailbox"] == "default"  # the metric's mailbox label (issue 20.4)


def test_the_sweep_signals_its_counts_and_the_oldest_overdue_and_review_ages(lines):
    world = make_world(script=[TIMEOUT] * 10, policies={"channels": {"payments": {"on_unknown": "review"}}})
    world.service.submit(world.request(channel="payments"))
    world.clock.advance(3600)  # due for an hour: overdue, and nobody swept
    api = open_api(world)
    status, _, _ = call(api.sweep, body={})
    assert status == 200
    swept = one_line_with_fields(lines, "sweep_completed")
    assert swept["due"] == 1 and swept["overdue"] == 1 and swept["oldest_overdue_s"] > 3000
    assert swept["advanced"] == 1 and swept["errors"] == 0
    world.clock.advance(600)
    call(api.sweep, body={})
    swept = one_line_with_fields(lines, "sweep_completed")
    assert swept["due"] == 0 and swept["overdue"] == 0 and swept["oldest_review_s"] >= 600


@pytest.mark.parametrize("level", ["WARNING", "ERROR", "CRITICAL"])
def test_a_quieter_log_level_never_drops_a_signal_line(lines, level):
    """log_level = "WARNING" (a common choice to cut log costs) dropped every INFO signal: the dead
    man's switch fired on every healthy sweep and the index-lag alert never could; at ERROR the Gmail
    refusal alerts went quiet too. Other lines still follow the level."""
    logger = get_logger()
    before = logger.level
    logger.setLevel(getattr(logging, level))
    try:
        world = make_world()
        assert call(open_api(world).sweep, body={})[0] == 200
        for event in signals.SIGNALS:
            signals.emit(event, logging.DEBUG, "a signal below the level")
        log(logging.INFO, "an ordinary line below the level")
    finally:
        logger.setLevel(before)
    one_line_with_fields(lines, "sweep_completed")
    for event in signals.SIGNALS:
        assert any(e["message"] == "a signal below the level" for e in events(lines, event)), event
    assert "an ordinary line below the level" not in lines.getvalue()


def test_store_outages_and_a_missing_index_are_signalled(lines):
    world = make_world()
    api = open_api(world)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("firestore down")

    world.store.claim_or_get = down  # type: ignore[method-assign]
    assert call(api.send, body=BODY)[0] == 503
    world.store.find_due = down  # type: ignore[method-assign]
    world.store.find_notices_due = down  # type: ignore[method-assign]
    assert call(api.sweep, body={})[0] == 503
    assert {e["where"] for e in events(lines, "store_unavailable")} >= {"send", "sweep"}
    one_line_with_fields(lines, "store_unavailable")

    def no_index(*args: Any, **kwargs: Any) -> Any:
        raise IndexMissingError("firestore_index_missing: the query requires an index")

    world.store.find_due = no_index  # type: ignore[method-assign]
    assert call(api.sweep, body={})[0] == 500
    assert one_line_with_fields(lines, "index_missing")["severity"] == "CRITICAL"


def test_a_state_the_sweep_cannot_query_is_signalled_though_the_sweep_completes(lines):
    """One swept state's query failing on every run left its jobs unswept and unseen by jobs_overdue,
    behind a sweep_completed line (the dead man's switch content) and a WARNING no alert reads."""
    world = make_world(script=[TIMEOUT] * 10)
    job, _ = world.service.submit(world.request())
    world.clock.advance(3600)
    assert world.store.get(job.id).state is State.UNKNOWN
    find_due = world.store.find_due

    def unknown_down(state: State, *args: Any, **kwargs: Any) -> Any:
        if state is State.UNKNOWN:
            raise StoreUnavailableError("query timed out")
        return find_due(state, *args, **kwargs)

    world.store.find_due = unknown_down  # type: ignore[method-assign]
    assert call(open_api(world).sweep, body={})[0] == 200
    assert one_line_with_fields(lines, "sweep_completed")["errors"] == 1
    outage = one_line_with_fields(lines, "store_unavailable")
    assert (outage["where"], outage["query"], outage["severity"]) == ("sweep_query", "state unknown", "ERROR")


def test_a_refused_internal_call_is_signalled_and_a_refused_caller_is_not(lines):
    """A Scheduler (or Cloud Tasks, Pub/Sub) call refused by authentication stops the sweeps with a 401,
    not a 5xx, and the dead man's switch only arms after a first completed sweep: a deployment whose
    sweeps were refused from the start was silent. A caller's refusal is the caller's answer."""
    world = make_world()
    policy = AuthPolicy(SECRET, frozenset(), frozenset({"scheduler@p.iam.gserviceaccount.com"}))
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    runtime = Runtime(settings, world.service.policies, world.service, Authenticator(policy, None, time.time))
    api = HttpApi(lambda: runtime)
    assert call(api.send, body=BODY, headers={"X-Safesend-Signature": "t=1,v1=00"})[0] == 401
    assert events(lines, "internal_call_refused") == []
    assert call(api.sweep, body={})[0] == 401  # no ID token: the Scheduler's audience or account is wrong
    refused = one_line_with_fields(lines, "internal_call_refused")
    assert (refused["status"], refused["severity"]) == (401, "ERROR") and refused["reason"]
    assert events(lines, "sweep_completed") == []


def test_a_failing_callback_is_signalled_then_given_up(lines):
    world = make_world()
    world.notifier.script = [Delivery(False, 500)] * 200
    job, _ = world.service.submit(world.request(callback_url=HOOK))
    world.run_until_settled(job.id, max_steps=200)
    failed = one_line_with_fields(lines, "notify_delivery_failed")
    assert failed["kind"] == "callback" and failed["status"] == 500
    given_up = one_line_with_fields(lines, "callback_given_up")
    assert given_up["job_id"] == job.id and given_up["severity"] == "ERROR"


def test_a_reviewer_notice_past_the_horizon_is_signalled_overdue(lines):
    world, job = in_review()
    world.service.notifier = FlakyReceiver(lambda n: n["kind"] == "chat")
    world.service.notify(job.id, current_review_id(job))
    for _ in range(60):
        world.clock.advance(120)
        world.service.sweep()
    overdue = one_line_with_fields(lines, "reviewer_notice_overdue")
    assert overdue["kind"] == "chat" and overdue["tries"] >= 10
