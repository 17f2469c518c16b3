"""runtime.LazyMailer (the Gmail adapter built on its first call) and the cold-start cut it buys:
functions/main.py, and a function's runtime, import no Gmail client until a Gmail call needs it.

The cut is bench 7's (cold start): a status request, a replay or a sweep with nothing to check never
pays for googleapiclient, httplib2 or the credential lookup. These tests keep it from regressing
silently: a module-level import anywhere on the path would make the subprocess checks fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from safesend.bootstrap.runtime import LazyMailer
from safesend.core.errors import ConfigurationError, MailboxUnavailableError
from safesend.core.model import Accepted, Bucket, Failure
from tests.fakes import FakeClock, FakeMailbox, FakeMailer

ROOT = Path(__file__).resolve().parents[2]
RAW = b"Message-ID: <lazy-1@mail.example.com>\r\nFrom: a@example.com\r\nTo: b@example.com\r\n\r\nhi\r\n"
# What the first request of a function must not import (bench 7): the Gmail client and its HTTP
# library, and the Cloud Tasks client; nor, for a job store read, gRPC and google-cloud-firestore
# (the store speaks REST with the standard library) or google-auth's requests/cryptography stack.
GMAIL_MODULES = ("googleapiclient", "httplib2", "google.cloud.tasks", "google.cloud.tasks_v2")
NOT_AT_IMPORT = ("grpc", "msal", *GMAIL_MODULES)
NOT_FOR_A_STORE_READ = (
    "grpc",
    "google.cloud.firestore",
    "google.cloud.firestore_v1",
    "google.protobuf",
    "google.api_core",
    "requests",
    "cryptography",
    *GMAIL_MODULES,
)


def fake_mailer() -> FakeMailer:
    return FakeMailer(FakeMailbox(FakeClock(datetime(2026, 1, 1, tzinfo=UTC))))


class Builds:
    """A build function that counts its calls; fails the first `failures` of them."""

    def __init__(self, mailer: Any = None, failures: int = 0, delay_s: float = 0.0):
        self.mailer = mailer if mailer is not None else fake_mailer()
        self.failures = failures
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            self.calls += 1
            call = self.calls
        time.sleep(self.delay_s)  # a slow build: other first callers arrive while it runs
        if call <= self.failures:
            raise ConfigurationError("SAFESEND_GMAIL_CREDENTIALS: no such secret")
        return self.mailer


# ----------------------------------------------------------------------------------- construction
def test_construction_builds_nothing() -> None:
    build = Builds()
    LazyMailer(build)
    assert build.calls == 0


def test_first_call_builds_and_later_calls_reuse_it() -> None:
    build = Builds()
    lazy = LazyMailer(build)
    first = lazy.send(RAW)
    second = lazy.current_history_id()
    assert isinstance(first, Accepted)
    assert second == str(build.mailer.mailbox.history_id)
    assert build.calls == 1
    assert build.mailer.sends == 1


def test_every_read_is_delegated_to_the_built_mailer() -> None:
    build = Builds()
    lazy = LazyMailer(build)
    checkpoint = lazy.current_history_id()
    accepted = lazy.send(RAW)
    assert isinstance(accepted, Accepted)
    assert [h.gmail_id for h in lazy.find_by_message_id("<lazy-1@mail.example.com>")] == [accepted.gmail_id]
    assert lazy.stored_message_id(accepted.gmail_id) == "<lazy-1@mail.example.com>"
    page = lazy.added_since(checkpoint, max_pages=1)
    assert list(page.gmail_ids()) == [accepted.gmail_id]
    assert lazy.message_ids_of([accepted.gmail_id]) == {accepted.gmail_id: "<lazy-1@mail.example.com>"}
    assert build.calls == 1


# ------------------------------------------------------------------------------------ concurrency
@pytest.mark.parametrize("callers", [2, 16])
def test_concurrent_first_calls_build_once(callers: int) -> None:
    """Request threads and the background checkpoint read arrive together on a fresh instance:
    one build, and every caller gets the same mailer."""
    build = Builds(delay_s=0.05)
    lazy = LazyMailer(build)
    barrier = threading.Barrier(callers)
    results: list[Any] = []
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            barrier.wait(timeout=5)
            results.append(lazy.send(RAW) if i % 2 else lazy.current_history_id())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert len(results) == callers
    assert build.calls == 1
    assert build.mailer.sends == callers // 2


# ------------------------------------------------------------------------------------ failed build
def test_failed_build_send_is_not_accepted_retryable_and_nothing_sent() -> None:
    build = Builds(failures=1)
    lazy = LazyMailer(build)
    outcome = lazy.send(RAW)
    assert isinstance(outcome, Failure)
    # NOT_ACCEPTED: the build runs before any request is written, so the job may be sent again.
    assert outcome.bucket is Bucket.NOT_ACCEPTED
    assert outcome.retryable is True
    assert outcome.code == "auth_refresh"
    assert "ConfigurationError" in outcome.detail
    assert build.mailer.sends == 0
    assert build.mailer.mailbox.effects == []


def test_failed_build_is_tried_again_on_the_next_call() -> None:
    build = Builds(failures=2)
    lazy = LazyMailer(build)
    assert isinstance(lazy.send(RAW), Failure)
    with pytest.raises(MailboxUnavailableError):
        lazy.current_history_id()
    accepted = lazy.send(RAW)
    assert isinstance(accepted, Accepted)
    assert build.calls == 3
    assert len(build.mailer.mailbox.effects) == 1
    lazy.send(RAW)
    assert build.calls == 3  # built: no more builds


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("find_by_message_id", ("<x@mail.example.com>",)),
        ("stored_message_id", ("0000000000000001",)),
        ("current_history_id", ()),
        ("added_since", ("100",)),
        ("message_ids_of", (["0000000000000001"],)),
    ],
)
def test_failed_build_reads_raise_mailbox_unavailable(method: str, args: tuple[Any, ...]) -> None:
    """A read that cannot happen now is retried later by its caller, never taken for 'no copy'."""
    build = Builds(failures=1)
    lazy = LazyMailer(build)
    with pytest.raises(MailboxUnavailableError) as caught:
        getattr(lazy, method)(*args)
    assert isinstance(caught.value.__cause__, ConfigurationError)
    assert "ConfigurationError" in str(caught.value)
    assert build.mailer.sends == 0


def test_errors_of_the_built_mailer_pass_through_unchanged() -> None:
    """Only the build is wrapped: a read that fails once built keeps its own error."""
    mailer = fake_mailer()
    mailer.search_error = MailboxUnavailableError("search failed: 503")
    lazy = LazyMailer(Builds(mailer))
    with pytest.raises(MailboxUnavailableError, match="search failed: 503"):
        lazy.find_by_message_id("<x@mail.example.com>")


# ------------------------------------------------------------------------ imports (subprocesses)
def stack_like_env() -> dict[str, str]:
    """The environment devstack/stack.py gives the functions, with nothing listening behind it
    (nothing here connects), and no inherited variables."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),  # a fallback home; nothing is written there
        "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}",
        "GOOGLE_CLOUD_PROJECT": "demo-safesend",
        "SAFESEND_DEFAULT_FROM": "Safesend Local <sender@safesend.localhost>",
        "SAFESEND_MESSAGE_ID_DOMAIN": "mail.safesend.localhost",
        "SAFESEND_TASKS_QUEUE": "projects/demo-safesend/locations/us-central1/queues/safesend-reconcile",
        "SAFESEND_RECONCILE_URL": "http://127.0.0.1:9/reconcile",
        "SAFESEND_REVIEW_TOPIC": "projects/demo-safesend/topics/safesend-review",
        "SAFESEND_AUTH_DISABLED": "1",
        "SAFESEND_CALLBACK_HMAC_SECRET": "0123456789abcdef0123456789abcdef",
        "SAFESEND_CALLBACK_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SAFESEND_CALLBACK_ALLOW_HTTP": "1",
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9",
        "PUBSUB_EMULATOR_HOST": "127.0.0.1:9",
        "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:9",
        "SAFESEND_GMAIL_API_ENDPOINT": "http://127.0.0.1:9",
    }


