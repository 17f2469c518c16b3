"""Who may call what, and hostile input: every refusal is 4xx with a clear error and leaves the store untouched.

ID tokens are real JWTs signed with an RSA key made here and verified by the production
GoogleIdTokenVerifier against a certificate set served by a stub fetch (Google's format:
key id -> PEM certificate).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from flask import Flask
from google.auth import crypt, jwt

from safesend.adapters.google_id_token import GoogleIdTokenVerifier
from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core.auth import SIGNATURE_HEADER, Authenticator, AuthPolicy, sign
from safesend.entrypoints.http_api import HttpApi
from tests.certificates import self_signed
from tests.unit.conftest import make_world

APP = Flask(__name__)
SECRET = b"s3cret-s3cret-s3cret-s3cret-s3cret!"
AUDIENCE = "https://safesend-send-123.us-central1.run.app"
N8N = "n8n-invoker@proj.iam.gserviceaccount.com"
TASKS = "tasks-invoker@proj.iam.gserviceaccount.com"
BODY = {
    "customer_id": "c1",
    "event_type": "order_paid",
    "order_id": "42",
    "channel": "receipts",
    "to": "ann@example.com",
    "subject": "Receipt",
    "text": "Thanks",
}


def make_key(kid: str) -> tuple[crypt.RSASigner, str]:
    now = datetime.now(UTC)
    key, cert = self_signed(kid, now - timedelta(days=1), now + timedelta(days=1))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return crypt.RSASigner.from_string(pem, key_id=kid), cert.public_bytes(serialization.Encoding.PEM).decode()


GOOGLE_SIGNER, GOOGLE_CERT = make_key("google-key-1")
ROGUE_SIGNER, _ = make_key("google-key-1")  # same kid, different key: a forgery


def id_token(
    email: str = N8N,
    audience: str = AUDIENCE,
    signer: crypt.RSASigner = GOOGLE_SIGNER,
    issuer: str = "https://accounts.google.com",
    verified: bool = True,
    expires_in: int = 600,
) -> str:
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": "1234",
        "email": email,
        "email_verified": verified,
        "iat": now - 5,
        "exp": now + expires_in,
    }
    return jwt.encode(signer, claims).decode()


@pytest.fixture
def world():
    return make_world()


@pytest.fixture
def api(world):
    settings = Settings(project="demo", default_from="Shop <shop@example.com>", max_request_bytes=64_000)
    verifier = GoogleIdTokenVerifier(frozenset({AUDIENCE}), fetch=lambda url: {"google-key-1": GOOGLE_CERT})
    authenticator = Authenticator(AuthPolicy(SECRET, frozenset({N8N}), frozenset({TASKS})), verifier, time.time)
    return HttpApi(lambda: Runtime(settings, world.service.policies, world.service, authenticator))


def request(
    handler,
    *,
    method: str = "POST",
    data: bytes | str | None = None,
    query: str = "",
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
):
    with APP.test_request_context(
        f"/x{query}", method=method, data=data, headers=headers or {}, content_type=content_type
    ):
        from flask import request as flask_request

        payload, status, _ = handler(flask_request)
        return status, payload


def signed(body: Any, secret: bytes = SECRET, at: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    return raw, {SIGNATURE_HEADER: sign(secret, int(time.time()) if at is None else at, raw)}


def untouched(world) -> bool:
    return world.store.all() == [] and world.mailer.sends == 0


# ----------------------------------------------------------------------------- HMAC for n8n
def test_a_valid_signature_sends(api, world):
    raw, headers = signed(BODY)
    assert request(api.send, data=raw, headers=headers)[0] == 200
    assert world.mailer.sends == 1


@pytest.mark.parametrize(
    "case", ["wrong secret", "tampered body", "expired", "from the future", "malformed", "no v1", "missing"]
)
def test_bad_signatures_are_401_and_touch_nothing(api, world, case):
    raw, headers = signed(BODY)
    if case == "wrong secret":
        raw, headers = signed(BODY, secret=b"not-the-secret-not-the-secret-!!!")
    elif case == "tampered body":
        raw = json.dumps({**BODY, "to": "mallory@example.com"}).encode()
    elif case == "expired":
        raw, headers = signed(BODY, at=int(time.time()) - 301)
    elif case == "from the future":
        raw, headers = signed(BODY, at=int(time.time()) + 301)
    elif case == "malformed":
        headers = {SIGNATURE_HEADER: "garbage"}
    elif case == "no v1":
        headers = {SIGNATURE_HEADER: f"t={int(time.time())}"}
    else:
        headers = {}
    status, payload = request(api.send, data=raw, headers=headers)
    assert status == 401 and payload["error"] == "unauthenticated"
    assert untouched(world)


def test_a_replay_inside_the_window_is_a_harmless_replay_and_outside_it_is_refused(api, world):
    raw, headers = signed(BODY, at=int(time.time()) - 200)
    assert request(api.send, data=raw, headers=headers)[0] == 200
    status, payload = request(api.send, data=raw, headers=headers)  # captured and replayed
    assert status == 200 and payload["replayed"] is True and world.mailer.sends == 1
    old_raw, old_headers = signed(BODY, at=int(time.time()) - 400)
    assert request(api.send, data=old_raw, headers=old_headers)[0] == 401
    assert world.mailer.sends == 1


def test_status_signature_covers_the_query(api, world):
    raw, headers = signed(BODY)
    job_id = request(api.send, data=raw, headers=headers)[1]["job_id"]
    query = f"job_id={job_id}"
    good = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), query.encode())}
    assert request(api.status, method="GET", query=f"?{query}", headers=good)[0] == 200
    other = "job_id=" + "0" * 32
    assert request(api.status, method="GET", query=f"?{other}", headers=good)[0] == 401


# ----------------------------------------------------------------------------- Google ID tokens
def test_an_allowed_callers_id_token_sends(api, world):
    status, _ = request(api.send, data=json.dumps(BODY), headers={"Authorization": f"Bearer {id_token()}"})
    assert status == 200 and world.mailer.sends == 1


@pytest.mark.parametrize(
    "token, expected",
    [
        (lambda: id_token(audience="https://someone-else.run.app"), 401),
        (lambda: id_token(signer=ROGUE_SIGNER), 401),
        (lambda: id_token(expires_in=-60), 401),
        (lambda: id_token(issuer="https://evil.example"), 401),
        (lambda: id_token(verified=False), 401),
        (lambda: "not.a.jwt", 401),
        (lambda: id_token(email="stranger@proj.iam.gserviceaccount.com"), 403),
        (lambda: id_token(email=TASKS), 403),  # an internal invoker is not a caller
    ],
    ids=[
        "wrong audience",
        "forged signature",
        "expired",
        "not google",
        "unverified email",
        "garbage",
        "unknown caller",
        "internal invoker",
    ],
)
def test_bad_id_tokens_are_refused_and_touch_nothing(api, world, token, expected):
    status, payload = request(api.send, data=json.dumps(BODY), headers={"Authorization": f"Bearer {token()}"})
    assert status == expected and payload["error"] in ("unauthenticated", "forbidden")
    assert untouched(world)


@pytest.mark.parametrize("endpoint", ["reconcile", "sweep"])
def test_internal_endpoints_take_only_the_invokers_id_token(api, world, endpoint):
    handler = getattr(api, endpoint)
    body = json.dumps({"job_id": "0" * 32})
    assert request(handler, data=body, headers={"Authorization": f"Bearer {id_token(email=TASKS)}"})[0] == 200
    raw, hmac_headers = signed({"job_id": "0" * 32})
    assert request(handler, data=raw, headers=hmac_headers)[0] == 401  # HMAC is for n8n only
    assert request(handler, data=body, headers={"Authorization": f"Bearer {id_token(email=N8N)}"})[0] == 403
    assert request(handler, data=body)[0] == 401
    assert (
        request(
            handler,
            data=body,
            headers={"Authorization": f"Bearer {id_token(email=TASKS, audience='https://x.run.app')}"},
        )[0]
        == 401
    )
    assert untouched(world)


def test_an_id_token_and_a_signature_together_must_both_verify(api, world):
    raw, headers = signed(BODY)
    both = {**headers, "Authorization": f"Bearer {id_token()}"}
    assert request(api.send, data=raw, headers=both)[0] == 200
    _, forged = signed(BODY, secret=b"not-the-secret-not-the-secret-!!!")
    assert request(api.send, data=raw, headers={**forged, "Authorization": f"Bearer {id_token()}"})[0] == 401
    assert world.mailer.sends == 1


def test_a_caller_endpoint_without_caller_credentials_configured_refuses_everyone(world):
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    verifier = GoogleIdTokenVerifier(frozenset({AUDIENCE}), fetch=lambda url: {"google-key-1": GOOGLE_CERT})
    internal_only = Authenticator(AuthPolicy(None, frozenset(), frozenset({TASKS})), verifier, time.time)
    api = HttpApi(lambda: Runtime(settings, world.service.policies, world.service, internal_only))
    raw, headers = signed(BODY)
    assert request(api.send, data=raw, headers=headers)[0] == 401
    assert request(api.send, data=raw, headers={"Authorization": f"Bearer {id_token()}"})[0] == 403
    assert untouched(world)


# ----------------------------------------------------------------------------- hostile and broken input
def test_wrong_content_type_is_415(api, world):
    raw, headers = signed(BODY)
    assert request(api.send, data=raw, headers=headers, content_type="text/plain")[0] == 415
    assert untouched(world)


def test_malformed_json_is_400(api, world):
    raw = b'{"customer_id": "c1",'
    headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), raw)}
    status, payload = request(api.send, data=raw, headers=headers)
    assert status == 400 and payload["error"] == "malformed_json"
    assert untouched(world)


def test_oversize_request_is_413_before_anything_else(api, world):
    raw, headers = signed({**BODY, "text": "x" * 70_000})
    status, payload = request(api.send, data=raw, headers=headers)
    assert status == 413 and payload["error"] == "too_large"
    status, _ = request(api.send, data=raw)  # unauthenticated and oversize: still 413, nothing read
    assert status == 413 and untouched(world)


@pytest.mark.parametrize(
    "field, value",
    [
        ("subject", "Hi\r\nBcc: victim@example.com"),
        ("subject", "Hi\nX-Injected: 1"),
        ("subject", "Hi\x00"),
        ("subject", "Hi\u2028Bcc: victim@example.com"),
        ("to", "ann@example.com\r\nBcc: victim@example.com"),
        ("to", ["Ann\r\nBcc: victim@example.com <ann@example.com>"]),
        ("reply_to", "help@example.com\nBcc: victim@example.com"),
        ("from", "Shop <shop@example.com>\r\nX-Injected: 1"),
        ("cc", "bob@example.com, victim@example.com"),  # two addresses smuggled into one item
        ("dedup_key", "c1:order\r\nBcc: x"),
        ("dedup_key", "key with spaces"),
        ("dedup_key", "k" * 256),
        ("dedup_key", "ключ"),
        ("customer_id", "c1\n"),
        ("text", "body\x00"),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_injection_and_bad_shapes_are_400_naming_the_field(api, world, field, value):
    body = {**BODY, field: value}
    if field == "dedup_key":
        body = {k: v for k, v in body.items() if k not in ("customer_id", "event_type", "order_id")}
        body["dedup_key"] = value
    raw, headers = signed(body)
    status, payload = request(api.send, data=raw, headers=headers)
    assert status == 400 and field in payload["fields"], payload
    assert untouched(world)


def test_too_many_recipients_and_unknown_fields_are_400(api, world):
    many = [f"user{i}@example.com" for i in range(101)]
    for body, field in (({**BODY, "to": many}, "to"), ({**BODY, "priority": "high"}, "priority")):
        raw, headers = signed(body)
        status, payload = request(api.send, data=raw, headers=headers)
        assert status == 400 and field in payload["fields"]
    assert untouched(world)


def test_non_ascii_display_names_are_encoded_not_refused(api, world):
    raw, headers = signed({**BODY, "to": "Zoë Ångström <zoe@example.com>", "subject": "Ваш чек"})
    assert request(api.send, data=raw, headers=headers)[0] == 200
    import email
    from email import policy

    sent = email.message_from_bytes(world.mailbox.raws[0], policy=policy.default)
    assert sent["To"].addresses[0].display_name == "Zoë Ångström" and sent["Subject"] == "Ваш чек"
    assert b"=?utf-8?" in world.mailbox.raws[0]  # RFC 2047 on the wire, never raw 8-bit headers


# ----------------------------------------------------------------------------- configuration
def test_a_deployment_without_auth_settings_refuses_to_start():
    from safesend.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p"}).check_auth()
    with pytest.raises(ConfigurationError):  # invokers whose ID tokens could not be checked
        Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_AUTH_INTERNAL_INVOKERS": TASKS}).check_auth()
    with pytest.raises(ConfigurationError):  # a short secret
        Settings.from_env(
            {
                "GOOGLE_CLOUD_PROJECT": "p",
                "SAFESEND_AUTH_HMAC_SECRET": "short",
                "SAFESEND_AUTH_INTERNAL_INVOKERS": TASKS,
                "SAFESEND_AUTH_AUDIENCES": AUDIENCE,
            }
        ).check_auth()
    Settings.from_env(
        {
            "GOOGLE_CLOUD_PROJECT": "p",
            "SAFESEND_AUTH_HMAC_SECRET": "x" * 32,
            "SAFESEND_AUTH_INTERNAL_INVOKERS": TASKS,
            "SAFESEND_AUTH_AUDIENCES": AUDIENCE,
        }
    ).check_auth()
    Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SAFESEND_AUTH_DISABLED": "1"}).check_auth()


def test_disabling_auth_is_explicit_and_warns(caplog):
    from safesend.bootstrap.runtime import build_authenticator
    from safesend.core.auth import Role

    with caplog.at_level("WARNING", logger="safesend"):
        authenticator = build_authenticator(Settings(project="p", auth_disabled=True))
    assert authenticator.check(Role.INTERNAL, {}, b"") == "unauthenticated-local"
    assert any(r.levelname == "WARNING" and "DISABLED" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- behind Cloud Run IAM
def stripped(token: str) -> str:
    """What Cloud Run forwards to the container after verifying a token."""
    return token.rsplit(".", 1)[0] + ".SIGNATURE_REMOVED_BY_GOOGLE"


@pytest.fixture
def iam_api(world):
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    verifier = GoogleIdTokenVerifier(
        frozenset({AUDIENCE}), fetch=lambda url: {"google-key-1": GOOGLE_CERT}, trust_cloud_run_iam=True
    )
    authenticator = Authenticator(AuthPolicy(SECRET, frozenset({N8N}), frozenset({TASKS})), verifier, time.time)
    return HttpApi(lambda: Runtime(settings, world.service.policies, world.service, authenticator))


def test_behind_iam_a_token_cloud_run_verified_and_stripped_is_accepted(iam_api, world):
    headers = {"Authorization": f"Bearer {stripped(id_token())}"}
    assert request(iam_api.send, data=json.dumps(BODY), headers=headers)[0] == 200
    invoker = {"Authorization": f"Bearer {stripped(id_token(email=TASKS))}"}
    assert request(iam_api.sweep, data="{}", headers=invoker)[0] == 200


def test_x_serverless_authorization_wins_because_that_is_the_header_cloud_run_checked(iam_api, world):
    forged_caller = stripped(id_token(email=N8N, signer=ROGUE_SIGNER))  # not what Cloud Run verified
    headers = {
        "X-Serverless-Authorization": f"Bearer {stripped(id_token(email=TASKS))}",
        "Authorization": f"Bearer {forged_caller}",
    }
    assert request(iam_api.send, data=json.dumps(BODY), headers=headers)[0] == 403  # read as TASKS
    assert untouched(world)


@pytest.mark.parametrize(
    "token",
    [
        lambda: stripped(id_token(audience="https://someone-else.run.app")),
        lambda: stripped(id_token(expires_in=-600)),
        lambda: stripped(id_token(issuer="https://evil.example")),
    ],
    ids=["wrong audience", "expired", "not google"],
)
def test_stripped_tokens_still_have_their_claims_checked(iam_api, world, token):
    assert request(iam_api.send, data=json.dumps(BODY), headers={"Authorization": f"Bearer {token()}"})[0] == 401
    assert untouched(world)


def test_without_iam_in_front_a_stripped_token_is_refused(api, world):
    headers = {"Authorization": f"Bearer {stripped(id_token())}"}
    assert request(api.send, data=json.dumps(BODY), headers=headers)[0] == 401
    assert untouched(world)
