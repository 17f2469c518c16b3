"""The n8n e2e tests' manual run and publish (tests/integration/n8n_support.py, N8nServer) against a
loopback stand-in for n8n's REST and public APIs: it signs in once, starts the run from the Manual
Trigger, polls the execution until n8n says it ended (bounded), and reads the run data as JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import n8n_support as ns
from tests.loopback_http import LoopbackHttpServer, QuietHandler

WORKFLOW = {
    "id": "Wf1",
    "nodes": [
        {"name": "When clicking Execute", "type": "n8n-nodes-base.manualTrigger"},
        {"name": "Send", "type": "n8n-nodes-base.httpRequest"},
    ],
}
RUN_DATA = {"resultData": {"runData": {"Send": [{"data": {"main": [[{"json": {"state": "sent"}}], []]}}]}}}


class FakeN8n:
    """Answers as n8n 2.41 does: owner setup sets a cookie, an API key is created, a run answers its
    execution id, and the execution reads `running` for `running_polls` polls, then `final`."""

    def __init__(self, running_polls: int, final: str = "success") -> None:
        self.running_polls, self.final = running_polls, final
        self.calls: list[tuple[str, str, Any, dict[str, str]]] = []
        fake = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.calls.append((self.command, self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                status, payload, cookie = fake.route(self.command, self.path)
                data = json.dumps(payload).encode()
                self.send_response(status)
                if cookie:
                    self.send_header("Set-Cookie", cookie)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        self.http = LoopbackHttpServer(Handler)

    def polls(self) -> int:
        return sum(1 for _, path, _, _ in self.calls if path.startswith("/api/v1/executions/"))

    def route(self, method: str, path: str) -> tuple[int, Any, str | None]:
        if (method, path) == ("POST", "/rest/owner/setup"):
            return 200, {"data": {"id": "u1"}}, "n8n-auth=token123; Path=/; HttpOnly"
        if (method, path) == ("POST", "/rest/api-keys"):
            return 200, {"data": {"rawApiKey": "key-1"}}, None
        if (method, path) == ("GET", "/rest/workflows/Wf1"):
            return 200, {"data": {**WORKFLOW, "versionId": "v-2"}}, None
        if (method, path) == ("POST", "/rest/workflows/Wf1/activate"):
            return 200, {"data": {**WORKFLOW, "activeVersionId": "v-2"}}, None
        if (method, path) == ("POST", "/rest/workflows/Wf1/run"):
            return 200, {"data": {"executionId": "7"}}, None
        if method == "GET" and path == "/api/v1/executions/7?includeData=true":
            if self.polls() <= self.running_polls:
                return 200, {"id": 7, "status": "running", "finished": False}, None
            return 200, {"id": 7, "status": self.final, "finished": True, "data": RUN_DATA}, None
        return 404, {"message": "not found"}, None


def server_at(port: int, tmp_path: Path) -> ns.N8nServer:
    return ns.N8nServer(ns.N8nFolder(tmp_path / "n8n", tmp_path / "folder"), port=port)


def test_a_manual_run_starts_from_the_trigger_and_returns_the_run_data_once_it_ended(tmp_path):
    fake = FakeN8n(running_polls=2)
    with fake.http:
        server = server_at(fake.http.port, tmp_path)
        first = server.execute("Wf1", timeout_s=10)
        again = server.execute("Wf1", timeout_s=10)
    assert first.ok and first.status == "success" and first.items("Send") == [{"state": "sent"}]
    assert again.ok and first.runs("Send") == 1
    calls = [(method, path) for method, path, _, _ in fake.calls]
    assert calls.count(("POST", "/rest/owner/setup")) == 1 and calls.count(("POST", "/rest/api-keys")) == 1
    [start, _] = [body for method, path, body, _ in fake.calls if path == "/rest/workflows/Wf1/run"]
    assert start == {"triggerToStartFrom": {"name": "When clicking Execute"}}
    rest = [headers for _, path, _, headers in fake.calls if path.startswith("/rest/") and "owner" not in path]
    assert all(headers["cookie"] == "n8n-auth=token123" for headers in rest)
    polls = [headers for _, path, _, headers in fake.calls if path.startswith("/api/v1/")]
    assert len(polls) == 4 and all(headers["x-n8n-api-key"] == "key-1" for headers in polls)  # 3 + 1


def test_a_failed_run_is_not_ok_and_says_so(tmp_path):
    fake = FakeN8n(running_polls=0, final="error")
    with fake.http:
        run = server_at(fake.http.port, tmp_path).execute("Wf1", timeout_s=10)
    assert not run.ok and "error" in run.describe()


def test_the_wait_for_the_end_is_bounded(tmp_path):
    fake = FakeN8n(running_polls=10**6)
    with fake.http:
        started = time.monotonic()
        run = server_at(fake.http.port, tmp_path).execute("Wf1", timeout_s=1.5)
        took = time.monotonic() - started
    assert not run.ok and run.status.startswith("not finished") and run.result == {}
    assert took < 5 and 3 <= fake.polls() <= 30  # backs off to 0.5 s between polls


def test_publish_activates_the_current_version_as_the_editor_does(tmp_path):
    fake = FakeN8n(running_polls=0)
    with fake.http:
        server = server_at(fake.http.port, tmp_path)
        server.publish("Wf1")
        with pytest.raises(RuntimeError, match=r"no workflow Missing \(404\)"):
            server.publish("Missing")
    [(body, headers)] = [(body, headers) for method, path, body, headers in fake.calls if path.endswith("/activate")]
    assert body == {"versionId": "v-2"} and headers["cookie"] == "n8n-auth=token123"
