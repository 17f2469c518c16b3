"""reviewer_auth: who may use the review console (IAP assertion + allowlist, or a local development
identity), and the CSRF checks of a decision. Tokens are signed here with our own P-256 keys, served
in the format of IAP's public key document ({kid: PEM}) that google-auth's verify_token reads."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from safesend.core.errors import ConfigurationError
from safesend.entrypoints.reviewer_auth import (
    CSRF_TTL_S,
    IAP_HEADER,
    IAP_ISSUER,
    CsrfError,
    IapVerifier,
    KeysUnavailableError,
    Reviewer,
    ReviewerAuth,
    ReviewerAuthError,
    ReviewerForbiddenError,
    ReviewerSettings,
    es256_keys,
)

AUDIENCE = "/projects/123456789/locations/europe-west1/services/safesend-review"
PUBLIC_URL = "https://safesend-review-123456789.europe-west1.run.app"
SECRET = "s" * 40
NOW = 1_800_000_000.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Keys:
    """An IAP stand-in: P-256 keys published as a JWK set, and assertions signed with them."""

    def __init__(self, kids: tuple[str, ...] = ("k1",)):
        self.private = {kid: ec.generate_private_key(ec.SECP256R1()) for kid in kids}
        self.fetches = 0
        self.fail = False

    def document(self) -> dict[str, str]:
        """What https://www.gstatic.com/iap/verify/public_key serves: kid -> PEM public key."""
        return {kid: pem(key.public_key()) for kid, key in self.private.items()}

    def fetch(self, url: str) -> dict[str, Any]:
        self.fetches += 1
        if self.fail:
            raise OSError("network down")
        return self.document()

    def sign(self, claims: dict[str, Any], kid: str = "k1", alg: str = "ES256", key=None) -> str:
        header = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
        payload = b64(json.dumps(claims).encode())
        der = (key or self.private[kid]).sign(f"{header}.{payload}".encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{header}.{payload}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def pem(public_key: Any) -> str:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def claims(**overrides: Any) -> dict[str, Any]:
    base = {
        "iss": IAP_ISSUER,
        "aud": AUDIENCE,
        "iat": int(NOW) - 5,
        "exp": int(NOW) + 595,
        "sub": "accounts.google.com:1234567890",
        "email": "Ann.Lee@example.com",
        "hd": "example.com",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


class Clock:
    def __init__(self, now: float = NOW):
        self.now = now

    def __call__(self) -> float:
        return self.now


def iap_settings(**overrides: Any) -> ReviewerSettings:
    values = dict(
        iap_audiences=frozenset({AUDIENCE}),
        allowed_emails=frozenset({"ann.lee@example.com"}),
        csrf_secret=SECRET.encode(),
        console_url=PUBLIC_URL,
    )
    values.update(overrides)
    return ReviewerSettings(**values)


def iap_auth(keys: Keys, clock: Clock | None = None, **overrides: Any) -> ReviewerAuth:
    clock = clock or Clock()
    settings = iap_settings(**overrides)
    return ReviewerAuth(settings, IapVerifier(settings.iap_audiences, fetch=keys.fetch, clock=clock), clock)


@pytest.fixture
def keys() -> Keys:
    return Keys()


# ----------------------------------------------------------------------------- IAP assertions
def test_a_valid_assertion_of_an_allowed_person_is_a_reviewer(keys):
    reviewer = iap_auth(keys).identify({IAP_HEADER: keys.sign(claims())}, "203.0.113.9")
    assert reviewer == Reviewer("ann.lee@example.com", "iap") and not reviewer.is_dev


def test_keys_are_fetched_lazily_and_cached(keys):
    auth = iap_auth(keys)
    assert keys.fetches == 0
    for _ in range(5):
        auth.identify({IAP_HEADER: keys.sign(claims())}, None)
    assert keys.fetches == 1


def test_a_rotated_in_key_is_fetched_once_and_unknown_kids_do_not_hammer_the_key_url():
    keys = Keys(("old",))
    clock = Clock()
    auth = iap_auth(keys, clock)
    auth.identify({IAP_HEADER: keys.sign(claims(), kid="old")}, None)
    keys.private["new"] = ec.generate_private_key(ec.SECP256R1())
    clock.now += 120  # the cache is older than the refetch floor: an unknown kid refetches once
    auth.identify({IAP_HEADER: keys.sign(claims(iat=int(clock.now), exp=int(clock.now) + 600), kid="new")}, None)
    assert keys.fetches == 2
    forged = Keys(("bogus",))
    for _ in range(5):
        with pytest.raises(ReviewerAuthError, match="unknown signing key"):
            auth.identify(
                {IAP_HEADER: forged.sign(claims(iat=int(clock.now), exp=int(clock.now) + 600), kid="bogus")}, None
            )
    assert keys.fetches == 2  # fetched less than a minute ago: no refetch per forged kid


def test_keys_expire_after_their_ttl(keys):
    clock = Clock()
    auth = iap_auth(keys, clock)
    auth.identify({IAP_HEADER: keys.sign(claims())}, None)
    clock.now += 3601
    auth.identify({IAP_HEADER: keys.sign(claims(iat=int(clock.now), exp=int(clock.now) + 60))}, None)
    assert keys.fetches == 2


def test_unreachable_keys_are_a_503_never_a_pass(keys):
    keys.fail = True
    with pytest.raises(KeysUnavailableError) as caught:
        iap_auth(keys).identify({IAP_HEADER: keys.sign(claims())}, None)
    assert caught.value.status == 503


@pytest.mark.parametrize(
    "document",
    [
        {},
        [],
        {"k1": 5},
        {"k1": "not a key"},
        {"k1": pem(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())},
    ],
)
def test_a_key_set_without_p256_keys_refuses_everyone(keys, document):
    settings = iap_settings()
    auth = ReviewerAuth(
        settings, IapVerifier(settings.iap_audiences, fetch=lambda url: document, clock=Clock()), Clock()
    )
    with pytest.raises(KeysUnavailableError):
        auth.identify({IAP_HEADER: keys.sign(claims())}, None)


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ({"iss": "https://accounts.google.com"}, "issuer"),
        ({"iss": None}, "issuer"),
        ({"aud": "https://safesend-review-123456789.europe-west1.run.app"}, "audience"),
        ({"aud": [AUDIENCE]}, "audience"),
        ({"aud": "/projects/123456789/locations/europe-west1/services/other"}, "audience"),
        ({"exp": int(NOW) - 31, "iat": int(NOW) - 600}, "expired"),
        ({"iat": int(NOW) + 31, "exp": int(NOW) + 600}, "future"),
        ({"iat": int(NOW), "exp": int(NOW) + 3600}, "lifetime"),
        ({"exp": "1800000600"}, "malformed"),
        ({"iat": True}, "malformed"),
        ({"exp": None}, "malformed"),
        ({"email": None}, "no email"),
        ({"email": ["a@example.com"]}, "no email"),
        ({"email": "not-an-address"}, "no email"),
        ({"hd": 7}, "malformed hd"),
    ],
)
def test_claims_are_checked_with_their_types(keys, overrides, reason):
    with pytest.raises(ReviewerAuthError, match=reason):
        iap_auth(keys).identify({IAP_HEADER: keys.sign(claims(**overrides))}, None)


