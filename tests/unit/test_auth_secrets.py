"""A refused credential is never logged or echoed, whole or in part.

Each bad credential carries a unique canary; after the request is refused, the canary must appear
in neither the response (body, headers) nor any log output: the safesend logger's JSON lines
(captured with the production formatter, at DEBUG), caplog and stdout/stderr.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterator

import pytest
from flask import Flask
from google.auth import crypt, jwt

from safesend.core.auth import SIGNATURE_HEADER
from safesend.logs import CloudLoggingFormatter, get_logger
from tests.unit.test_http_security import (  # noqa: F401
    AUDIENCE,
    BODY,
    GOOGLE_SIGNER,
    N8N,
    ROGUE_SIGNER,
    api,
    iam_api,
    id_token,
    stripped,
    world,
)

APP = Flask(__name__)
ENDPOINTS = ["send", "status", "reconcile", "sweep"]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segment(obj: object) -> str:
    return b64(json.dumps(obj).encode())


def claims(canary: str, **override: object) -> dict[str, object]:
    now = int(time.time())
    return {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "sub": canary,
        "email": N8N,
        "email_verified": True,
        "iat": now - 5,
        "exp": now + 600,
        **override,
    }


def signed_token(payload: dict[str, object], signer: crypt.RSASigner = GOOGLE_SIGNER) -> str:
    return jwt.encode(signer, payload).decode()


def unsigned(header: dict[str, object], payload: dict[str, object]) -> str:
    return f"{segment(header)}.{segment(payload)}.SIGNATURE_REMOVED_BY_GOOGLE"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# Each: canary -> request headers carrying it in a credential that must be refused.
CREDENTIALS: dict[str, Callable[[str], dict[str, str]]] = {
    "oauth access token": lambda c: bearer(f"ya29.a0{c}"),
    "two segments": lambda c: bearer(f"{c}.{c}"),
    "garbage segments": lambda c: bearer(f"{c}.{c}.{c}"),
    "bad base64": lambda c: bearer(f"{segment({'alg': 'RS256'})}.{c}!*$.{c}"),
    "payload not json": lambda c: bearer(f"{segment({'alg': 'RS256'})}.{b64(c.encode())}.{b64(b'sig')}"),
    "payload not an object": lambda c: bearer(f"{segment({'alg': 'RS256'})}.{segment([c])}.{b64(b'sig')}"),
    "header not an object": lambda c: bearer(f"{segment([c])}.{segment(claims(c))}.{b64(b'sig')}"),
    "unknown key id": lambda c: bearer(f"{segment({'alg': 'RS256', 'kid': c})}.{segment(claims(c))}.{b64(b'sig')}"),
    "unknown algorithm": lambda c: bearer(f"{segment({'alg': c, 'kid': 'google-key-1'})}.{segment(claims(c))}.{c}"),
    "wrong signature": lambda c: bearer(signed_token(claims(c, aud=f"https://{c}.run.app"), ROGUE_SIGNER)),
    "signed, wrong audience": lambda c: bearer(signed_token(claims(c, aud=f"https://{c}.run.app"))),
    "signed, audience list": lambda c: bearer(signed_token(claims(c, aud=[AUDIENCE, c]))),
    "signed, bad iat": lambda c: bearer(signed_token(claims(c, iat=c))),
    "signed, email not verified": lambda c: bearer(
        signed_token(claims(c, email=f"x{c}@{c}.example", email_verified=False))
    ),
    "signed, unlisted caller": lambda c: bearer(signed_token(claims(c, email=f"x{c}@proj.iam.gserviceaccount.com"))),
    "stripped, wrong audience": lambda c: bearer(stripped(signed_token(claims(c, aud=f"https://{c}.run.app")))),
    "stripped, audience list": lambda c: bearer(stripped(signed_token(claims(c, aud=[c])))),
    "stripped, audience object": lambda c: bearer(stripped(signed_token(claims(c, aud={c: c})))),
    "stripped, issuer": lambda c: bearer(unsigned({"alg": "RS256"}, claims(c, iss=f"https://{c}"))),
    "stripped, email list": lambda c: bearer(unsigned({"alg": "RS256"}, claims(c, email=[c]))),
    "stripped, garbage": lambda c: bearer(f"{c}.{c}.SIGNATURE_REMOVED_BY_GOOGLE"),
    "hmac, canary t and v1": lambda c: {SIGNATURE_HEADER: f"t={c},v1={c}"},
    "hmac, canary v1": lambda c: {SIGNATURE_HEADER: f"t={int(time.time())},v1={c},v1={c}{c}"},
    "hmac, no equals": lambda c: {SIGNATURE_HEADER: f"t={int(time.time())},{c}"},
    "x-serverless, oauth token": lambda c: {"X-Serverless-Authorization": f"Bearer ya29.{c}"},
    "x-serverless, garbage": lambda c: {
        "X-Serverless-Authorization": f"Bearer {c}.{c}.{c}",
        "Authorization": f"Bearer {id_token()}",
    },
}


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[io.StringIO]:
    """The safesend logger's JSON lines, as the production formatter writes them, at DEBUG."""
    logger = get_logger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def call(handler, method: str, headers: dict[str, str]) -> tuple[int, str]:
    """Status and everything the client sees (body and headers) as one string."""
    body = json.dumps(BODY) if method == "POST" else None
    with APP.test_request_context(
        "/x?job_id=" + "0" * 32, method=method, data=body, headers=headers, content_type="application/json"
    ):
        from flask import request

        payload, status, response_headers = handler(request)
    return status, json.dumps(payload) + json.dumps(response_headers)


@pytest.mark.parametrize("trust_iam", [False, True], ids=["direct", "behind-iam"])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("credential", list(CREDENTIALS))
def test_a_refused_credential_is_neither_logged_nor_echoed(
    request, logs, caplog, capsys, world, endpoint, credential, trust_iam
):
    api_ = request.getfixturevalue("iam_api" if trust_iam else "api")
    canary = "cnry" + secrets.token_hex(12)
    headers = CREDENTIALS[credential](canary)
    method = "GET" if endpoint == "status" else "POST"
    status, seen = call(getattr(api_, endpoint), method, headers)
    captured = capsys.readouterr()
    assert status in (401, 403), (status, seen)
    assert canary not in seen, f"echoed to the client: {seen}"
    assert canary not in logs.getvalue(), f"logged: {logs.getvalue()}"
    assert canary not in caplog.text and all(canary not in str(r.__dict__) for r in caplog.records)
    assert canary not in captured.out + captured.err
    assert world.store.all() == [] and world.mailer.sends == 0
