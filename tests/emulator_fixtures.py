"""pytest plugin: session-scoped local emulators (Firestore, Pub/Sub, Cloud Tasks).

Enabled from tests/conftest.py with ``pytest_plugins = ["tests.emulator_fixtures"]``.

Each emulator starts on first use, once per session, on a free loopback port,
and its whole process group is stopped at session end. A start failure FAILS
the requesting tests (never skips): a silently skipped integration suite would
hide a broken CI machine. Logs go to a per-session temp dir whose path is
printed in the failure message and in the summary when anything failed.

The fixtures do not touch os.environ; tests point clients at an emulator with
``monkeypatch.setenv(*emulator.env().popitem())`` or similar, so unit tests in
the same session keep seeing a clean environment.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from devstack.emulators import (
    CloudTasksEmulator,
    DevstackError,
    Emulator,
    FirestoreEmulator,
    PubSubEmulator,
)

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
