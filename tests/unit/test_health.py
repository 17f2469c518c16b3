"""Issue 20.4: /health answers what the alerts ask, from the store: the last sweep (late after three
intervals, as the dead man's switch), overdue jobs, the oldest review item. And the Scheduler
stand-in can be paused, so the switch can be watched turning red locally."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devstack.stack import SweepTicker
from safesend.core.classify import TransportErrorKind, classify_transport
from tests.unit.conftest import make_world
from tests.unit.test_http_api import call
from tests.unit.test_signals import open_api

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
INTERVAL_S = 300.0


def test_health_says_never_swept_then_ok_then_late_after_three_intervals():
    world = make_world()
    assert world.service.health(INTERVAL_S)["status"] == "sweep_late"  # no sweep ever completed
    world.service.sweep()
    health = world.service.health(INTERVAL_S)
    assert health["status"] == "ok" and health["last_sweep"]["due"] == 0 and health["oldest_review"] is None
    world.clock.advance(3 * INTERVAL_S - 1)
    assert world.service.health(INTERVAL_S)["status"] == "ok"
    world.clock.advance(2)
    late = world.service.health(INTERVAL_S)
    assert late["status"] == "sweep_late" and late["last_sweep"]["late"] is True
    assert late["last_sweep"]["age_s"] > 3 * INTERVAL_S


def test_health_shows_the_overdue_jobs_and_the_oldest_review_item_from_the_store():
    world = make_world(script=[TIMEOUT] * 10, policies={"channels": {"payments": {"on_unknown": "review"}}})
    job, _ = world.service.submit(world.request(channel="payments"))
    world.clock.advance(3600)
    world.service.sweep()
    health = world.service.health(INTERVAL_S)
    assert health["overdue_jobs"] == 1 and health["oldest_overdue_s"] > 3000
    world.clock.advance(600)
    world.service.sweep()
    health = world.service.health(INTERVAL_S)
    assert health["overdue_jobs"] == 0
    assert health["oldest_review"]["job_id"] == job.id and health["oldest_review"]["age_s"] >= 600


def test_get_health_over_http_and_503_when_the_store_cannot_say():
    world = make_world()
    api = open_api(world)
    call(api.sweep, body={})
    status, body, _ = call(api.health, method="GET")
    assert status == 200 and body["status"] == "ok" and body["sweep_interval_s"] == 300.0

    def down(*args: Any) -> Any:
        from safesend.core.errors import StoreUnavailableError

        raise StoreUnavailableError("down")

    world.store.last_sweep = down  # type: ignore[method-assign]
    assert call(api.health, method="GET")[0] == 503
    assert call(api.health, method="POST", body={})[0] == 405


class _Sweeps(BaseHTTPRequestHandler):
    count = 0

    def do_POST(self) -> None:
        type(self).count += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def _post(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=5) as response:
        return dict(json.loads(response.read()))


def test_the_scheduler_stand_in_can_be_paused_and_resumed():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sweeps)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ticker = SweepTicker(f"http://127.0.0.1:{server.server_address[1]}", interval_s=0.05).start()
    try:
        assert _wait(lambda: _Sweeps.count >= 2)
        assert _post(f"{ticker.control_url}/_scheduler/pause")["paused"] is True
        threading.Event().wait(0.2)  # a tick in flight may still land
        paused_at = _Sweeps.count
        threading.Event().wait(0.4)
        assert _Sweeps.count == paused_at, "a paused scheduler sends no sweep"
        assert _post(f"{ticker.control_url}/_scheduler/resume")["paused"] is False
        assert _wait(lambda: _Sweeps.count > paused_at)
    finally:
        ticker.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _wait(condition: Any, timeout_s: float = 5.0) -> bool:
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return True
        threading.Event().wait(0.02)
    return bool(condition())


def test_health_shows_the_last_notice_given_up_and_the_last_reviewer_notice_overdue():
    """Issue 20.4: what the alerts callback_given_up and reviewer_notice_overdue ask, from the store."""
    from safesend.core.lifecycle import current_review_id
    from safesend.core.model import Delivery
    from tests.unit.test_messengers import FlakyReceiver
    from tests.unit.test_reviewers import in_review

    world = make_world()
    assert world.service.health(INTERVAL_S)["notices"] == {"callback_given_up": None, "reviewer_notice_overdue": None}
    world.notifier.script = [Delivery(False, 500)] * 200
    job, _ = world.service.submit(world.request(callback_url="https://n8n.example.com/webhook-waiting/77"))
    world.run_until_settled(job.id, max_steps=200)
    given_up = world.service.health(INTERVAL_S)["notices"]["callback_given_up"]
    assert (given_up["job_id"], given_up["kind"]) == (job.id, "callback") and given_up["age_s"] >= 0

    world, job = in_review()
    world.service.notifier = FlakyReceiver(lambda n: n["kind"] == "chat")
    world.service.notify(job.id, current_review_id(job))
    for _ in range(60):
        world.clock.advance(120)
        world.service.sweep()
    overdue = world.service.health(INTERVAL_S)["notices"]["reviewer_notice_overdue"]
    assert (overdue["job_id"], overdue["kind"]) == (job.id, "chat")


def test_get_health_shows_each_mailbox_s_index_lag():
    from tests.unit.test_lag_watch import run_tasks

    world = make_world(index_lag_s=40.0)
    api = open_api(world)
    world.service.submit(world.request())
    run_tasks(world, 2000)
    status, body, _ = call(api.health, method="GET")
    lag = body["index_lag"]["default"]
    assert status == 200 and lag["search"]["count"] == 1 and lag["search"]["p99_s"] >= 40.0
    assert (lag["window_s"], lag["configured_window_s"], lag["alert"]) == (300.0, 300.0, None)


def test_the_console_health_page_shows_what_get_health_answers():
    """Issue 20.4: GET /review/health (Jinja, as the other pages), linked from every page's nav."""
    import flask

    from safesend.entrypoints.console import ReviewConsole
    from tests.unit.test_console import dev_auth
    from tests.unit.test_lag_watch import run_tasks

    world = make_world(index_lag_s=400.0)
    world.service.submit(world.request())
    run_tasks(world, 2000)
    world.service.sweep()
    health = world.service.health(world.service.sweep_interval_s)
    lag = health["index_lag"]["default"]
    app, auth = flask.Flask(__name__), dev_auth()
    with app.test_request_context("/review/health", method="GET", environ_base={"REMOTE_ADDR": "127.0.0.1"}):
        page, code, _ = ReviewConsole(lambda: world.service, lambda: auth).handle(flask.request)
    assert code == 200 and "Health: " in page and health["status"] in page
    assert f"{lag['search']['p50_s']} / {lag['search']['p99_s']} / {lag['search']['max_s']} s" in page
    assert f"{lag['window_s']} s ({lag['configured_window_s']} s)" in page and "p99_over_half_window" in page
    assert '<a href="/review/health">Health</a>' in page
    with app.test_request_context("/review", method="GET", environ_base={"REMOTE_ADDR": "127.0.0.1"}):
        index, code, _ = ReviewConsole(lambda: world.service, lambda: auth).handle(flask.request)
    assert code == 200 and '<a href="/review/health">Health</a>' in index


