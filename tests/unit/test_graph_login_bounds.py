"""MSAL's HTTP to the token endpoint goes through BoundedLoginHttp, whose promise is "each call
within the caller's deadline". requests' timeout bounds each socket read, not the call: an answer
dripped a byte at a time, or one without end, held the send (or read) past its deadline and in
memory without bound. The answer is now read whole within the deadline and a size cap."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from safesend.adapters.graph_auth import MAX_LOGIN_BODY_BYTES, BoundedLoginHttp, GraphAuthError

DRIP_BYTES, DRIP_PAUSE_S = 30, 0.1  # 3 s of answer, a byte every 0.1 s: each read well within timeout


class _Hostile(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if self.path.startswith("/drip"):
            self.send_header("content-length", str(DRIP_BYTES))
            self.end_headers()
            for _ in range(DRIP_BYTES):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(DRIP_PAUSE_S)
            return
        size = 4 * MAX_LOGIN_BODY_BYTES
        self.send_header("content-length", str(size))
        self.end_headers()
        self.wfile.write(b" " * size)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_dripped_token_answer_ends_at_the_callers_deadline(hostile: str) -> None:
    http = BoundedLoginHttp(timeout_s=2.0)
    started = time.monotonic()
    with pytest.raises(GraphAuthError):
        http.within(started + 0.8).post(f"{hostile}/drip", data={"grant_type": "client_credentials"})
    assert time.monotonic() - started < 0.8 + 2 * DRIP_PAUSE_S + 0.5


def test_a_token_answer_past_the_size_cap_is_refused(hostile: str) -> None:
    http = BoundedLoginHttp(timeout_s=5.0)
    with pytest.raises(GraphAuthError):
        http.within(time.monotonic() + 5.0).post(f"{hostile}/huge", data={"grant_type": "client_credentials"})


def test_a_plain_answer_reads_as_msal_expects(hostile: str) -> None:
    http = BoundedLoginHttp(timeout_s=5.0)
    answer = http.within(time.monotonic() + 5.0).post(f"{hostile}/drip", data={})
    assert answer.status_code == 200 and answer.text == " " * DRIP_BYTES
    assert answer.headers["content-type"] == "application/json"
    answer.raise_for_status()
