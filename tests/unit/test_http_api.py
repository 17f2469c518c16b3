"""HTTP mapping of the service's outcomes, over in-memory fakes (the real server is in test_stack.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core.auth import SIGNATURE_HEADER, Authenticator, AuthPolicy, sign
from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import StoreUnavailableError
from safesend.entrypoints.http_api import HttpApi
from tests.unit.conftest import make_world

APP = Flask(__name__)
BODY = {
    "customer_id": "c1",
    "event_type": "order_paid",
    "order_id": "42",
    "channel": "receipts",
    "to": "ann@example.com",
    "subject": "Receipt",
    "text": "Thanks",
}


SECRET = b"0123456789abcdef0123456789abcdef"


@pytest.fixture
def api_and_world():
    world = make_world()
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    authenticator = Authenticator(
        AuthPolicy(SECRET, frozenset(), frozenset({"tasks@p.iam.gserviceaccount.com"})), None, time.time
    )
    runtime = Runtime(settings, world.service.policies, world.service, authenticator)
    return HttpApi(lambda: runtime), world


def call(handler, method: str = "POST", body: Any = None, query: str = "", headers: dict | None = None):
    """A request signed the way n8n signs it (HMAC over timestamp + body, or + query for GET)."""
    data = json.dumps(body) if body is not None else None
    signed = (data or "").encode() if method == "POST" else query.lstrip("?").encode()
    headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), signed), **(headers or {})}
    with APP.test_request_context(
        f"/x{query}", method=method, data=data, headers=headers, content_type="application/json"
    ):
        from flask import request

        payload, status, response_headers = handler(request)
        return status, payload, response_headers


def test_sent_is_200_and_a_replay_says_so(api_and_world):
    api, world = api_and_world
    status, payload, headers = call(api.send, body=BODY)
    assert status == 200 and payload["state"] == "sent" and payload["replayed"] is False
    assert headers["Content-Type"] == "application/json"
    assert set(payload) >= {"job_id", "message_id", "state", "provider_ref", "attempts"}
    status, payload, _ = call(api.send, body=BODY)
    assert status == 200 and payload["replayed"] is True
    assert world.mailer.sends == 1


def test_in_flight_or_reconciling_is_202_never_an_error(api_and_world):
    api, world = api_and_world
    world.mailer.script = [classify_transport(TransportErrorKind.TIMEOUT)]
    status, payload, _ = call(api.send, body=BODY)
    assert status == 202 and payload["state"] == "unknown"
    status, payload, _ = call(api.send, body=BODY)
    assert status == 202 and payload["replayed"] is True


def test_permanent_failure_is_422_with_the_reason(api_and_world):
    api, world = api_and_world
    world.mailer.script = [classify_http(400, "invalidArgument", "Invalid To header")]
    status, payload, _ = call(api.send, body=BODY)
    assert status == 422 and payload["state"] == "failed" and payload["last_error"]["status"] == 400


def test_bad_requests_are_400_with_fields(api_and_world):
    api, _ = api_and_world
    status, payload, _ = call(api.send, body={"to": "x"})
    assert status == 400 and payload["error"] == "invalid_request"
    assert {"to", "channel", "subject", "text", "customer_id"} <= set(payload["fields"])
    status, payload, _ = call(api.send, body=["not", "an", "object"])
    assert status == 400 and "body" in payload["fields"]
    status, payload, _ = call(api.send, body={**BODY, "channel": "unknown"})
    assert status == 400 and "channel" in payload["fields"]


def test_payload_mismatch_is_422(api_and_world):
    api, _ = api_and_world
    call(api.send, body=BODY)
    status, payload, _ = call(api.send, body={**BODY, "text": "other"})
    assert status == 422 and payload["error"] == "payload_mismatch"


def test_store_down_before_claim_is_503_with_retry_after(api_and_world):
    api, world = api_and_world

    def down(job):
        raise StoreUnavailableError("down")

    world.store.claim_or_get = down
    status, _payload, headers = call(api.send, body=BODY)
    assert status == 503 and headers["Retry-After"] == "5" and world.mailer.sends == 0


def test_methods_are_checked(api_and_world):
    api, _ = api_and_world
    assert call(api.send, method="GET")[0] == 405
    assert call(api.status, method="POST")[0] == 405
    assert call(api.reconcile, method="GET")[0] == 405


def test_status_by_id_by_key_and_missing(api_and_world):
    api, _ = api_and_world
    _, sent, _ = call(api.send, body=BODY)
    status, payload, _ = call(api.status, method="GET", query=f"?job_id={sent['job_id']}")
    assert status == 200 and payload["events"] and "payload" not in payload
    status, payload, _ = call(api.status, method="GET", query="?customer_id=c1&event_type=order_paid&order_id=42")
    assert status == 200 and payload["job_id"] == sent["job_id"]
    assert call(api.status, method="GET", query="?dedup_key=c1:order_paid:42")[1]["job_id"] == sent["job_id"]
    for bad in ("nope", "a/b", "__x__", "..", "0" * 33):
        assert call(api.status, method="GET", query=f"?job_id={bad}")[0] == 404
    assert call(api.status, method="GET")[0] == 400


class FakeIdTokens:
    def verify(self, token: str):
        return {"email": token, "email_verified": True}


@pytest.fixture
def internal_api(api_and_world):
    api, world = api_and_world
    runtime = api._runtime_factory()
    runtime.authenticator.id_tokens = FakeIdTokens()
    return api, world


INVOKER = {"Authorization": "Bearer tasks@p.iam.gserviceaccount.com"}


def test_reconcile_answers_200_for_anything_it_handled_and_503_when_the_mailbox_is_down(internal_api):
    api, world = internal_api
    world.mailer.script = [classify_transport(TransportErrorKind.TIMEOUT)]
    _, sent, _ = call(api.send, body=BODY)

    def reconcile(body):
        return call(api.reconcile, body=body, headers=INVOKER)

    assert reconcile({"job_id": sent["job_id"]})[1]["action"] == "not_due"
    assert reconcile({"job_id": "0" * 32})[1]["action"] == "not_found"
    for bad in ({}, {"job_id": "missing"}, {"job_id": "a/b"}, {"job_id": "__x__"}, {"job_id": 7}):
        assert reconcile(bad)[0] == 400
    from safesend.core.errors import MailboxUnavailableError

    world.clock.advance(120)
    world.mailer.search_error = MailboxUnavailableError("gmail down")
    assert reconcile({"job_id": sent["job_id"]})[0] == 503


def test_sweep_reports_what_it_did(internal_api):
    api, _ = internal_api
    status, payload, _ = call(api.sweep, body={}, headers=INVOKER)
    assert status == 200 and payload == {"examined": 0, "actions": {}, "errors": 0, "stopped_early": False}


def test_the_deployed_package_has_no_fault_switch(api_and_world):
    """Crash points live in devstack/ (local stack, unit tests): the fault header does nothing here."""
    api, world = api_and_world
    status, _, _ = call(api.send, body=BODY, headers={"X-Safesend-Fault": "after_claim"})
    assert status == 200 and world.mailer.sends == 1
    functions = Path(__file__).resolve().parents[2] / "functions"
    offenders = [
        p.name for p in functions.rglob("*") if p.suffix in (".py", ".toml", ".txt") and "Fault" in p.read_text()
    ]
    assert offenders == []