def test_skew_of_thirty_seconds_is_allowed(keys):
    auth = iap_auth(keys)
    auth.identify({IAP_HEADER: keys.sign(claims(exp=int(NOW) - 29, iat=int(NOW) - 600))}, None)
    auth.identify({IAP_HEADER: keys.sign(claims(iat=int(NOW) + 29, exp=int(NOW) + 600))}, None)


def test_only_es256_signatures_by_the_published_key_verify(keys):
    auth = iap_auth(keys)
    token = keys.sign(claims())
    header, payload, signature = token.split(".")
    tampered = b64(json.dumps(claims(email="boss@example.com")).encode())
    other_key = ec.generate_private_key(ec.SECP256R1())
    none_header = b64(json.dumps({"alg": "none", "kid": "k1"}).encode())
    hs_header = b64(json.dumps({"alg": "HS256", "kid": "k1"}).encode())
    nan_payload = b64(b'{"exp": NaN}')
    cases = {
        f"{header}.{tampered}.{signature}": "signature",
        keys.sign(claims(), key=other_key): "signature",
        f"{none_header}.{payload}.": "algorithm",
        f"{hs_header}.{payload}.{signature}": "algorithm",
        f"{header}.{payload}.{signature[:-4]}": "signature",
        f"{header}.{payload}": "malformed",
        "x" * 9000: "malformed",
        "a.b.c": "malformed",
        f"{b64(b'[1]')}.{payload}.{signature}": "malformed",
        f"{header}.{nan_payload}.{signature}": "malformed",
        f"{header}.{payload}.!!!": "malformed",
    }
    for token_text, reason in cases.items():
        with pytest.raises(ReviewerAuthError, match=reason) as caught:
            auth.identify({IAP_HEADER: token_text}, None)
        message = str(caught.value)
        for part in token_text.split("."):
            if len(part) > 8:
                assert part not in message  # never an echo of the token