def loaded_after(code: str, watch: tuple[str, ...]) -> dict[str, list[str]]:
    """Run `code` in a fresh interpreter with the stack-like environment; for each stage it prints
    (`report(stage)`), which of `watch` (or their submodules) were imported by then."""
    prelude = textwrap.dedent(
        f"""
        import json, sys
        WATCH = {watch!r}
        SEEN = {{}}
        def report(stage):
            SEEN[stage] = sorted(w for w in WATCH if any(m == w or m.startswith(w + ".") for m in sys.modules))
        """
    )
    epilogue = "\nprint(json.dumps(SEEN))\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code) + epilogue],
        cwd=ROOT / "functions",
        env=stack_like_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_importing_main_imports_no_google_client() -> None:
    """functions/main.py as functions-framework loads it: no Gmail client, no HTTP library of its,
    no gRPC, no Cloud Tasks client. A module-level import of any of them costs every cold start."""
    seen = loaded_after("import main\nreport('main')", NOT_AT_IMPORT)
    assert seen == {"main": []}


def test_a_graph_mailer_imports_msal_only_for_its_first_token() -> None:
    """A Graph mailbox's adapter and its token source are built without MSAL (Gmail-only deployments
    never load it); MSAL comes with the first token."""
    seen = loaded_after(
        """
        from safesend.adapters.graph_auth import BoundedLoginHttp, GraphTokens, federated_credential
        from safesend.adapters.graph_mailer import GraphMailer
        tokens = GraphTokens("t", "c", federated_credential(lambda: "x.y.z"), BoundedLoginHttp(1.0))
        GraphMailer("shop@example.com", tokens)
        report('built')
        try:
            tokens.token(0.0)  # a deadline already passed: MSAL is built, no request is made
        except Exception:
            pass
        report('token')
        """,
        ("msal",),
    )
    assert seen == {"built": [], "token": ["msal"]}


