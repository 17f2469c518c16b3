"""access_tokens: the metadata-server token source (served here by a loopback HTTP server speaking the
documented answer), its cache and refresh, and which source each environment gets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from safesend.adapters.access_tokens import (
    METADATA_TOKEN_PATH,
    REFRESH_MARGIN_S,
    AccessTokenError,
    ApplicationDefaultTokens,
    EmulatorToken,
    MetadataServerTokens,
    default_tokens,
)
from tests.loopback_http import LoopbackHttpServer, QuietHandler


class MetadataServer:
    """Answers the token path with a new token each time; records the requests it got."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.body: bytes | None = None
        self.lifetime_s = 3599
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
                outer.requests.append({"path": self.path, "flavor": self.headers.get("Metadata-Flavor")})
                body = (
                    outer.body
                    or json.dumps(
                        {
                            "access_token": f"tok-{len(outer.requests)}",
                            "expires_in": outer.lifetime_s,
                            "token_type": "Bearer",
                        }
                    ).encode()
                )
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.http = LoopbackHttpServer(Handler, "metadata-server")
        self.host = self.http.host


@pytest.fixture
def metadata() -> Iterator[MetadataServer]:
    server = MetadataServer()
    with server.http:
        yield server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_token_is_fetched_once_with_the_metadata_header_and_cached(metadata: MetadataServer) -> None:
    tokens = MetadataServerTokens(host=metadata.host, clock=Clock())
    assert tokens.authorization() == "Bearer tok-1"
    assert tokens.authorization() == "Bearer tok-1"
    assert metadata.requests == [{"path": METADATA_TOKEN_PATH, "flavor": "Google"}]


def test_a_token_near_its_expiry_is_replaced_before_use(metadata: MetadataServer) -> None:
    clock = Clock()
    tokens = MetadataServerTokens(host=metadata.host, clock=clock)
    assert tokens.authorization() == "Bearer tok-1"
    clock.now += metadata.lifetime_s - REFRESH_MARGIN_S - 1
    assert tokens.authorization() == "Bearer tok-1"
    clock.now += 2
    assert tokens.authorization() == "Bearer tok-2"


def test_invalidate_forces_a_new_token(metadata: MetadataServer) -> None:
    tokens = MetadataServerTokens(host=metadata.host, clock=Clock())
    tokens.authorization()
    tokens.invalidate()
    assert tokens.authorization() == "Bearer tok-2"


def test_concurrent_first_callers_fetch_one_token(metadata: MetadataServer) -> None:
    tokens = MetadataServerTokens(host=metadata.host)
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(tokens.authorization())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert seen == ["Bearer tok-1"] * 8 and len(metadata.requests) == 1


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [(404, None, "answered 404"), (200, b"<html>", "documented JSON"), (200, b'{"token": "x"}', "documented JSON")],
)
def test_a_bad_answer_is_an_access_token_error(
    metadata: MetadataServer, status: int, body: bytes | None, expected: str
) -> None:
    metadata.status, metadata.body = status, body
    with pytest.raises(AccessTokenError, match=expected):
        MetadataServerTokens(host=metadata.host).authorization()


def test_an_unreachable_metadata_server_is_an_access_token_error() -> None:
    with pytest.raises(AccessTokenError, match="unreachable"):
        MetadataServerTokens(host="127.0.0.1:9", timeout_s=1.0).authorization()


def test_gce_metadata_host_overrides_the_default_host(
    metadata: MetadataServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)  # the variable google-auth honours too
    assert MetadataServerTokens().authorization() == "Bearer tok-1"


@pytest.mark.parametrize(
    ("emulator", "environ", "kind"),
    [
        (True, {"K_SERVICE": "send"}, EmulatorToken),
        (False, {"K_SERVICE": "send"}, MetadataServerTokens),  # Cloud Run, Cloud Functions gen2
        (False, {"K_SERVICE": "send", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}, ApplicationDefaultTokens),
        (False, {}, ApplicationDefaultTokens),  # a laptop: gcloud auth application-default login
    ],
)
def test_each_environment_gets_the_cheapest_correct_source(emulator: bool, environ: dict[str, str], kind: type) -> None:
    assert isinstance(default_tokens(emulator=emulator, environ=environ), kind)


def test_the_emulator_token_is_the_rules_bypassing_owner() -> None:
    assert EmulatorToken().authorization() == "Bearer owner"
    assert EmulatorToken().quota_project() is None


def test_a_service_account_token_bills_its_own_project(metadata: MetadataServer) -> None:
    assert MetadataServerTokens(host=metadata.host).quota_project() is None


class StubCredentials:
    """google-auth's credential shape: refresh(request) sets token and a naive-UTC expiry."""

    def __init__(self, lifetime_s: float) -> None:
        self.lifetime_s = lifetime_s
        self.quota_project_id = "billing-project"  # set by gcloud's application-default login
        self.token: str | None = None
        self.expiry: Any = None
        self.refreshes = 0

    def refresh(self, request: Any) -> None:
        from datetime import UTC, datetime, timedelta

        self.refreshes += 1
        self.token = f"adc-{self.refreshes}"
        self.expiry = (datetime.now(UTC) + timedelta(seconds=self.lifetime_s)).replace(tzinfo=None)


def test_application_default_credentials_are_refreshed_by_their_naive_utc_expiry() -> None:
    clock = Clock()
    tokens = ApplicationDefaultTokens(clock=clock)
    tokens._credentials = StubCredentials(lifetime_s=600)  # as google.auth.default() would have returned
    assert tokens.authorization() == "Bearer adc-1"
    assert tokens.quota_project() == "billing-project"
    clock.now += 600 - REFRESH_MARGIN_S - 30  # whatever the machine's local time zone, not yet due
    assert tokens.authorization() == "Bearer adc-1"
    clock.now += 60
    assert tokens.authorization() == "Bearer adc-2"
