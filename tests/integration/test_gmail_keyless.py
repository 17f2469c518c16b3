"""Keyless domain-wide delegation end to end, on loopback only: google-auth's real Compute Engine
credentials against a fake metadata server (the function's own identity), a fake IAM Credentials
`signJwt` that signs with an RSA key of its own and only for the caller itself (token creator on
itself), a fake OAuth token endpoint that verifies that signature and the claims like Google does
(and refuses scopes the "Admin console" did not authorise), and GmailMailer sending through a
recording proxy in front of the Gmail simulator. No request may leave 127.0.0.1."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from google.auth.compute_engine import _metadata
from google.auth.compute_engine import credentials as gce

from safesend.adapters.gmail_auth import IAM_SIGN_JWT_URL, OAUTH_TOKEN_URI, load_gmail_credentials
from safesend.adapters.gmail_mailer import GMAIL_SCOPES, GmailMailer
from safesend.core.model import Accepted, Bucket, Failure
from tests.integration.test_gmail_mailer import MESSAGE_ID, RAW
from tests.loopback_http import LoopbackHttpServer, QuietHandler

pytestmark = pytest.mark.integration

OWN_ACCOUNT = "safesend-fn-send@proj-1.iam.gserviceaccount.com"
MAILBOX = "support@example.com"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FakeGoogle:
    """Metadata server + iamcredentials signJwt + oauth2 token endpoint, one loopback server."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.token_creator_on_self = True
        self.authorised_scopes = set(GMAIL_SCOPES)  # the Admin console's domain-wide delegation entry
        self.metadata_tokens: list[str] = []
        self.metadata_scopes: list[str] = []
        self.sign_calls = 0
        self.exchanges: list[dict] = []
        self.issued: list[str] = []
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
                outer.metadata(self)

            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith(":signJwt"):
                    outer.sign_jwt(self, body)
                elif self.path == "/token":
                    outer.token(self, body)
                else:
                    self.send_error(404)

        self.http = LoopbackHttpServer(Handler, "fake-google")
        self.host = self.http.host

    @staticmethod
    def answer(
        handler: BaseHTTPRequestHandler, status: int, payload: Any, content_type: str = "application/json"
    ) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        if handler.path.startswith("/computeMetadata"):
            handler.send_header("Metadata-Flavor", "Google")
        handler.end_headers()
        handler.wfile.write(data)

    def metadata(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.headers.get("Metadata-Flavor") != "Google":
            return self.answer(handler, 403, {"error": "missing Metadata-Flavor"})
        path, _, query = handler.path.partition("?")
        if path == "/computeMetadata/v1/instance/service-accounts/default/":
            return self.answer(
                handler,
                200,
                {
                    "email": OWN_ACCOUNT,
                    "aliases": ["default"],
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                },
            )
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            token = f"mds-token-{len(self.metadata_tokens) + 1}"
            self.metadata_tokens.append(token)
            self.metadata_scopes.append(urllib.parse.parse_qs(query).get("scopes", [""])[0])
            return self.answer(handler, 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
        if path == "/computeMetadata/v1/universe/universe-domain":
            return self.answer(handler, 200, b"googleapis.com", "application/text")
        return self.answer(handler, 404, {"error": "not found"})

    def sign_jwt(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        self.sign_calls += 1
        caller = handler.headers.get("Authorization", "").removeprefix("Bearer ")
        principal = urllib.parse.unquote(handler.path.split("/serviceAccounts/", 1)[1].rsplit(":signJwt", 1)[0])
        if caller not in self.metadata_tokens:
            return self.answer(handler, 401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}})
        if principal != OWN_ACCOUNT or not self.token_creator_on_self:
            return self.answer(
                handler,
                403,
                {
                    "error": {
                        "code": 403,
                        "status": "PERMISSION_DENIED",
                        "message": "iam.serviceAccounts.signJwt denied",
                    }
                },
            )
        payload = json.loads(body)["payload"]
        claims = json.loads(payload)
        if claims.get("exp", 0) > time.time() + 12 * 3600:
            return self.answer(handler, 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT"}})
        signing_input = (
            f"{b64url(json.dumps({'alg': 'RS256', 'typ': 'JWT', 'kid': 'k1'}).encode())}.{b64url(payload.encode())}"
        )
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return self.answer(handler, 200, {"keyId": "k1", "signedJwt": f"{signing_input}.{b64url(signature)}"})

    def token(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        form = urllib.parse.parse_qs(body.decode())
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            return self.answer(handler, 400, {"error": "unsupported_grant_type"})
        header, payload, signature = form["assertion"][0].split(".")
        try:
            self.key.public_key().verify(
                unb64url(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except Exception:  # noqa: BLE001 - any verification failure is Google's invalid_grant
            return self.answer(handler, 400, {"error": "invalid_grant"})
        claims = json.loads(unb64url(payload))
        self.exchanges.append(claims)
        now = time.time()
        if (
            claims["aud"] != OAUTH_TOKEN_URI  # Google checks its own token URL
            or claims["iss"] != OWN_ACCOUNT
            or not claims["iat"] - 60 <= now < claims["exp"]
            or claims["exp"] - claims["iat"] > 3600
        ):
            return self.answer(handler, 400, {"error": "invalid_grant"})
        if not set(claims["scope"].split()) <= self.authorised_scopes:
            return self.answer(handler, 401, {"error": "unauthorized_client"})
        token = f"delegated-{claims['sub']}-{len(self.issued) + 1}"
        self.issued.append(token)
        return self.answer(handler, 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"})

    def stop(self) -> None:
        self.http.stop()


class RecordingProxy:
    """Forwards to the Gmail simulator and records each request's Authorization header."""

    def __init__(self, target_url: str) -> None:
        self.authorizations: list[str | None] = []
        target = urllib.parse.urlparse(target_url)
        outer = self

        class Handler(QuietHandler):
            def forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.authorizations.append(self.headers.get("Authorization"))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = forward  # noqa: N815

        self.http = LoopbackHttpServer(Handler, "recording-proxy")
        self.url = self.http.url

    def stop(self) -> None:
        self.http.stop()


@pytest.fixture
def loopback_only(monkeypatch) -> None:
    """Any name resolution other than loopback fails the test: nothing reaches real Google."""
    real = socket.getaddrinfo

    def guarded(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", b"127.0.0.1"):
            raise AssertionError(f"test tried to reach {host!r}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


@pytest.fixture
def google(monkeypatch, loopback_only) -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", fake.host)
    yield fake
    fake.stop()


@pytest.fixture
def gmail(sim) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(sim.url)
    yield proxy
    proxy.stop()


def keyless(google: FakeGoogle):
    # What runtime.py builds on Cloud Run: no credentials JSON, a delegated user, ADC of the function.
    source = gce.Credentials(scopes=["https://www.googleapis.com/auth/iam"])
    # google-auth calls Google's real URLs; the test sends them to the loopback fake.
    redirect = {
        IAM_SIGN_JWT_URL.split("/v1/")[0]: google.http.url,
        OAUTH_TOKEN_URI.rsplit("/", 1)[0]: google.http.url,
    }
    return load_gmail_credentials(None, None, MAILBOX, source_credentials=source, redirect=redirect)


def copies(sim) -> int:
    return sum(1 for e in sim.effects() if e["message_id"] == MESSAGE_ID)


def test_the_function_signs_for_itself_and_gmail_gets_the_mailboxs_token(google, gmail, sim):
    creds = keyless(google)
    mailer = GmailMailer(api_endpoint=gmail.url, credentials=creds)
    assert isinstance(mailer.send(RAW), Accepted)
    assert copies(sim) == 1
    [claims] = google.exchanges
    assert claims["iss"] == OWN_ACCOUNT and claims["sub"] == MAILBOX
    assert claims["scope"].split() == list(GMAIL_SCOPES)
    assert google.metadata_scopes == ["https://www.googleapis.com/auth/iam"]
    assert gmail.authorizations == [f"Bearer {google.issued[0]}"]
    # the next Gmail call (a mailbox search) reuses the token: no new signature, no new exchange
    mailer.find_by_message_id(MESSAGE_ID)
    assert google.sign_calls == 1 and len(google.exchanges) == 1
    assert gmail.authorizations[-1] == f"Bearer {google.issued[0]}"


def test_without_token_creator_on_itself_nothing_is_sent(google, gmail, sim):
    google.token_creator_on_self = False
    outcome = GmailMailer(api_endpoint=gmail.url, credentials=keyless(google)).send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code) == (Bucket.NOT_ACCEPTED, "auth_refresh")
    assert "signJwt" in outcome.detail and gmail.authorizations == [] and copies(sim) == 0


def test_without_the_admin_console_authorisation_nothing_is_sent(google, gmail, sim):
    google.authorised_scopes = {"https://www.googleapis.com/auth/gmail.send"}  # readonly missing
    outcome = GmailMailer(api_endpoint=gmail.url, credentials=keyless(google)).send(RAW)
    assert isinstance(outcome, Failure) and outcome.bucket == Bucket.NOT_ACCEPTED
    assert gmail.authorizations == [] and copies(sim) == 0 and len(google.exchanges) == 1


def test_the_signed_jwt_is_rejected_if_tampered_with(google):
    """The fake token endpoint really verifies: a JWT not signed by signJwt's key is refused."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    header = b64url(json.dumps({"alg": "RS256"}).encode())
    payload = b64url(
        json.dumps(
            {
                "iss": OWN_ACCOUNT,
                "sub": MAILBOX,
                "aud": OAUTH_TOKEN_URI,
                "scope": " ".join(GMAIL_SCOPES),
                "iat": int(time.time()),
                "exp": int(time.time()) + 600,
            }
        ).encode()
    )
    signature = b64url(private.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256()))
    conn = http.client.HTTPConnection(google.host.split(":")[0], int(google.host.split(":")[1]), timeout=5)
    conn.request(
        "POST",
        "/token",
        body=urllib.parse.urlencode(
            {
                "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": f"{header}.{payload}.{signature}",
            }
        ),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    response = conn.getresponse()
    assert response.status == 400 and json.loads(response.read())["error"] == "invalid_grant"
