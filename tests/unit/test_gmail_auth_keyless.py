"""Keyless domain-wide delegation (adapters/gmail_auth.py: google-auth's impersonated credentials with
`subject`) over a fake transport: the JWT claims, the signJwt call, the token exchange, every failure
as a RefreshError that names the step, and one try per request (no sleep between retries)."""

from __future__ import annotations

import base64
import datetime
import json
import urllib.parse
from dataclasses import dataclass

import pytest
from google.auth import credentials as auth_credentials
from google.auth import impersonated_credentials
from google.auth.exceptions import RefreshError

from safesend.adapters import gmail_auth
from safesend.adapters.gmail_auth import IAM_SCOPE, OAUTH_TOKEN_URI, DelegatedCredentials, load_gmail_credentials
from safesend.adapters.gmail_mailer import GMAIL_SCOPES
from safesend.core.errors import ConfigurationError

SIGNER = "safesend-fn-send@proj.iam.gserviceaccount.com"
USER = "support@example.com"


@dataclass
class Answer:
    status: int
    data: bytes


class FakeSource:
    """Stands in for the function's own credentials (the metadata server's)."""

    def __init__(self, email: str | None = SIGNER, universe: str = "googleapis.com"):
        self.service_account_email = "default"
        self._email = email
        self.token = None
        self.refreshes = 0
        self.universe_domain = universe

    @property
    def valid(self) -> bool:
        return self.token is not None

    @property
    def token_state(self) -> auth_credentials.TokenState:
        return auth_credentials.TokenState.FRESH if self.token else auth_credentials.TokenState.INVALID

    def refresh(self, request) -> None:
        self.refreshes += 1
        self.token = f"source-token-{self.refreshes}"
        if self._email:
            self.service_account_email = self._email

    def apply(self, headers: dict) -> None:
        headers["authorization"] = f"Bearer {self.token}"


