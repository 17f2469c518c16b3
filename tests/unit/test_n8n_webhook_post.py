"""The n8n e2e tests' webhook POST (tests/integration/n8n_support.py) against a loopback stand-in:
n8n's 404 "not registered" (no execution started) is retried within a bound, nothing else is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration import n8n_support as ns
from tests.loopback_http import LoopbackHttpServer, QuietHandler

UNREGISTERED = {"code": 404, "message": 'The requested webhook "POST hook" is not registered.'}


def stand_in(answers: list[tuple[int, dict]]) -> tuple[LoopbackHttpServer, list[bytes]]:
    """Answers the POSTs in turn (the last one from then on); records each body it received."""
    seen: list[bytes] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
            seen.append(self.rfile.read(int(self.headers["Content-Length"])))
            status, body = answers[min(len(seen), len(answers)) - 1]
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return LoopbackHttpServer(Handler), seen


def server_at(port: int, tmp_path: Path) -> ns.N8nServer:
    return ns.N8nServer(ns.N8nFolder(tmp_path / "n8n", tmp_path / "folder"), port=port)


def test_a_webhook_not_yet_registered_is_posted_again_until_it_runs(tmp_path):
    http, seen = stand_in([(404, UNREGISTERED), (404, UNREGISTERED), (200, {"ran": True})])
    with http:
        status, body = server_at(http.port, tmp_path).post_webhook("hook", {"orders": [1]}, timeout_s=5)
    assert (status, body) == (200, {"ran": True})
    assert [json.loads(b) for b in seen] == [{"orders": [1]}] * 3


@pytest.mark.parametrize("answer", [(404, {"code": 404, "message": "Not found"}), (500, UNREGISTERED)])
def test_any_other_answer_is_returned_at_once(tmp_path, answer):
    http, seen = stand_in([answer, (200, {"ran": True})])
    with http:
        status, body = server_at(http.port, tmp_path).post_webhook("hook", {}, timeout_s=5)
    assert (status, body) == answer and len(seen) == 1


def test_the_retry_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(ns, "UNREGISTERED_RETRY_S", 1.0)
    http, seen = stand_in([(404, UNREGISTERED)])
    with http:
        status, _ = server_at(http.port, tmp_path).post_webhook("hook", {}, timeout_s=5)
    assert status == 404 and 2 <= len(seen) <= 4