def test_the_unsigned_identity_headers_are_never_read(keys):
    with pytest.raises(ReviewerAuthError, match="no IAP assertion"):
        iap_auth(keys).identify(
            {
                "x-goog-authenticated-user-email": "accounts.google.com:ann.lee@example.com",
                "x-goog-authenticated-user-id": "accounts.google.com:1",
            },
            None,
        )


def test_a_verifier_surprise_is_a_refusal_not_a_500(keys):
    settings = iap_settings()
    verifier = IapVerifier(settings.iap_audiences, fetch=keys.fetch, clock=Clock())
    verifier._check_claims = lambda claims: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[method-assign]
    with pytest.raises(ReviewerAuthError, match="unverifiable"):
        ReviewerAuth(settings, verifier, Clock()).identify({IAP_HEADER: keys.sign(claims())}, None)


# ----------------------------------------------------------------------------- the allowlist
def test_the_allowlist_is_the_second_gate(keys):
    auth = iap_auth(keys)
    with pytest.raises(ReviewerForbiddenError) as caught:
        auth.identify({IAP_HEADER: keys.sign(claims(email="eve@example.com"))}, None)
    assert caught.value.status == 403 and caught.value.email == "eve@example.com"


def test_a_domain_entry_needs_the_signed_hosted_domain(keys):
    auth = iap_auth(keys, allowed_emails=frozenset(), allowed_domains=frozenset({"example.com"}))
    assert auth.identify({IAP_HEADER: keys.sign(claims(email="Bob@Example.com"))}, None).email == "bob@example.com"
    for bad in (
        claims(email="bob@example.com", hd=None),  # a consumer account with a look-alike address
        claims(email="bob@example.com", hd="evil.example"),
        claims(email="bob@sub.example.com", hd="sub.example.com"),
    ):
        with pytest.raises(ReviewerForbiddenError):
            auth.identify({IAP_HEADER: keys.sign(bad)}, None)


# ----------------------------------------------------------------------------- settings
def env(**values: str) -> dict[str, str]:
    return {f"SAFESEND_REVIEW_{k.upper()}": v for k, v in values.items()}


def test_settings_from_env_for_a_deployment():
    settings = ReviewerSettings.from_env(
        env(
            iap_audience=f" {AUDIENCE} ,/projects/1/global/backendServices/42",
            allowed_emails="Ann.Lee@example.com, bob@example.com",
            allowed_domains="@Example.org",
            csrf_secret=SECRET,
            console_url=PUBLIC_URL + "/",
            iap_keys_url="http://127.0.0.1:9/keys",
        )
    )
    assert settings.iap_audiences == {AUDIENCE, "/projects/1/global/backendServices/42"}
    assert settings.allowed_emails == {"ann.lee@example.com", "bob@example.com"}
    assert settings.allowed_domains == {"example.org"}
    assert settings.console_url == PUBLIC_URL and settings.iap_keys_url == "http://127.0.0.1:9/keys"
    assert not settings.dev_mode


def test_settings_for_a_local_stack():
    settings = ReviewerSettings.from_env(
        env(dev_identity="dev@localhost", csrf_secret=SECRET, console_url="http://127.0.0.1:8080")
    )
    assert settings.dev_mode and settings.dev_identity == "dev@localhost"


