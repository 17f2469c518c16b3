"""POST /decide: a caller's decision through service.decide, off unless SAFESEND_API_DECIDERS names it."""

from __future__ import annotations

import importlib
import json
import time
from typing import Any

import pytest
from flask import Flask

from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core.api_keys import ApiKeyRing, digest_of, mint
from safesend.core.auth import SIGNATURE_HEADER, Authenticator, AuthPolicy, sign
from safesend.core.errors import MailboxUnavailableError, RequestValidationError
from safesend.core.lifecycle import current_review_id
from safesend.core.notify import ReviewerTargets
from safesend.core.states import State
from safesend.entrypoints.api_decisions import allowed_decider, parse_decision_request
from safesend.entrypoints.http_api import HttpApi
from tests.unit.test_reviewers import in_review

APP = Flask(__name__)
SECRET = b"0123456789abcdef0123456789abcdef"
KEY, _ = mint("n8n-review")
OTHER_KEY, _ = mint("n8n-send")


def api_for(world: Any, deciders: str = "") -> HttpApi:
    ring = ApiKeyRing({k.split("_")[1]: bytes.fromhex(digest_of(k)) for k in (KEY, OTHER_KEY)})
    settings = Settings(
        project="demo",
        default_from="Shop <shop@example.com>",
        api_deciders=frozenset(d for d in deciders.split(",") if d),
    )
    authenticator = Authenticator(AuthPolicy(SECRET, frozenset(), frozenset(), caller_keys=ring), None, time.time)
    runtime = Runtime(settings, world.service.policies, world.service, authenticator)
    return HttpApi(lambda: runtime)


def post(handler: Any, body: Any, key: str | None = KEY, path: str = "/decide", raw: str | None = None):
    data = raw if raw is not None else json.dumps(body)
    if key:
        headers = {"Authorization": f"Bearer {key}"}
    else:
        headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), data.encode())}
    with APP.test_request_context(path, method="POST", data=data, headers=headers, content_type="application/json"):
        from flask import request

        payload, status, _ = handler(request)
        return status, payload


@pytest.fixture
def reviewed():
    world, job = in_review(reviewers=ReviewerTargets())
    return world, job, current_review_id(job)


def test_a_resend_by_an_allowed_key_sends_once_and_is_recorded_under_the_key(reviewed):
    world, job, review_id = reviewed
    api = api_for(world, "key:n8n-review")
    status, view = post(api.decide, {"review_id": review_id, "decision": "resend", "note": "customer asked"})
    assert status == 200, view
    assert (view["state"], view["result"], view["replayed"], view["job_id"]) == ("sent", "resent", False, job.id)
    assert view["review_id"] is None and world.effects(job.id) == 1
    [decision] = world.store.get(job.id).decisions
    assert decision["reviewer"] == "api key:n8n-review" and decision["note"] == "customer asked"
    again = post(api.decide, {"review_id": review_id, "decision": "resend", "job_id": job.id})
    assert again[0] == 200 and again[1]["replayed"] is True and world.effects(job.id) == 1


def test_the_workflow_may_name_who_decided_beside_the_verified_caller(reviewed):
    world, job, review_id = reviewed
    api = api_for(world, "hmac")
    body = {"review_id": review_id, "decision": "cancel", "reviewer": "Ann (Slack)", "dedup_key": job.dedup_key}
    status, view = post(api.decide, body, key=None)
    assert status == 200 and (view["state"], view["result"]) == ("cancelled", "cancelled")
    assert world.store.get(job.id).decisions[0]["reviewer"] == "api hmac for Ann (Slack)"
    assert world.effects(job.id) == 0


def test_a_stale_review_id_is_409_with_the_current_one(reviewed):
    world, job, review_id = reviewed
    api = api_for(world, "key:n8n-review")
    stale = f"{job.id}:{int(review_id.split(':')[1]) + 5}"
    status, payload = post(api.decide, {"review_id": stale, "decision": "resend"})
    assert status == 409 and payload["error"] == "stale_review"
    assert payload["current_review_id"] == review_id and "/status" in payload["message"]
    assert post(api.decide, {"review_id": review_id, "decision": "cancel"})[0] == 200
    status, payload = post(api.decide, {"review_id": review_id, "decision": "resend"})
    assert status == 409 and payload["error"] == "stale_review" and payload["current_review_id"] is None
    assert world.effects(job.id) == 0


