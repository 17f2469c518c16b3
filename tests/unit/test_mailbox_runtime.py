"""Runtime wiring of issue 24: the mailbox directory and the ledger matching SAFESEND_STORE, built
once per instance; per-mailbox Gmail clients built lazily, a token read from Secret Manager; each
mailbox's paced Cloud Tasks queue for a queued job's turn."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from safesend.adapters.cloud_tasks import CloudTasksScheduler
from safesend.adapters.firestore_ledger import FirestoreMailboxLedger
from safesend.adapters.secret_manager import read_secret
from safesend.bootstrap import runtime
from safesend.config import Settings
from safesend.core.errors import ConfigurationError
from safesend.core.mailboxes import Mailbox
from tests.loopback_http import LoopbackHttpServer, QuietHandler

MAILBOXES = {
    "defaults": {"limits": "workspace"},
    "mailboxes": {
        "shop": {"address": "shop@example.com", "delegated_user": "shop@example.com"},
        "news": {"address": "news@example.com", "token_secret": "gmail-token-news"},
    },
}


class StaticToken:
    def authorization(self) -> str:
        return "Bearer test-token"

    def invalidate(self) -> None:
        """Nothing cached."""

    def quota_project(self) -> str | None:
        return None


def test_the_runtime_builds_the_directory_and_a_firestore_ledger_once(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(project="p", mailboxes_json=json.dumps(MAILBOXES))
    senders = runtime.build_senders(settings, store=object(), default_mailer=lambda: None)  # type: ignore[arg-type,return-value]
    assert senders.directory.ids() == ["shop", "news"]
    assert isinstance(senders.ledger, FirestoreMailboxLedger)
    built: list[str] = []
    monkeypatch.setattr(runtime, "build_mailbox_mailer", lambda s, m: built.append(m.id) or object())
    shop = senders.directory.get("shop")
    senders._build_mailer = lambda mailbox: runtime.build_mailbox_mailer(settings, mailbox)
    assert senders.mailer(shop)._mailer is senders.mailer(shop)._mailer  # type: ignore[attr-defined]
    assert built == ["shop"]  # one client per mailbox and instance


def test_a_postgres_store_gets_its_ledger_on_the_same_pool() -> None:
    class Store:
        pool = object()

    settings = Settings(project="p", store="postgres", postgres_dsn="postgresql://x@localhost/db")
    ledger = runtime.build_ledger(settings, Store())  # type: ignore[arg-type]
    assert type(ledger).__name__ == "PostgresMailboxLedger" and ledger._pool is Store.pool  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError):
        runtime.build_ledger(settings, object())  # type: ignore[arg-type]


def test_a_mailbox_client_is_built_on_its_first_call_only(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(project="p", gmail_api_endpoint="http://127.0.0.1:9")
    mailbox = Mailbox("news", "news@example.com", user_id="news@example.com", token_secret="gmail-token-news")
    lazy = runtime.build_mailbox_mailer(settings, mailbox)
    assert isinstance(lazy, runtime.LazyMailer) and lazy._mailer is None
    built = lazy._get()
    assert built.user == "news@example.com"  # type: ignore[attr-defined]


def secret_server(answers: dict[str, tuple[int, bytes]], seen: list[dict[str, str]]) -> LoopbackHttpServer:
    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append({"path": self.path, "auth": self.headers.get("Authorization", "")})
            status, body = answers.get(self.path, (404, b"{}"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return LoopbackHttpServer(Handler)


def test_a_token_secret_is_read_from_secret_manager_by_name() -> None:
    token = json.dumps({"type": "authorized_user", "refresh_token": "r"})
    body = json.dumps({"name": "x", "payload": {"data": base64.b64encode(token.encode()).decode()}}).encode()
    seen: list[dict[str, str]] = []
    path = "/v1/projects/p/secrets/gmail-token-news/versions/latest:access"
    with secret_server({path: (200, body)}, seen) as server:
        value = read_secret("p", "gmail-token-news", tokens=StaticToken(), base_url=server.url)
        with pytest.raises(ConfigurationError) as info:
            read_secret("p", "missing", tokens=StaticToken(), base_url=server.url)
    assert value == token and seen[0] == {"path": path, "auth": "Bearer test-token"}
    assert "missing" in str(info.value) and "refresh_token" not in str(info.value)


def test_a_queued_jobs_turn_goes_on_its_mailboxs_own_queue() -> None:
    class Client:
        def __init__(self) -> None:
            self.parents: list[str] = []

        def create_task(self, parent: str, task: dict[str, Any], timeout: float) -> None:
            assert task["name"].startswith(parent + "/tasks/")
            self.parents.append(parent)

    client = Client()
    scheduler = CloudTasksScheduler(
        "projects/p/locations/r/queues/reconcile",
        "https://x/reconcile",
        client=client,
        mailbox_queue_prefix="projects/p/locations/r/queues/safesend-mbx-",
    )
    now = datetime.now(UTC)
    scheduler.schedule_check("job1", "a1-c0", now)
    scheduler.schedule_check("job1", "q0-1", now, mailbox="shop")
    assert client.parents == [
        "projects/p/locations/r/queues/reconcile",
        "projects/p/locations/r/queues/safesend-mbx-shop",
    ]
