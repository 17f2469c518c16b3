"""Issue 9.1/9.2: API keys (n8n's Bearer Auth, no code) and the public deployment mode."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest
from flask import Flask

from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core.api_keys import ApiKeyError, ApiKeyRing, digest_of, mint
from safesend.core.api_keys import main as api_keys_main
from safesend.core.auth import Authenticator, AuthPolicy
from safesend.core.errors import ConfigurationError
from safesend.entrypoints.http_api import HttpApi
from safesend.logs import CloudLoggingFormatter, get_logger
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


def test_a_minted_key_verifies_and_names_its_key_id():
    key, entry = mint("n8n-prod")
    assert key.startswith("ssk_n8n-prod_") and entry == f"n8n-prod:{digest_of(key)}"
    assert ApiKeyRing.parse(entry).verify(key) == "n8n-prod"


def test_several_keys_are_valid_at_once_for_rotation_and_a_removed_one_is_revoked():
    old, old_entry = mint("n8n-2025")
    new, new_entry = mint("n8n-2026")
    both = ApiKeyRing.parse(f"{old_entry}, {new_entry}")
    assert (both.verify(old), both.verify(new)) == ("n8n-2025", "n8n-2026")
    with pytest.raises(ApiKeyError):
        ApiKeyRing.parse(new_entry).verify(old)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda k: k[:-1] + ("A" if k[-1] != "A" else "B"),  # one character of the secret
        lambda k: k.replace("ssk_n8n_", "ssk_other_"),  # another key id, same secret
        lambda k: k + "x",
        lambda k: k[:-1],
        lambda k: "ssk_",
        lambda k: "ssk_n8n_" + "!" * 43,
    ],
)
def test_a_wrong_or_malformed_key_is_refused(tamper):
    key, entry = mint("n8n")
    with pytest.raises(ApiKeyError):
        ApiKeyRing.parse(entry).verify(tamper(key))


@pytest.mark.parametrize(
    "raw", ["n8n", "n8n:abc", "N8N:" + "0" * 64, "a:" + "0" * 64 + ",a:" + "1" * 64, "n8n:" + "g" * 64]
)
def test_a_malformed_key_list_refuses_to_start(raw):
    with pytest.raises(ConfigurationError, match="SAFESEND_AUTH_API_KEYS"):
        Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_AUTH_API_KEYS": raw}).check_auth()


def test_the_mint_command_prints_a_key_and_its_entry(capsys):
    assert api_keys_main(["new", "n8n-prod"]) == 0
    out = capsys.readouterr().out
    key = next(line.strip() for line in out.splitlines() if line.strip().startswith("ssk_"))
    entry = next(line.strip() for line in out.splitlines() if line.strip().startswith("n8n-prod:"))
    assert ApiKeyRing.parse(entry).verify(key) == "n8n-prod"
    assert api_keys_main([]) == 2


# --------------------------------------------------------------------------- over HTTP
CALLER_KEY, CALLER_ENTRY = mint("n8n")
INTERNAL_KEY, INTERNAL_ENTRY = mint("local-internal")


@pytest.fixture
def api_and_world():
    world = make_world()
    policy = AuthPolicy(
        None,
        frozenset(),
        frozenset(),
        caller_keys=ApiKeyRing.parse(CALLER_ENTRY),
        internal_keys=ApiKeyRing.parse(INTERNAL_ENTRY),
    )
    runtime = Runtime(
        Settings(project="demo", default_from="Shop <shop@example.com>"),
        world.service.policies,
        world.service,
        Authenticator(policy, None, time.time),
    )
    return HttpApi(lambda: runtime), world


def call(handler, key: str | None, method: str = "POST", body=None, query: str = ""):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with APP.test_request_context(
        f"/x{query}",
        method=method,
        data=json.dumps(body) if body else None,
        headers=headers,
        content_type="application/json",
    ):
        from flask import request

        payload, status, _ = handler(request)
        return status, payload


def test_a_caller_key_sends_and_reads_status(api_and_world):
    api, world = api_and_world
    status, payload = call(api.send, CALLER_KEY, body=BODY)
    assert status == 200 and payload["state"] == "sent" and world.mailer.sends == 1
    status, _ = call(api.status, CALLER_KEY, method="GET", query=f"?job_id={payload['job_id']}")
    assert status == 200


@pytest.mark.parametrize(
    "key",
    [INTERNAL_KEY, CALLER_KEY[:-1] + ("Q" if CALLER_KEY[-1] != "Q" else "R"), "ssk_nope_" + "a" * 43, None],
    ids=[
        "internal-key",
        "caller-key-one-letter-off",
        "unknown-key",
        "no-key",
    ],  # fixed ids: the keys are minted per run
)
def test_send_refuses_any_other_key_with_401_and_says_what_to_do(api_and_world, key):
    api, world = api_and_world
    status, payload = call(api.send, key, body=BODY)
    assert status == 401 and world.mailer.sends == 0 and world.store.all() == []
    assert "API key" in payload["message"] and "do not retry" in payload["message"]


@pytest.mark.parametrize("endpoint", ["reconcile", "sweep"])
def test_internal_endpoints_take_only_internal_keys(api_and_world, endpoint):
    api, _ = api_and_world
    status, _ = call(getattr(api, endpoint), CALLER_KEY, body={"job_id": "0" * 32})
    assert status == 401
    status, _ = call(getattr(api, endpoint), INTERNAL_KEY, body={"job_id": "0" * 32})
    assert status == 200


def test_a_refused_key_is_never_logged_or_echoed(api_and_world, caplog):
    api, _ = api_and_world
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    get_logger().addHandler(handler)
    try:
        canary = CALLER_KEY[:-10] + "CANARY1234"
        status, payload = call(api.send, canary, body=BODY)
    finally:
        get_logger().removeHandler(handler)
    assert status == 401
    secret_part = canary.split("_", 2)[2]
    assert secret_part not in json.dumps(payload) and secret_part not in stream.getvalue()
    assert secret_part not in caplog.text


# --------------------------------------------------------------------------- public mode
def public(**env: str) -> Settings:
    return Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_PUBLIC_INVOKER": "true", **env})


def test_a_public_function_with_an_api_key_starts():
    public(SAFESEND_AUTH_API_KEYS=CALLER_ENTRY).check_auth()
    public(SAFESEND_AUTH_HMAC_SECRET="x" * 32).check_auth()


@pytest.mark.parametrize(
    "env, why",
    [
        (
            {
                "SAFESEND_AUTH_API_KEYS": CALLER_ENTRY,
                "SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM": "true",
                "SAFESEND_AUTH_AUDIENCES": "https://x",
            },
            "TRUST_CLOUD_RUN_IAM",
        ),
        ({"SAFESEND_AUTH_DISABLED": "1", "SAFESEND_AUTH_API_KEYS": CALLER_ENTRY}, "AUTH_DISABLED"),
        (
            {
                "SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS": "n8n@p.iam.gserviceaccount.com",
                "SAFESEND_AUTH_AUDIENCES": "https://x",
            },
            "needs SAFESEND_AUTH_API_KEYS",
        ),
    ],
)
def test_a_public_function_refuses_to_start_without_its_own_gate(env, why):
    """With allUsers as invoker, trusting unsigned (IAM-stripped) ID tokens would accept forged ones."""
    with pytest.raises(ConfigurationError, match=why):
        public(**env).check_auth()