@pytest.mark.parametrize(
    "values, problem",
    [
        ({}, "CSRF_SECRET"),
        ({"csrf_secret": "short"}, "CSRF_SECRET"),
        ({"csrf_secret": SECRET}, "no reviewer sign-in"),
        ({"csrf_secret": SECRET, "dev_identity": "dev@localhost", "iap_audience": AUDIENCE}, "both set"),
        ({"csrf_secret": SECRET, "dev_identity": "ann@example.com"}, "localhost"),
        ({"csrf_secret": SECRET, "dev_identity": "dev@localhost.example.com"}, "localhost"),
        (
            {
                "csrf_secret": SECRET,
                "iap_audience": PUBLIC_URL,
                "allowed_emails": "a@example.com",
                "console_url": PUBLIC_URL,
            },
            "not an IAP audience",
        ),
        ({"csrf_secret": SECRET, "iap_audience": AUDIENCE, "console_url": PUBLIC_URL}, "allowlist"),
        (
            {"csrf_secret": SECRET, "iap_audience": AUDIENCE, "allowed_emails": "nobody", "console_url": PUBLIC_URL},
            "not an e-mail",
        ),
        (
            {
                "csrf_secret": SECRET,
                "iap_audience": AUDIENCE,
                "allowed_domains": "exa mple.com",
                "console_url": PUBLIC_URL,
            },
            "not a domain",
        ),
        ({"csrf_secret": SECRET, "iap_audience": AUDIENCE, "allowed_emails": "a@example.com"}, "CONSOLE_URL"),
        (
            {
                "csrf_secret": SECRET,
                "iap_audience": AUDIENCE,
                "allowed_emails": "a@example.com",
                "console_url": "http://review.example.com",
            },
            "CONSOLE_URL",
        ),
        ({"csrf_secret": SECRET, "dev_identity": "dev@localhost", "console_url": "ftp://x"}, "CONSOLE_URL"),
    ],
)
def test_settings_fail_closed(values, problem):
    with pytest.raises(ConfigurationError, match=problem):
        ReviewerSettings.from_env(env(**values))


def test_the_development_identity_is_refused_on_cloud_run():
    with pytest.raises(ConfigurationError, match="Cloud Run"):
        ReviewerSettings.from_env({**env(dev_identity="dev@localhost", csrf_secret=SECRET), "K_SERVICE": "review"})


@pytest.mark.parametrize(
    "address, accepted",
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("127.8.9.10", True),
        ("10.0.0.7", False),
        ("203.0.113.9", False),
        (None, False),
        ("", False),
        ("not-an-ip", False),
    ],
)
def test_the_development_identity_only_answers_loopback(address, accepted):
    auth = ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET.encode()))
    if accepted:
        assert auth.identify({"Host": "127.0.0.1:8080"}, address) == Reviewer("dev@localhost", "dev")
        assert auth.identify({"Host": "127.0.0.1:8080"}, address).is_dev
    else:
        with pytest.raises(ReviewerAuthError, match="loopback"):
            auth.identify({}, address)


# ----------------------------------------------------------------------------- CSRF
ANN = Reviewer("ann.lee@example.com", "iap")
REVIEW_ID = "0" * 32 + ":1"


def csrf_auth(clock: Clock | None = None, console_url: str | None = PUBLIC_URL) -> ReviewerAuth:
    return ReviewerAuth(
        ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET.encode(), console_url=console_url),
        clock=clock or Clock(),
    )


def test_a_token_is_bound_to_the_reviewer_and_the_review_id():
    auth = csrf_auth()
    token = auth.csrf_token(ANN, REVIEW_ID)
    auth.check_token(ANN, REVIEW_ID, token)
    for reviewer, review_id in (
        (Reviewer("bob@example.com", "iap"), REVIEW_ID),
        (ANN, "0" * 32 + ":2"),
        (ANN, "1" * 32 + ":1"),
    ):
        with pytest.raises(CsrfError, match="does not match"):
            auth.check_token(reviewer, review_id, token)


def test_a_token_made_with_another_secret_does_not_verify():
    other = ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=b"t" * 40), clock=Clock())
    with pytest.raises(CsrfError, match="does not match"):
        csrf_auth().check_token(ANN, REVIEW_ID, other.csrf_token(ANN, REVIEW_ID))


def test_a_token_expires_and_cannot_come_from_the_future():
    clock = Clock()
    auth = csrf_auth(clock)
    token = auth.csrf_token(ANN, REVIEW_ID)
    clock.now += CSRF_TTL_S + 1
    with pytest.raises(CsrfError, match="too old"):
        auth.check_token(ANN, REVIEW_ID, token)
    clock.now = NOW - 120
    with pytest.raises(CsrfError, match="too old"):
        auth.check_token(ANN, REVIEW_ID, token)


