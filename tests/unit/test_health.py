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
