"""Issue 20.3 over the in-memory world: sampled accepted sends are looked for until found (off the
request path, as reconcile tasks), the mailbox's lag lands in the store and on /health, and a lag past
the unknown window raises that mailbox's window once (one reviewer notice, one signal), so a job in
doubt waits long enough and is never resent into a duplicate."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from safesend.core import index_lag
from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.states import State
from tests.unit.conftest import World, make_world
from tests.unit.test_http_api import call
from tests.unit.test_signals import lines, open_api  # noqa: F401 - the fixture

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
WINDOW_S, HORIZON_S = 300.0, 1800.0  # conftest.TIMING's window, Timing's horizon


def run_tasks(world: World, until_s: float) -> None:
    """Play the scheduled reconcile tasks in time order up to `until_s` from now: each task once (a
    played task leaves the queue, as in Cloud Tasks)."""
    end = world.clock() + timedelta(seconds=until_s)
    for _ in range(10_000):
        due = sorted((at, name) for name, at in world.scheduler.tasks.items() if at <= end)
        if not due:
            break
        at, name = due[0]
        del world.scheduler.tasks[name]
        if at > world.clock():
            world.clock.advance((at - world.clock()).total_seconds())
        job_id, step = name[:32], name[33:]
        if index_lag.is_probe_step(step):
            world.service.lag.probe(job_id, step)
        else:
            world.service.advance(job_id)


def signals_of(stream: Any, event: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if f'"event": "{event}"' in line]


def test_a_sampled_send_is_measured_off_the_request_path_and_shown_on_health(lines):
    world = make_world(index_lag_s=40.0)
    job, _ = world.service.submit(world.request())
    assert job.state is State.SENT
    assert world.service.store.mailbox_lags() == {}  # nothing measured on the request path
    run_tasks(world, HORIZON_S + 60)
    record = world.service.store.mailbox_lags()["default"]
    [lag] = record["search_s"]
    assert 40.0 <= lag <= 40.0 * index_lag.PROBE_GROWTH  # measured within 25 %
    health = world.service.health(300.0)["index_lag"]["default"]
    assert health["search"] == {"count": 1, "p50_s": lag, "p99_s": lag, "max_s": lag}
    assert health["window_s"] == WINDOW_S and health["alert"] is None
    [line] = signals_of(lines, "index_lag_observed")
    assert (line["mailbox"], line["kind"], line["lag_s"], line["beyond_horizon"]) == ("default", "search", lag, False)
    assert world.publisher.items == []  # nothing to tell: the lag is inside the window


def test_a_lag_past_the_window_raises_it_once_and_a_job_in_doubt_then_ends_sent_once(lines):
    world = make_world(index_lag_s=400.0, script=["accept", "accept", ("accept", TIMEOUT)])
    for n in range(2):  # two sampled sends: the first raises the window, the second must not tell again
        world.service.submit(world.request(key=f"cust-1:order_paid:{n}"))
        run_tasks(world, HORIZON_S + 60)
    health = world.service.health(300.0)["index_lag"]["default"]
    assert health["search"]["count"] == 2 and health["search"]["max_s"] >= 400.0
    assert 800.0 <= health["window_s"] <= HORIZON_S and health["raised_at"] is not None
    assert health["alert"] == "p99_over_half_window"
    [item] = [(i, a) for i, a in world.publisher.items if a.get("incident_kind") == "index_lag"]
    assert item[1]["kind"] == "mailbox_incident" and item[1]["mailbox"] == "default"
    [raised] = signals_of(lines, "index_window_raised")
    assert raised["previous_s"] == WINDOW_S and raised["window_s"] == health["window_s"]
    # A send Gmail accepted but whose answer was lost: "not found" past the configured 300 s window
    # would resend it (a second copy); the raised window waits until the index shows the first.
    job, _ = world.service.submit(world.request(key="cust-1:order_paid:in-doubt"))
    assert job.state is State.UNKNOWN
    run_tasks(world, 2 * HORIZON_S)
    settled = world.service.store.get(job.id)
    assert settled is not None and (settled.state, settled.verified) == (State.SENT, True)
    assert world.mailbox.count(job.message_id) == 1


def test_without_the_raise_the_same_job_in_doubt_is_resent_into_a_duplicate():
    """The control: the same lag and the same lost answer, with no measured lag yet."""
    world = make_world(index_lag_s=400.0, script=[("accept", TIMEOUT)], verify=False)
    job, _ = world.service.submit(world.request(key="cust-1:order_paid:in-doubt"))
    run_tasks(world, 2 * HORIZON_S)
    assert world.mailbox.count(job.message_id) == 2
    settled = world.service.store.get(job.id)
    assert settled is not None and (settled.state, settled.review_reason) == (State.REVIEW, "duplicate")


def test_a_lag_past_the_horizon_is_recorded_signalled_and_told(lines):
    world = make_world(index_lag_s=HORIZON_S + 100)
    world.service.submit(world.request())
    run_tasks(world, HORIZON_S + 60)
    health = world.service.health(300.0)["index_lag"]["default"]
    assert health["alert"] == "beyond_horizon" and health["window_s"] == HORIZON_S
    assert health["search"]["max_s"] >= HORIZON_S
    [beyond] = signals_of(lines, "index_lag_beyond_horizon")
    assert beyond["horizon_s"] == HORIZON_S and beyond["severity"] == "ERROR"
    [(_, attributes)] = [(i, a) for i, a in world.publisher.items if a.get("incident_kind") == "index_lag"]
    assert attributes["incident"].endswith(":1")


def test_the_change_log_lag_is_measured_where_the_mailer_reports_it():
    world = make_world(index_lag_s=40.0, history_check_s=5.0, history_lag_s=12.0)
    world.service.submit(world.request())
    run_tasks(world, HORIZON_S + 60)
    record = world.service.store.mailbox_lags()["default"]
    [history] = record["history_s"]
    assert 12.0 <= history <= 12.0 * index_lag.PROBE_GROWTH
    assert world.service.health(300.0)["index_lag"]["default"]["history"]["count"] == 1


def test_reconcile_runs_a_probe_step_and_notify_tells_the_incident_as_a_lag():
    world = make_world(index_lag_s=400.0)
    api = open_api(world)
    job, _ = world.service.submit(world.request())
    [(name, at)] = [(n, a) for n, a in world.scheduler.tasks.items() if index_lag.is_probe_step(n[33:])]
    world.clock.advance((at - world.clock()).total_seconds())
    status, body, _ = call(api.reconcile, body={"job_id": job.id, "step": name[33:]})
    assert status == 200 and body["action"] == "lag_probe_waiting"
    run_tasks(world, HORIZON_S + 60)
    [(_, attributes)] = [(i, a) for i, a in world.publisher.items if a.get("incident_kind") == "index_lag"]
    push = {"message": {"attributes": attributes, "data": ""}}
    status, body, _ = call(api.notify, body=push)
    assert status == 200 and body["action"] == "mailbox_incident_told"
    texts = [post for kind, post in world.notifier.posts if kind in ("chat", "slack")]
    assert len(texts) == 2 and all(b"index lagged past the unknown window" in t for t in texts)
    assert not any(b"daily sending limit" in t for t in texts)