def test_another_decision_on_the_same_entry_and_a_decision_that_does_not_apply_are_409(reviewed):
    world, job, review_id = reviewed
    api = api_for(world, "key:n8n-review")
    assert post(api.decide, {"review_id": review_id, "decision": "acknowledge"})[1]["error"] == "decision_not_allowed"
    assert post(api.decide, {"review_id": review_id, "decision": "mark_sent"})[0] == 200
    assert world.store.get(job.id).state is State.SENT


def test_decisions_are_off_by_default_and_for_callers_not_named(reviewed):
    world, job, review_id = reviewed
    body = {"review_id": review_id, "decision": "resend"}
    status, payload = post(api_for(world).decide, body)
    assert status == 403 and payload["error"] == "decisions_off" and "not set" in payload["message"]
    status, payload = post(api_for(world, "key:n8n-review").decide, body, key=OTHER_KEY)
    assert status == 403 and "does not name it" in payload["message"]
    assert post(api_for(world, "key:n8n-review").decide, body, key=None)[0] == 403  # hmac: not named
    assert post(api_for(world, "key:n8n-review").decide, body, key="ssk_n8n-review_" + "A" * 43)[0] == 401
    assert world.store.get(job.id).state is State.REVIEW and world.effects(job.id) == 0


def test_bad_requests_are_400_with_every_field_named(reviewed):
    world, job, review_id = reviewed
    api = api_for(world, "key:n8n-review")
    status, payload = post(api.decide, {"review_id": "nope", "decision": "send_anyway", "extra": 1, "note": 5})
    assert status == 400 and set(payload["fields"]) == {"review_id", "decision", "extra", "note"}
    other = "f" * 32
    status, payload = post(api.decide, {"review_id": review_id, "decision": "resend", "job_id": other})
    assert status == 400 and "another job" in payload["fields"]["review_id"]
    status, payload = post(api.decide, {"review_id": review_id, "decision": "resend", "note": "x" * 2001})
    assert status == 400 and "note" in payload["fields"]
    assert post(api.decide, None, raw="{not json")[1]["error"] == "malformed_json"
    assert post(api.decide, ["a"])[0] == 400
    assert world.store.get(job.id).state is State.REVIEW


def test_a_mailbox_that_cannot_be_searched_is_503_and_nothing_is_sent(reviewed):
    world, job, review_id = reviewed
    world.mailer.search_error = MailboxUnavailableError("gmail down")
    status, payload = post(api_for(world, "key:n8n-review").decide, {"review_id": review_id, "decision": "resend"})
    assert status == 503 and payload["error"] == "mailbox_unavailable"
    assert world.store.get(job.id).state is State.REVIEW


def test_the_send_function_serves_decide_on_its_decide_path(reviewed, monkeypatch):
    world, _job, review_id = reviewed
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo")  # functions/main.py checks the settings on import
    monkeypatch.setenv("SAFESEND_AUTH_HMAC_SECRET", SECRET.decode())
    main = importlib.import_module("main")
    monkeypatch.setattr(main, "_api", api_for(world, "key:n8n-review"))
    status, view = post(main.send, {"review_id": review_id, "decision": "resend"}, path="/decide")
    assert status == 200 and view["result"] == "resent"
    status, payload = post(main.send, {"review_id": review_id, "decision": "resend"}, path="/")
    assert status == 400 and "channel" in payload["fields"]  # the root path is still a send


def test_only_verified_identities_named_in_the_setting_decide():
    assert allowed_decider("key:a+hmac", frozenset({"hmac"})) == "hmac"
    assert allowed_decider("key:a", frozenset({"key:ab", "a"})) is None
    with pytest.raises(RequestValidationError) as refused:
        parse_decision_request({"review_id": "a" * 32 + ":1", "decision": "resend", "reviewer": "x\x00"})
    assert set(refused.value.fields) == {"reviewer"}


def test_status_and_the_job_view_carry_the_review_id_to_decide_on(reviewed):
    world, job, review_id = reviewed
    api = api_for(world)
    with APP.test_request_context(f"/status?job_id={job.id}", method="GET", headers={"Authorization": f"Bearer {KEY}"}):
        from flask import request

        payload, status, _ = api.status(request)
    assert status == 200 and payload["review_id"] == review_id == f"{job.id}:1"
