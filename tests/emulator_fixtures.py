"""pytest plugin: session-scoped local emulators (Firestore, Pub/Sub, Cloud Tasks).

Enabled from tests/conftest.py with ``pytest_plugins = ["tests.emulator_fixtures"]``.

Each emulator starts on first use, once per session, on a free loopback port,
and its whole process group is stopped at session end. A start failure FAILS
the requesting tests (never skips): a silently skipped integration suite would
hide a broken CI machine. Logs go to a per-session temp dir whose path is
printed in the failure message and in the summary when anything failed.

``shared_emulators`` is the set a LocalStack runs on (``shared_emulators.stack_for("name", config)``):
started once per session (per xdist worker), each stack in a project of its own.

The fixtures do not touch os.environ; tests point clients at an emulator with
``monkeypatch.setenv(*emulator.env().popitem())`` or similar, so unit tests in
the same session keep seeing a clean environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from devstack.emulators import (
    CloudTasksEmulator,
    DevstackError,
    Emulator,
    EmulatorStack,
    FirestoreEmulator,
    PubSubEmulator,
)

if TYPE_CHECKING:  # imported where used: every pytest process loads this plugin, few start a stack
    from devstack.stack import LocalStack, StackConfig

E = TypeVar("E", bound=Emulator)

_LOG_DIR_KEY = pytest.StashKey[Path]()
# Under pytest-xdist each worker has its own session and log dir; the controller, which prints the
# summary, hears of them through the workers' `workeroutput` when they finish.
_WORKER_OUTPUT_KEY = "safesend_emulator_log_dir"
_WORKER_LOG_DIRS_KEY = pytest.StashKey[list[str]]()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"received signal {signum}")


@pytest.fixture(scope="session")
def emulator_log_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Directory holding every emulator log of this session (kept after the run).

    While emulators may run, SIGTERM/SIGHUP become KeyboardInterrupt so pytest
    tears the session down and stops them (a cancelled CI job sends SIGTERM).
    If pytest is killed outright, the emulators' watchdogs stop them instead.
    """
    path = tmp_path_factory.mktemp("emulator-logs")
    request.config.stash[_LOG_DIR_KEY] = path
    worker_output = getattr(request.config, "workeroutput", None)  # set on xdist workers only
    if worker_output is not None:
        worker_output[_WORKER_OUTPUT_KEY] = str(path)
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) == signal.SIG_DFL:
                previous[sig] = signal.signal(sig, _interrupt)
    try:
        yield path
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _started(emulator: E, log_dir: Path) -> E:
    try:
        return emulator.start()
    except DevstackError as exc:
        pytest.fail(
            f"{emulator.name} emulator could not start (logs in {log_dir}):\n{exc}",
            pytrace=False,
        )


def _run(emulator: E, log_dir: Path) -> Iterator[E]:
    started = _started(emulator, log_dir)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def firestore_emulator(emulator_log_dir: Path) -> Iterator[FirestoreEmulator]:
    """Running Firestore emulator; call .reset() between tests that need an empty database."""
    yield from _run(FirestoreEmulator(log_dir=emulator_log_dir), emulator_log_dir)


@pytest.fixture(scope="session")
def pubsub_emulator(emulator_log_dir: Path) -> Iterator[PubSubEmulator]:
    """Running Pub/Sub emulator (gRPC); use unique topic names per test."""
    yield from _run(PubSubEmulator(log_dir=emulator_log_dir), emulator_log_dir)


@pytest.fixture(scope="session")
def tasks_emulator(emulator_log_dir: Path) -> Iterator[CloudTasksEmulator]:
    """Running Cloud Tasks emulator; .client() gives a tasks_v2 client, .queue_path(id) a queue name."""
    yield from _run(CloudTasksEmulator(log_dir=emulator_log_dir), emulator_log_dir)


def unique_project(name: str) -> str:
    """A project no other stack of this session uses: the shared emulators keep projects apart."""
    return f"demo-{name}-{uuid.uuid4().hex[:6]}"


class SharedEmulators:
    """Firestore, Pub/Sub and Cloud Tasks started once for every LocalStack a pytest process runs
    (two JVM boots, a Tasks emulator and their warm-up saved per stack; each stack keeps its own
    project, devstack/stack.py). ``thaw`` resumes every group (SIGCONT: a chaos freeze never outlives
    its test); an emulator found dead by ``ready`` restarts them all."""

    def __init__(self, log_dir: Path | None = None) -> None:
        self.log_dir = log_dir
        self.stack: EmulatorStack | None = None

    def ready(self) -> EmulatorStack:
        if self.stack is not None and not all(e.is_running() for e in self.stack.emulators):
            self.close()
        if self.stack is None:
            self.stack = EmulatorStack(log_dir=self.log_dir, tasks_max_retries=5).start()
        return self.stack

    def stack_for(self, name: str, config: StackConfig | None = None) -> LocalStack:
        """A LocalStack (not started) on the ready emulators, in a unique project named after `name`."""
        from devstack.stack import LocalStack, StackConfig

        return LocalStack(dataclasses.replace(config or StackConfig(), project=unique_project(name)), self.ready())

    def thaw(self) -> None:
        for emulator in self.stack.emulators if self.stack else ():
            if emulator.pgid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(emulator.pgid, signal.SIGCONT)

    def close(self) -> None:
        if self.stack is not None:
            stack, self.stack = self.stack, None
            stack.stop()


@pytest.fixture(scope="session")
def shared_emulators(emulator_log_dir: Path) -> Iterator[SharedEmulators]:
    """Session-scoped, so per xdist worker: tests/scheduling.py gives each module (and each storm
    phase) to one worker, and each worker starts the emulators once, for its first stack."""
    with contextlib.closing(SharedEmulators(emulator_log_dir)) as shared:
        yield shared


@pytest.fixture
def emulators(shared_emulators: SharedEmulators) -> Iterator[EmulatorStack]:
    """The shared emulators for one test, thawed after it whatever happened (the storm freezes them)."""
    try:
        yield shared_emulators.ready()
    finally:
        shared_emulators.thaw()


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent when it is not installed
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the xdist controller: remember the log dir of each worker that had one."""
    path = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT_KEY)
    if path:
        node.config.stash.setdefault(_WORKER_LOG_DIRS_KEY, []).append(path)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    """Point at the emulator logs (every worker's) whenever something failed."""
    own = config.stash.get(_LOG_DIR_KEY, None)
    log_dirs = ([str(own)] if own is not None else []) + sorted(config.stash.get(_WORKER_LOG_DIRS_KEY, []))
    if not log_dirs:
        return
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        for log_dir in log_dirs:
            terminalreporter.write_line(f"emulator logs: {log_dir}")