@pytest.mark.parametrize(
    "token",
    [None, "", "v1", "v2.1.abc", "v1.x.abc", "v1.1800000000.", "v1.-5.abc", "v1.1800000000.é", "v1.99999999999999.abc"],
)
def test_malformed_tokens_are_refused(token):
    with pytest.raises(CsrfError):
        csrf_auth().check_token(ANN, REVIEW_ID, token)


@pytest.mark.parametrize(
    "headers, ok",
    [
        ({"Origin": PUBLIC_URL}, True),
        ({"Origin": PUBLIC_URL.upper() + "/"}, True),
        ({"Origin": PUBLIC_URL, "Sec-Fetch-Site": "same-origin"}, True),
        ({"Referer": PUBLIC_URL + "/review/items/abc"}, True),
        ({"Origin": "https://evil.example"}, False),
        ({"Origin": "null"}, False),
        ({"Origin": PUBLIC_URL, "Sec-Fetch-Site": "cross-site"}, False),
        ({"Origin": PUBLIC_URL, "Sec-Fetch-Site": "same-site"}, False),
        ({"Referer": "https://evil.example/review/items/abc"}, False),
        ({"Referer": PUBLIC_URL + ".evil.example/x"}, False),
        ({"Origin": "http://safesend-review-123456789.europe-west1.run.app"}, False),  # scheme matters
        ({}, False),
    ],
)
def test_a_decision_must_come_from_our_own_origin(headers, ok):
    auth = csrf_auth()
    if ok:
        auth.check_origin(headers, "ignored.example")
    else:
        with pytest.raises(CsrfError):
            auth.check_origin(headers, "safesend-review-123456789.europe-west1.run.app")


def test_without_a_console_url_the_request_host_is_our_origin():
    auth = csrf_auth(console_url=None)
    auth.check_origin({"Origin": "http://127.0.0.1:8080"}, "127.0.0.1:8080")
    with pytest.raises(CsrfError):
        auth.check_origin({"Origin": "http://127.0.0.1:9999"}, "127.0.0.1:8080")
    with pytest.raises(CsrfError):
        auth.check_origin({"Origin": "http://127.0.0.1:8080"}, None)


def test_es256_keys_skips_what_is_not_a_p256_key():
    keys = Keys(("a", "b"))
    document: dict[str, Any] = keys.document()
    document["p384"] = pem(ec.generate_private_key(ec.SECP384R1()).public_key())
    document["rsa"] = pem(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
    document["number"] = 5
    document["garbage"] = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    assert set(es256_keys(document)) == {"a", "b"}


def test_the_signature_and_audience_are_google_auths_verify_token_on_iaps_keys(keys, monkeypatch):
    from google.oauth2 import id_token

    from safesend.entrypoints import reviewer_auth

    assert reviewer_auth.IAP_KEYS_URL == "https://www.gstatic.com/iap/verify/public_key"
    calls: list[dict[str, Any]] = []
    real = id_token.verify_token

    def recording(token: str, request: Any, **kwargs: Any) -> Any:
        served = request(kwargs["certs_url"], method="GET")  # what google-auth reads: the cached keys
        calls.append({**kwargs, "status": served.status, "keys": json.loads(served.data)})
        return real(token, request, **kwargs)

    monkeypatch.setattr(id_token, "verify_token", recording)
    auth = iap_auth(keys)
    auth.identify({IAP_HEADER: keys.sign(claims())}, None)
    auth.identify({IAP_HEADER: keys.sign(claims())}, None)
    assert len(calls) == 2 and keys.fetches == 1  # google-auth reads our cache, not the network
    assert calls[0]["certs_url"] == reviewer_auth.IAP_KEYS_URL and calls[0]["audience"] == [AUDIENCE]
    assert calls[0]["status"] == 200 and calls[0]["keys"] == keys.document()
    monkeypatch.setattr(id_token, "verify_token", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad")))
    with pytest.raises(ReviewerAuthError, match="signature"):  # google-auth's refusal is ours
        auth.identify({IAP_HEADER: keys.sign(claims())}, None)


def test_time_is_real_time_by_default():
    auth = ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET.encode()))
    token = auth.csrf_token(ANN, REVIEW_ID)
    assert abs(int(token.split(".")[1]) - time.time()) < 5
