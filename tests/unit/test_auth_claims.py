"""Malformed ID-token claims are refused with 401, never 500, and touch nothing: on the path behind
Cloud Run IAM (signature stripped, claims are all we check) and on the signed path alike."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

import pytest

from safesend.adapters.google_id_token import GoogleIdTokenVerifier
from safesend.bootstrap.runtime import Runtime
from safesend.config import Settings
from safesend.core.auth import AuthenticationError, Authenticator, AuthPolicy, Role
from safesend.entrypoints.http_api import HttpApi
from tests.unit.test_auth_secrets import b64, claims, segment, signed_token
from tests.unit.test_http_security import (  # noqa: F401
    AUDIENCE,
    BODY,
    GOOGLE_CERT,
    N8N,
    SECRET,
    TASKS,
    api,
    iam_api,
    request,
    stripped,
    untouched,
    world,
)

HOUR = 3600
MISSING = object()


def bad(**override: Any) -> dict[str, Any]:
    """Valid claims for N8N with some replaced (MISSING deletes one)."""
    payload = {**claims("c"), **override}
    return {k: v for k, v in payload.items() if v is not MISSING}


NOW = time.time
BAD_CLAIMS = {
    "aud list": lambda: bad(aud=[AUDIENCE]),
    "aud object": lambda: bad(aud={AUDIENCE: 1}),
    "aud number": lambda: bad(aud=1),
    "aud null": lambda: bad(aud=None),
    "aud missing": lambda: bad(aud=MISSING),
    "exp Infinity": lambda: bad(exp=math.inf),
    "exp NaN": lambda: bad(exp=math.nan),
    "exp string": lambda: bad(exp=str(int(NOW()) + 600)),
    "exp true": lambda: bad(exp=True),
    "exp list": lambda: bad(exp=[int(NOW()) + 600]),
    "exp missing": lambda: bad(exp=MISSING),
    "exp 3 h ahead": lambda: bad(exp=int(NOW()) + 3 * HOUR),
    "exp 1e300": lambda: bad(exp=1e300),
    "exp huge int": lambda: bad(exp=10**400),
    "iat Infinity": lambda: bad(iat=-math.inf),
    "iat string": lambda: bad(iat="yesterday"),
    "iat false": lambda: bad(iat=False),
    "iat missing": lambda: bad(iat=MISSING),
    "iat in the future": lambda: bad(iat=int(NOW()) + HOUR),
    "iss list": lambda: bad(iss=["https://accounts.google.com"]),
    "iss object": lambda: bad(iss={"https://accounts.google.com": 1}),
    "iss missing": lambda: bad(iss=MISSING),
    "email list": lambda: bad(email=[N8N]),
    "email object": lambda: bad(email={N8N: 1}),
    "email number": lambda: bad(email=7),
    "email_verified string": lambda: bad(email_verified="true"),
    "email_verified 1": lambda: bad(email_verified=1),
    "email_verified missing": lambda: bad(email_verified=MISSING),
}


def unsigned_raw(payload: str) -> str:
    """A token as Cloud Run forwards it, with a raw (possibly non-standard) JSON payload."""
    return f"{segment({'alg': 'RS256', 'kid': 'google-key-1'})}.{b64(payload.encode())}.SIGNATURE_REMOVED_BY_GOOGLE"


def with_raw(tail: str) -> str:
    """Valid claims as JSON text, with `tail` (raw JSON members) appended: later keys win in Python."""
    return json.dumps(claims("c"))[:-1] + ", " + tail + "}"


def post(api_: HttpApi, token: str) -> int:
    return request(api_.send, data=json.dumps(BODY), headers={"Authorization": f"Bearer {token}"})[0]


@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_behind_iam_malformed_claims_are_401_and_touch_nothing(iam_api, world, case):
    assert post(iam_api, stripped(signed_token(BAD_CLAIMS[case]()))) == 401
    assert untouched(world)


@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_signed_tokens_with_malformed_claims_are_401_and_touch_nothing(api, world, case):
    assert post(api, signed_token(BAD_CLAIMS[case]())) == 401
    assert untouched(world)


@pytest.mark.parametrize(
    "payload",
    [
        lambda: with_raw('"exp": Infinity'),
        lambda: with_raw('"exp": NaN'),
        lambda: with_raw('"exp": 1e999'),
        lambda: with_raw('"aud": ["x"]'),
        lambda: "[" * 100_000 + "]" * 100_000,
        lambda: '"just a string"',
        lambda: "not json at all",
    ],
    ids=[
        "Infinity literal",
        "NaN literal",
        "overflowing exp",
        "duplicate aud",
        "deep nesting",
        "not an object",
        "not json",
    ],
)
def test_behind_iam_odd_json_is_401(iam_api, world, payload):
    assert post(iam_api, unsigned_raw(payload())) == 401
    assert untouched(world)


def test_behind_iam_well_formed_claims_still_pass(iam_api, world):
    assert post(iam_api, stripped(signed_token(bad(exp=int(time.time()) + HOUR)))) == 200


@pytest.mark.parametrize(
    "header",
    [
        segment({"alg": "RS256", "kid": ["google-key-1"]}),
        segment({"alg": ["RS256"], "kid": "google-key-1"}),
        segment({"alg": "none", "kid": "google-key-1"}),
        segment({"alg": "HS256", "kid": "google-key-1"}),
        segment({"alg": "RS256"}),
        segment(["RS256"]),
    ],
    ids=["kid list", "alg list", "alg none", "alg HS256", "no kid", "header list"],
)
def test_signed_path_odd_headers_are_401(api, world, header):
    token = signed_token(claims("c"))
    _, payload, signature = token.split(".")
    assert post(api, f"{header}.{payload}.{signature}") == 401
    assert untouched(world)


class ExplodingCerts:
    """A certificate source failing in a way nobody planned for."""

    def __call__(self, url: str) -> dict:
        raise RuntimeError("certificate cache corrupted")


def test_an_unexpected_error_inside_verification_is_401_not_500(world):
    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    verifier = GoogleIdTokenVerifier(frozenset({AUDIENCE}), fetch=ExplodingCerts())
    authenticator = Authenticator(AuthPolicy(SECRET, frozenset({N8N}), frozenset({TASKS})), verifier, time.time)
    api_ = HttpApi(lambda: Runtime(settings, world.service.policies, world.service, authenticator))
    assert post(api_, signed_token(claims("c"))) == 401
    assert untouched(world)


class BrokenVerifier:
    def verify(self, token: str) -> Mapping[str, object]:
        raise KeyError(token)


def test_any_verifier_failure_is_an_authentication_error():
    authenticator = Authenticator(AuthPolicy(None, frozenset({N8N}), frozenset()), BrokenVerifier(), time.time)
    with pytest.raises(AuthenticationError):
        authenticator.check(Role.CALLER, {"Authorization": "Bearer a.b.c"}, b"")


def test_certificates_rotated_in_are_fetched_once_more():
    """An unknown key id refetches the certificates (at most once a minute), then verifies."""
    fetched: list[dict] = [{}, {"google-key-1": GOOGLE_CERT}]
    clock = [time.time()]
    verifier = GoogleIdTokenVerifier(frozenset({AUDIENCE}), fetch=lambda url: fetched.pop(0), clock=lambda: clock[0])
    token = signed_token(claims("c"))
    with pytest.raises(AuthenticationError):  # first fetch: key unknown, cache too young to refetch
        verifier.verify(token)
    clock[0] += 61
    assert verifier.verify(token)["email"] == N8N
    assert fetched == []
