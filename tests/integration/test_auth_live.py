"""Authentication through the real entry points under functions-framework, configured from the
environment exactly as deployed (no SAFESEND_AUTH_DISABLED), with a loopback stand-in for
Google's certificate endpoint. Refusals must happen before the store is touched."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from devstack.emulators import ManagedProcess, free_port
from safesend.core.auth import SIGNATURE_HEADER, sign
from tests.loopback_http import LoopbackHttpServer, QuietHandler
from tests.unit.test_http_security import GOOGLE_CERT, N8N, TASKS, id_token

REPO = Path(__file__).resolve().parents[2]
SECRET = "live-secret-live-secret-live-secret-0123"
PROJECT = "demo-safesend-auth"


class CertServer:
    def __init__(self) -> None:
        body = json.dumps({"google-key-1": GOOGLE_CERT}).encode()

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = LoopbackHttpServer(Handler, "cert-server")
        self.url = f"{self.http.url}/oauth2/v1/certs"

    def stop(self) -> None:
        self.http.stop()


@dataclass(frozen=True)
class LiveServer:
    url: str
    pid: int  # the functions-framework process (gunicorn arbiter); its child serves requests


@contextmanager
def live_server(firestore_host: str, log_dir: Path, **extra_env: str) -> Iterator[LiveServer]:
    """functions-framework on the real entry points, configured from the environment as deployed."""
    certs = CertServer()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "FIRESTORE_EMULATOR_HOST": firestore_host,
        "SAFESEND_DEFAULT_FROM": "Shop <shop@example.com>",
        "SAFESEND_GMAIL_API_ENDPOINT": "http://127.0.0.1:9/",
        "SAFESEND_AUTH_HMAC_SECRET": SECRET,
        "SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS": N8N,
        "SAFESEND_AUTH_INTERNAL_INVOKERS": TASKS,
        "SAFESEND_AUTH_AUDIENCES": "https://safesend-send-123.us-central1.run.app",
        "SAFESEND_AUTH_GOOGLE_CERTS_URL": certs.url,
        # the router serves the console too, which refuses to start without its sign-in settings
        "SAFESEND_REVIEW_IAP_AUDIENCE": "/projects/123/global/backendServices/456",
        "SAFESEND_REVIEW_ALLOWED_EMAILS": "ann@example.com",
        "SAFESEND_REVIEW_CSRF_SECRET": "c" * 64,
        "SAFESEND_REVIEW_CONSOLE_URL": "https://review.example.com",
        "PATH": "/usr/bin:/bin",
        **extra_env,
    }
    process = ManagedProcess(
        [
            sys.executable,
            "-m",
            "functions_framework",
            "--source",
            str(REPO / "devstack" / "local_app.py"),
            "--target",
            "router",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        name="functions-auth",
        log_dir=log_dir,
        env=env,
        cwd=REPO,
    )
    process.start()
    try:
        process.wait_ready(
            lambda: requests.get(f"{url}/status", timeout=1).status_code == 401, timeout=30, what="serving HTTP"
        )
        assert process.pid is not None
        yield LiveServer(url, process.pid)
    finally:
        process.stop()
        certs.stop()


@pytest.fixture(scope="module")
def server(firestore_emulator, tmp_path_factory) -> Iterator[str]:
    with live_server(firestore_emulator.host, tmp_path_factory.mktemp("auth-live")) as live:
        yield live.url


def documents(firestore_emulator) -> int:
    listing = requests.get(
        f"http://{firestore_emulator.host}/v1/projects/{PROJECT}/databases/(default)/documents/ai_jobs", timeout=10
    )
    return len(listing.json().get("documents", [])) if listing.status_code == 200 else 0


def test_unsigned_and_forged_requests_are_refused_before_the_store(server, firestore_emulator):
    body = json.dumps(
        {"dedup_key": "live-1", "channel": "transactional", "to": "ann@example.com", "subject": "s", "text": "t"}
    ).encode()
    headers = {"Content-Type": "application/json"}
    assert requests.post(f"{server}/send", data=body, headers=headers, timeout=10).status_code == 401
    forged = {**headers, SIGNATURE_HEADER: sign(b"x" * 40, int(time.time()), body)}
    assert requests.post(f"{server}/send", data=body, headers=forged, timeout=10).status_code == 401
    wrong_sa = {**headers, "Authorization": f"Bearer {id_token(email=TASKS)}"}
    assert requests.post(f"{server}/send", data=body, headers=wrong_sa, timeout=10).status_code == 403
    assert requests.get(f"{server}/status", params={"job_id": "0" * 32}, timeout=10).status_code == 401
    assert documents(firestore_emulator) == 0


def test_signed_requests_get_through_to_validation_and_the_store(server):
    body = json.dumps(
        {"dedup_key": "live-2", "channel": "no-such-channel", "to": "ann@example.com", "subject": "s", "text": "t"}
    ).encode()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(SECRET.encode(), int(time.time()), body)}
    response = requests.post(f"{server}/send", data=body, headers=headers, timeout=10)
    assert response.status_code == 400 and "channel" in response.json()["fields"]
    query = "job_id=" + "0" * 32
    status = requests.get(
        f"{server}/status?{query}",
        timeout=10,
        headers={SIGNATURE_HEADER: sign(SECRET.encode(), int(time.time()), query.encode())},
    )
    assert status.status_code == 404


def test_internal_endpoints_need_the_invokers_id_token(server):
    body = json.dumps({"job_id": "0" * 32})
    headers = {"Content-Type": "application/json"}
    for path in ("/reconcile", "/sweep"):
        assert requests.post(f"{server}{path}", data=body, headers=headers, timeout=10).status_code == 401
        hmac_signed = {**headers, SIGNATURE_HEADER: sign(SECRET.encode(), int(time.time()), body.encode())}
        assert requests.post(f"{server}{path}", data=body, headers=hmac_signed, timeout=10).status_code == 401
        caller = {**headers, "Authorization": f"Bearer {id_token(email=N8N)}"}
        assert requests.post(f"{server}{path}", data=body, headers=caller, timeout=10).status_code == 403
    invoker = {**headers, "Authorization": f"Bearer {id_token(email=TASKS)}"}
    reconcile = requests.post(f"{server}/reconcile", data=body, headers=invoker, timeout=10)
    assert reconcile.status_code == 200 and reconcile.json()["action"] == "not_found"
    sweep = requests.post(f"{server}/sweep", data="{}", headers=invoker, timeout=30)
    assert sweep.status_code == 200 and sweep.json()["errors"] == 0


def raw_post(server: str, path: str, body: bytes, headers: list[tuple[str, str]]) -> tuple[int, bytes]:
    """One POST whose header list is sent as given: repeated names stay repeated on the wire."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(server)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("POST", path)
        for name, value in [*headers, ("Content-Type", "application/json"), ("Content-Length", str(len(body)))]:
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "extra",
    [
        [("Authorization", "Basic dXNlcjpwYXNz")],
        [("Authorization", f"Bearer {id_token()}"), ("Authorization", "Bearer ssk_x_y")],
        [("X-Serverless-Authorization", f"Bearer {id_token()}"), ("X-Serverless-Authorization", "Bearer z")],
    ],
    ids=["unparseable", "repeated authorization", "repeated x-serverless"],
)
def test_repeated_or_unparseable_credential_headers_are_401_on_the_wire(server, firestore_emulator, extra):
    """Issue 18.11 through gunicorn, which joins repeated headers with a comma: next to a valid
    signature, such a header is a 401 (it was skipped, or its first value read)."""
    body = json.dumps(
        {"dedup_key": "live-18-11", "channel": "transactional", "to": "ann@example.com", "subject": "s", "text": "t"}
    ).encode()
    signature = (SIGNATURE_HEADER, sign(SECRET.encode(), int(time.time()), body))
    status, answer = raw_post(server, "/send", body, [signature, *extra])
    assert status == 401, answer[:300]
    assert documents(firestore_emulator) == 0