def test_a_built_runtime_imports_no_gmail_client() -> None:
    """The first request builds the runtime (Firestore client included): the Gmail adapter and the
    Cloud Tasks client still wait for their first call, and the runtime's mailer is the lazy one."""
    seen = loaded_after(
        """
        import main
        from safesend.bootstrap.runtime import LazyMailer, get_runtime
        runtime = get_runtime()
        assert isinstance(runtime.service.mailer, LazyMailer), type(runtime.service.mailer)
        report('runtime')
        """,
        GMAIL_MODULES,
    )
    assert seen == {"runtime": []}


def test_the_first_store_read_imports_neither_grpc_nor_the_firestore_library() -> None:
    """A status request's work: build the runtime, read one job. The read goes out over REST (here to
    a closed port, so it fails after its bounded retries: the import path is the same). Any of
    grpc, google-cloud-firestore, protobuf, api_core, requests or cryptography would be ~250 ms of a
    cold start again."""
    seen = loaded_after(
        """
        import main
        from safesend.core.errors import StoreUnavailableError
        from safesend.bootstrap.runtime import get_runtime
        store = get_runtime().service.store
        try:
            store.get("0" * 32)
            raise SystemExit("a closed port answered")
        except StoreUnavailableError:
            pass
        report('read')
        """,
        NOT_FOR_A_STORE_READ,
    )
    assert seen == {"read": []}


def test_lazy_mailer_construction_imports_nothing_from_google() -> None:
    """Constructing it neither imports a Google library nor looks for credentials. (The bare `google`
    and `google.cloud` namespaces are set up by site-packages' .pth files at start-up: not counted.)"""
    seen = loaded_after(
        """
        from safesend.config import Settings
        from safesend.bootstrap.runtime import LazyMailer, build_mailer
        settings = Settings.from_env()
        mailer = LazyMailer(lambda: build_mailer(settings))
        report('constructed')
        """,
        ("google.auth", "google.api_core", "google.cloud.firestore", "google.protobuf", *NOT_AT_IMPORT),
    )
    assert seen == {"constructed": []}