def test_the_console_read_only_pages_answer_503_when_the_store_cannot_say_and_refuse_posts():
    """/review/health and /review/mailboxes share one read-only path: a store outage is the console's
    own 503 page (never a 500 nor a page that looks healthy), a POST is 405."""
    import flask

    from safesend.core.errors import StoreUnavailableError
    from safesend.entrypoints.console import ReviewConsole
    from tests.unit.test_console import dev_auth

    world = make_world()
    app = flask.Flask(__name__)
    auth = dev_auth()
    console = ReviewConsole(lambda: world.service, lambda: auth)
    local = {"REMOTE_ADDR": "127.0.0.1"}

    def page(path: str, method: str = "GET") -> tuple[str, int]:
        with app.test_request_context(path, method=method, environ_base=local):
            body, code, _ = console.handle(flask.request)
        return str(body), code

    assert page("/review/health")[1] == 200 and "Health" in page("/review/health")[0]
    assert page("/review/mailboxes")[1] == 200

    def down(*args: Any) -> Any:
        raise StoreUnavailableError("down")

    world.store.last_sweep = down  # type: ignore[method-assign]
    world.service.mailboxes_report = down  # type: ignore[method-assign]
    for path in ("/review/health", "/review/mailboxes"):
        body, code = page(path)
        assert code == 503 and "Traceback" not in body, path
        assert page(path, "POST")[1] == 405, path