def b64(part: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")


class FakeGoogle:
    def __init__(
        self,
        sign_status: int = 200,
        token_status: int = 200,
        token_error: str | None = None,
        sign_body: bytes | None = None,
    ):
        self.calls: list[dict] = []
        self.sign_status, self.token_status, self.token_error, self.sign_body = (
            sign_status,
            token_status,
            token_error,
            sign_body,
        )

    def __call__(self, url, method="GET", body=None, headers=None, **kwargs):
        self.calls.append({"url": url, "method": method, "body": body, "headers": dict(headers or {})})
        if url.endswith(":signJwt"):
            if self.sign_status != 200:
                return Answer(
                    self.sign_status,
                    json.dumps(
                        {"error": {"code": self.sign_status, "status": "PERMISSION_DENIED", "message": "nope"}}
                    ).encode(),
                )
            if self.sign_body is not None:
                return Answer(200, self.sign_body)
            payload = json.loads(json.loads(body)["payload"])
            return Answer(
                200, json.dumps({"keyId": "k", "signedJwt": f"{b64({'alg': 'RS256'})}.{b64(payload)}.sig"}).encode()
            )
        if self.token_status != 200:
            return Answer(self.token_status, json.dumps({"error": self.token_error or "invalid_grant"}).encode())
        return Answer(200, json.dumps({"access_token": "delegated-token", "expires_in": 3600}).encode())


def credentials(**kwargs) -> DelegatedCredentials:
    return DelegatedCredentials(kwargs.pop("source", FakeSource()), USER, GMAIL_SCOPES, **kwargs)


def claims_of(call: dict) -> dict:
    return json.loads(json.loads(call["body"])["payload"])


def test_refresh_signs_the_delegation_claims_as_the_functions_own_account_and_exchanges_them():
    google = FakeGoogle()
    creds = credentials()
    assert not creds.valid and creds.signer_email is None  # the metadata server names it on first refresh
    creds.refresh(google)
    sign, exchange = google.calls
    assert sign["url"] == f"https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{SIGNER}:signJwt"
    assert sign["headers"]["authorization"] == "Bearer source-token-1"
    claims = claims_of(sign)
    assert claims["iss"] == SIGNER and claims["sub"] == USER and claims["aud"] == OAUTH_TOKEN_URI
    assert claims["scope"] == " ".join(GMAIL_SCOPES)
    assert claims["exp"] - claims["iat"] == 3600
    assert exchange["url"] == OAUTH_TOKEN_URI
    form = urllib.parse.parse_qs(exchange["body"].decode())
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assert form["assertion"][0].count(".") == 2
    assert creds.token == "delegated-token" and creds.valid and creds.signer_email == SIGNER
    assert creds.expiry > datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def test_a_named_signer_is_used_as_given():
    google = FakeGoogle()
    credentials(signer_email="gmail-signer@proj.iam.gserviceaccount.com").refresh(google)
    assert ":signJwt" in google.calls[0]["url"] and "gmail-signer@proj" in google.calls[0]["url"]
    assert claims_of(google.calls[0])["iss"] == "gmail-signer@proj.iam.gserviceaccount.com"


def test_the_scopes_are_exactly_the_two_gmail_scopes():
    assert GMAIL_SCOPES == (
        "https://www.googleapis.com/auth/gmail.send",
        "https://www.googleapis.com/auth/gmail.readonly",
    )


def test_missing_token_creator_is_a_refresh_error_that_says_so():
    with pytest.raises(RefreshError) as error:
        credentials().refresh(FakeGoogle(sign_status=403))
    text = str(error.value)
    assert "signJwt" in text and "403" in text and "PERMISSION_DENIED" in text and "serviceAccountTokenCreator" in text
    assert not error.value.retryable


def test_admin_console_not_authorised_is_a_refresh_error_with_a_hint():
    with pytest.raises(RefreshError) as error:
        credentials().refresh(FakeGoogle(token_status=401, token_error="unauthorized_client"))
    assert "unauthorized_client" in str(error.value) and "Admin console" in str(error.value)


def test_server_errors_are_retryable_and_nothing_secret_is_in_the_message():
    with pytest.raises(RefreshError) as error:
        credentials().refresh(FakeGoogle(sign_status=503))
    assert error.value.retryable
    with pytest.raises(RefreshError) as error:
        credentials().refresh(FakeGoogle(token_status=500, token_error="backend_error"))
    assert error.value.retryable and "source-token" not in str(error.value)


@pytest.mark.parametrize("body", [b"not json", b"{}", json.dumps({"signedJwt": "no-dots"}).encode()])
def test_a_malformed_sign_answer_is_a_refresh_error(body):
    with pytest.raises(RefreshError):
        credentials().refresh(FakeGoogle(sign_body=body))


def test_source_without_an_email_cannot_sign():
    with pytest.raises(RefreshError, match="which service account"):
        credentials(source=FakeSource(email=None)).refresh(FakeGoogle())


def test_other_universes_are_refused():
    with pytest.raises(RefreshError, match="universe"):
        credentials(source=FakeSource(universe="example-cloud.com")).refresh(FakeGoogle())


def test_a_transport_that_raises_on_errors_keeps_its_retryable_flag():
    def failing(url, **kwargs):
        raise RefreshError("token endpoint answered HTTP 503", retryable=True)

    with pytest.raises(RefreshError) as error:
        credentials().refresh(failing)
    assert error.value.retryable and str(error.value.args[0]).startswith("IAM signJwt: ")


def test_delegated_user_without_a_credential_is_keyless_with_the_runtime_account(monkeypatch):
    seen = {}

    def default(scopes):
        seen["scopes"] = scopes
        return FakeSource(), "proj"

    monkeypatch.setattr(gmail_auth.google.auth, "default", default)
    creds = load_gmail_credentials(None, None, USER)
    assert isinstance(creds, DelegatedCredentials)
    assert seen["scopes"] == [IAM_SCOPE] and creds.subject == USER and creds.scopes == GMAIL_SCOPES


def test_no_delegation_and_no_credential_is_plain_adc_with_the_gmail_scopes(monkeypatch):
    seen = {}
    monkeypatch.setattr(gmail_auth.google.auth, "default", lambda scopes: (seen.setdefault("s", scopes), "p"))
    load_gmail_credentials(None, None, None)
    assert seen["s"] == list(GMAIL_SCOPES)


def test_delegation_needs_a_mailbox():
    with pytest.raises(ConfigurationError):
        DelegatedCredentials(FakeSource(), "not-a-mailbox", GMAIL_SCOPES)


def test_a_delegated_user_with_a_one_mailbox_token_is_refused():
    with pytest.raises(ConfigurationError, match="not both"):
        load_gmail_credentials(json.dumps({"type": "authorized_user"}), None, USER)


def test_it_is_google_auths_impersonated_credentials_with_the_mailbox_as_subject():
    creds = credentials(signer_email=SIGNER)
    assert isinstance(creds, impersonated_credentials.Credentials)
    assert creds._subject == USER and creds._target_principal == SIGNER  # google-auth's own fields
    assert list(creds._target_scopes) == list(GMAIL_SCOPES)


@pytest.mark.parametrize(("sign_status", "token_status"), [(503, 200), (200, 503), (200, 429), (500, 200)])
def test_a_failing_step_is_one_request_and_never_a_sleep(monkeypatch, sign_status, token_status):
    """google-auth retries the token exchange after sleeping ~1 s, then ~2 s, outside any deadline;
    inside a send, the caller's later attempt is the retry instead."""
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    google = FakeGoogle(sign_status=sign_status, token_status=token_status, token_error="backend_error")
    with pytest.raises(RefreshError) as error:
        credentials().refresh(google)
    assert error.value.retryable and slept == []
    assert len(google.calls) == (1 if sign_status != 200 else 2)
