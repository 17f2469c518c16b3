"""Start and stop the local Google Cloud emulators safesend is developed against.

Why this module exists:
- Each emulator runs in its own process group so ``stop()`` can take down the
  whole tree (JVM, wrapper scripts) and never leave an orphaned java behind.
- Every wait is bounded; a failed start raises with the tail of the emulator's
  log and whether the process had already exited, so CI failures are readable.
- Everything binds to 127.0.0.1 only: the emulators have no authentication.

Standard library only at import time. ``grpc`` / ``google-cloud-tasks`` are
imported lazily inside the few helpers that need them, so this module also
works from a bare interpreter (e.g. a run-local script before the venv exists).

Run ``python -m devstack.emulators`` to start all three and print the
environment variables to export; Ctrl-C (or SIGTERM) stops them.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

__all__ = [
    "DEFAULT_LOCATION",
    "DEFAULT_PROJECT",
    "LOOPBACK",
    "REPO_ROOT",
    "TASKS_EMULATOR_HOST_ENV",
    "CloudTasksEmulator",
    "DevstackError",
    "Emulator",
    "EmulatorMissingError",
    "EmulatorRequestError",
    "EmulatorStack",
    "FirestoreEmulator",
    "ManagedProcess",
    "PortInUseError",
    "ProcessStartError",
    "ProcessStopError",
    "PubSubEmulator",
    "free_port",
    "gcloud_sdk_root",
    "start_all",
]

LOOPBACK = "127.0.0.1"
DEFAULT_PROJECT = "demo-safesend"
DEFAULT_LOCATION = "us-central1"
REPO_ROOT = Path(__file__).resolve().parent.parent
_THIS_FILE = Path(__file__).resolve()
TASKS_MAIN = _THIS_FILE.parent / "tasks_emulator_main.py"

# Read by safesend.config (Settings.tasks_emulator_host). Google defines no
# emulator variable for Cloud Tasks; this is a project convention.
TASKS_EMULATOR_HOST_ENV = "SAFESEND_TASKS_EMULATOR_HOST"

_DEFAULT_SDK_ROOT = Path("/usr/lib/google-cloud-sdk")
_FIRESTORE_JAR = Path("platform/cloud-firestore-emulator/cloud-firestore-emulator.jar")
_PUBSUB_SCRIPT = Path("platform/pubsub-emulator/bin/cloud-pubsub-emulator")
_FIRESTORE_MAIN_CLASS = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"

# gRPC honours http(s)_proxy; local emulators must never be reached through one.
_GRPC_LOCAL_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.enable_http_proxy", 0),)
# urllib honours proxy env vars too; this opener ignores them.
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --------------------------------------------------------------------------- errors


class DevstackError(RuntimeError):
    """Base class for every error raised by the local dev stack."""


class EmulatorMissingError(DevstackError):
    """An emulator (or the runtime it needs) is not installed where expected."""


class ProcessStartError(DevstackError):
    """A managed process exited early or did not become ready in time."""


class ProcessStopError(DevstackError):
    """A managed process group survived SIGTERM and SIGKILL (should not happen)."""


class EmulatorRequestError(DevstackError):
    """An emulator control request (e.g. a data reset) failed."""


class PortInUseError(DevstackError):
    """The requested port already accepts connections, so a check would hit the wrong server."""


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    """Return a TCP port that is currently free on 127.0.0.1.

    There is an unavoidable race until the emulator binds it; emulators started
    with an automatic port retry with a new one if their process exits early.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _http_status(method: str, url: str, timeout: float = 1.0) -> int:
    """HTTP status of a request, bypassing any proxy; raises OSError if unreachable."""
    req = urllib.request.Request(url, method=method)
    try:
        with _NO_PROXY_OPENER.open(req, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def gcloud_sdk_root() -> Path:
    """Locate the Google Cloud SDK: $SAFESEND_GCLOUD_SDK_ROOT, then `gcloud` on PATH, then the Debian path.

    Kept in sync with scripts/bootstrap.sh so both check the same files.
    """
    override = os.environ.get("SAFESEND_GCLOUD_SDK_ROOT")
    if override:
        return Path(override)
    gcloud = shutil.which("gcloud")
    if gcloud:
        candidate = Path(gcloud).resolve().parent.parent
        if (candidate / "platform").is_dir():
            return candidate
    return _DEFAULT_SDK_ROOT


def _find_java() -> Path:
    """Resolve java the same way the SDK's wrapper scripts do ($JAVA_HOME first)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java")
    if found:
        return Path(found)
    raise EmulatorMissingError(
        "java was not found (checked $JAVA_HOME/bin/java and PATH); the Firestore and Pub/Sub "
        "emulators need a Java 11+ runtime: apt-get install -y default-jre-headless"
    )


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process remains in the process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised comm: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


# --------------------------------------------------------------------------- processes

_LIVE_PROCESSES: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()


@atexit.register
def _stop_live_processes() -> None:
    """Last-resort cleanup so an interrupted session does not leak emulators."""
    for proc in list(_LIVE_PROCESSES):
        with contextlib.suppress(Exception):
            proc.stop()


def _watchdog_main(fd: int, pgid: int, grace: float) -> int:
    """Body of the orphan watchdog (runs as `python -I -S emulators.py --watchdog FD PGID GRACE`).

    Blocks reading a pipe whose only write end the owner holds. A byte means the
    owner stopped the group itself; EOF means the owner died without stopping
    it (SIGKILL, os._exit, a CI runner killing pytest): then terminate the group.
    """
    try:
        disarmed = bool(os.read(fd, 1))
    except OSError:
        disarmed = False
    if disarmed:
        return 0
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    return 0


class ManagedProcess:
    """A child process in its own process group, logging to a file.

    Own process group (start_new_session) so stop() signals the whole tree:
    wrapper scripts and the JVMs they start die together. Because the group is
    detached from ours, a small watchdog process (see _watchdog_main) stops it
    if this Python process dies without calling stop().
    """

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        name: str,
        log_dir: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._pgid: int | None = None
        self._log_file: Any = None
        self._stopped = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._watchdog_fd: int | None = None
        self._lock = threading.Lock()

    # -- lifecycle

    def start(self) -> Self:
        """Launch the command; it is an error to start twice."""
        if self._proc is not None:
            raise ProcessStartError(f"{self.name}: already started (pid {self._proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - stays open for the child's lifetime
        self._log_file.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
        self._log_file.flush()
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
                close_fds=True,
            )
        except OSError as exc:
            self._log_file.close()
            raise ProcessStartError(f"{self.name}: cannot execute {self.argv[0]!r}: {exc}") from exc
        # start_new_session makes the child a session and group leader: pgid == pid.
        self._pgid = self._proc.pid
        _LIVE_PROCESSES.add(self)
        self._start_watchdog()
        return self

    def _start_watchdog(self) -> None:
        if not sys.executable:
            return  # embedded interpreter: rely on stop()/atexit only
        read_fd, write_fd = os.pipe()  # non-inheritable: only the watchdog gets read_fd
        try:
            self._watchdog = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(_THIS_FILE),
                    "--watchdog",
                    str(read_fd),
                    str(self._pgid),
                    str(self.stop_timeout),
                ],
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log_file,
                start_new_session=True,  # survives signals aimed at our group or at the emulator's
            )
        except OSError:
            os.close(write_fd)
            return
        finally:
            os.close(read_fd)
        self._watchdog_fd = write_fd

    def _disarm_watchdog(self) -> None:
        if self._watchdog_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._watchdog_fd, b"d")
            os.close(self._watchdog_fd)
            self._watchdog_fd = None
        if self._watchdog is not None:
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait(timeout=5)
            self._watchdog = None

    def stop(self) -> None:
        """SIGTERM the group, wait (bounded), then SIGKILL; idempotent and thread-safe."""
        with self._lock:
            if self._proc is None or self._stopped:
                return
            self._stopped = True
            proc, pgid = self._proc, self._pgid
            assert pgid is not None
            try:
                _signal_group(pgid, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(pgid, signal.SIGKILL)
                    try:
                        proc.wait(timeout=self.stop_timeout)
                    except subprocess.TimeoutExpired as exc:
                        raise ProcessStopError(
                            f"{self.name}: pid {proc.pid} survived SIGKILL for {self.stop_timeout}s"
                        ) from exc
                # The leader is gone; children that ignored SIGTERM may remain in the group.
                if not self._wait_group_gone(pgid, self.stop_timeout):
                    _signal_group(pgid, signal.SIGKILL)
                    if not self._wait_group_gone(pgid, self.stop_timeout):
                        raise ProcessStopError(f"{self.name}: process group {pgid} survived SIGKILL")
            finally:
                self._disarm_watchdog()
                if self._log_file is not None:
                    self._log_file.close()
                _LIVE_PROCESSES.discard(self)

    @staticmethod
    def _wait_group_gone(pgid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while _group_alive(pgid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def __enter__(self) -> Self:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def pgid(self) -> int | None:
        return self._pgid

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, max_lines: int = 40, max_bytes: int = 16_384) -> str:
        """Last lines of the log, for error messages."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                data = fh.read()
        except OSError as exc:
            return f"<log {self.log_path} unreadable: {exc}>"
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-max_lines:])

    def wait_ready(
        self,
        check: Callable[[], bool],
        *,
        timeout: float,
        interval: float = 0.1,
        what: str = "ready",
    ) -> float:
        """Poll check() until it returns True; return the seconds waited.

        Fails fast if the process exits, and after `timeout` seconds otherwise;
        exceptions from check() count as "not ready yet" and the last one is reported.
        """
        if self._proc is None:
            raise ProcessStartError(f"{self.name}: wait_ready() before start()")
        started = time.monotonic()
        deadline = started + timeout
        last_error: BaseException | None = None
        while True:
            rc = self._proc.poll()
            if rc is not None:
                summary = f"exited with code {rc} before it was {what}"
                raise ProcessStartError(self._failure_message(summary, last_error))
            try:
                if check():
                    return time.monotonic() - started
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = exc
            now = time.monotonic()
            if now >= deadline:
                # Re-check so a process that died during the last probe is reported as such.
                rc = self._proc.poll()
                state = f"exited with code {rc}" if rc is not None else f"still running as pid {self._proc.pid}"
                raise ProcessStartError(
                    self._failure_message(f"was not {what} after {timeout:.1f}s (process {state})", last_error)
                )
            time.sleep(min(interval, deadline - now))

    def _failure_message(self, summary: str, last_error: BaseException | None) -> str:
        parts = [f"{self.name} {summary}.", f"command: {' '.join(self.argv)}"]
        if last_error is not None:
            parts.append(f"last readiness check error: {type(last_error).__name__}: {last_error}")
        parts.append(f"log file: {self.log_path}")
        parts.append("--- last log lines ---")
        parts.append(self.log_tail())
        return "\n".join(parts)


# --------------------------------------------------------------------------- emulators


class Emulator(ABC):
    """Common start/stop logic; subclasses supply the command line and readiness check."""

    name: ClassVar[str] = "emulator"
    default_startup_timeout: ClassVar[float] = 60.0

    def __init__(
        self,
        port: int | None = None,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        self._requested_port = port
        self._port: int | None = port
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self.startup_timeout = startup_timeout if startup_timeout is not None else self.default_startup_timeout
        self.stop_timeout = stop_timeout
        self.process: ManagedProcess | None = None
        self.startup_seconds: float | None = None
        self.archive: ClassArchive | None = None  # a JVM emulator's class archive (start() sets it)
        self._archive_override: list[str] | None = None  # the warm-up JVM's options instead of the map

    # -- to implement

    @abstractmethod
    def check_installed(self) -> None:
        """Raise EmulatorMissingError if anything needed to run is absent."""
        ...

    @abstractmethod
    def command(self, port: int) -> list[str]: ...

    @abstractmethod
    def is_ready(self) -> bool: ...

    @abstractmethod
    def env(self) -> dict[str, str]:
        """Environment variables that point clients at this emulator."""
        ...

    def process_env(self) -> dict[str, str]:
        return dict(os.environ)

    # -- common

    @property
    def port(self) -> int:
        if self._port is None:
            raise DevstackError(f"{self.name} emulator has no port yet: call start() first")
        return self._port

    @property
    def host(self) -> str:
        """host:port as the client libraries expect it (no scheme)."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_dir(self) -> Path:
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix=f"safesend-{self.name}-"))
        return self._log_dir

    @property
    def log_path(self) -> Path | None:
        return self.process.log_path if self.process is not None else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def pgid(self) -> int | None:
        return self.process.pgid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.is_running()

    def start(self) -> Self:
        """Start and wait until ready; no-op if already running.

        With an automatic port, a process that dies during start-up (most likely a
        lost race for the port) is retried on a fresh port, at most three times.
        """
        if self.is_running():
            return self
        self.check_installed()
        if self.archive is None:
            self.archive = self.class_archive()
            if self.archive is not None:
                self.archive.ensure(self._make_archive)
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port if self._requested_port is not None else free_port()
            if _tcp_open(LOOPBACK, port):
                raise PortInUseError(
                    f"{self.name}: port {port} on {LOOPBACK} is already in use; stop whatever listens there "
                    f"or choose another port"
                )
            self._port = port
            proc = ManagedProcess(
                self.command(port),
                name=f"{self.name}-{port}",
                log_dir=self.log_dir,
                env=self.process_env(),
                stop_timeout=self.stop_timeout,
            )
            self.process = proc
            started = time.monotonic()
            proc.start()
            try:
                proc.wait_ready(self.is_ready, timeout=self.startup_timeout, what=f"ready on {self.host}")
                if not proc.is_running():
                    raise ProcessStartError(proc._failure_message("exited right after becoming ready", None))
            except ProcessStartError:
                exited_early = not proc.is_running()
                proc.stop()
                if exited_early and attempt < attempts:
                    continue
                raise
            except BaseException:
                proc.stop()
                raise
            self.startup_seconds = time.monotonic() - started
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    ARCHIVE_STOP_TIMEOUT_S: ClassVar[float] = 60.0

    def class_archive(self) -> ClassArchive | None:
        """A JVM emulator's class-data-sharing archive (ClassArchive); None: not a JVM."""
        return None

    def _archive_options(self) -> list[str]:
        if self._archive_override is not None:
            return self._archive_override
        return self.archive.options() if self.archive is not None else []

    def _make_archive(self, options: list[str]) -> int | None:
        """ClassArchive.ensure's warm-up: this emulator once with `options`, until it answers, then
        stopped; its exit status (negative: it had to be killed)."""
        self._archive_override, self._port = options, free_port()
        try:
            proc = ManagedProcess(
                self.command(self._port),
                name=f"{self.name}-class-archive",
                log_dir=self.log_dir,
                env=self.process_env(),
                # it writes the archive as it exits (~2.7 CPU-s): on a loaded machine more than the
                # usual stop timeout, and a JVM killed mid-write leaves no archive
                stop_timeout=max(self.stop_timeout, self.ARCHIVE_STOP_TIMEOUT_S),
            )
            proc.start()
            try:
                proc.wait_ready(self.is_ready, timeout=self.startup_timeout, what=f"ready on {self.host}")
            finally:
                proc.stop()
            return proc.returncode
        finally:
            self._archive_override, self._port = None, self._requested_port

    def stop(self) -> None:
        """Stop the process group; idempotent."""
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.is_running() else "stopped"
        port = self._port if self._port is not None else "auto"
        return f"<{type(self).__name__} {LOOPBACK}:{port} {state}>"


# The emulators' JVMs run for a test or a local session, never long enough to repay the optimising
# compiler: C1 only, one compiler thread and the serial collector halve the Firestore emulator's CPU
# (one fault-storm phase: 25.1 -> 12.6 CPU-s, same test, same machine) and keep it off the cores
# the functions and the tests need. Pub/Sub's wrapper script reads them from JAVA_OPTS.
JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:+UseSerialGC")


def _java_feature_version(java: Path) -> int | None:
    """The runtime's feature version from its `release` file (JAVA_VERSION="17.0.15"), None if unknown."""
    try:
        text = (java.resolve().parents[1] / "release").read_text(encoding="utf-8", errors="replace")
    except (OSError, IndexError):
        return None
    found = re.search(r'^JAVA_VERSION="(\d+)', text, re.MULTILINE)
    return int(found.group(1)) if found else None


class ClassArchive:
    """A JVM's class-data-sharing archive (dynamic AppCDS, Java 13+), made once per machine and kept in
    the user's cache.

    Every emulator start loaded and verified the same ~10,000 classes from the jar: the Firestore
    emulator took 1.9 CPU-s to answer, 0.8 with the archive (Java 17, 2-core machine, 2026-12-03),
    and a gate starts ~20 of these JVMs. Writing the archive costs a JVM ~2.7 CPU-s more, so only one
    does it: the first start on a machine runs a warm-up JVM with -XX:ArchiveClassesAtExit (its own
    file) until it answers, stops it, and keeps the file if the JVM ended on its own; other processes
    wait for it on a file lock (bounded) and every JVM then maps it (-XX:SharedArchiveFile). The name
    is keyed by the java binary and the jars (path, size, mtime); the JVM validates the archive itself
    and runs without it, with a warning in its log, if it does not match. Older runtimes (the option
    came with Java 13), an unknown one, or SAFESEND_JVM_CLASS_ARCHIVE=0: no archive, no option."""

    LOCK_WAIT_S = 120.0  # another process making the archive: wait this long, then start without it

    def __init__(self, name: str, java: Path, inputs: Sequence[Path]) -> None:
        self.path: Path | None = None
        version = _java_feature_version(java)
        if version is None or version < 13 or os.environ.get("SAFESEND_JVM_CLASS_ARCHIVE") == "0":
            return
        digest = hashlib.sha256()
        for item in (java.resolve(), *inputs):
            try:
                stat = item.stat()
            except OSError:
                return
            digest.update(f"{item}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
        try:
            cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no home to find: no archive
            return
        self.path = cache / "safesend" / "jvm-class-archives" / f"{name}-{digest.hexdigest()[:16]}.jsa"

    def options(self) -> list[str]:
        """The option that maps the archive, if there is one."""
        return [f"-XX:SharedArchiveFile={self.path}"] if self.path is not None and self.path.is_file() else []

    def ensure(self, make: Callable[[list[str]], int | None]) -> None:
        """Makes the archive unless it exists: `make(options)` runs a JVM with `options` until it
        answers, stops it and returns its exit status (negative: killed). Never raises: without an
        archive the emulators start as they always did."""
        if self.path is None or self.path.is_file():
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(self.path.with_suffix(".lock"), "a")  # noqa: SIM115 - closed below
        except OSError as exc:  # a read-only or full cache: start without an archive
            print(f"safesend: no JVM class archive for {self.path.name}: {exc}", file=sys.stderr)
            return
        with lock:
            deadline = time.monotonic() + self.LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return
                    time.sleep(0.2)
            if self.path.is_file():  # made while this process waited
                return
            pending = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp")
            try:
                returncode = make([f"-XX:ArchiveClassesAtExit={pending}"])
                if returncode is not None and returncode >= 0 and pending.is_file() and pending.stat().st_size:
                    os.replace(pending, self.path)
            except Exception as exc:  # noqa: BLE001 - an optimisation: report it and start without one
                print(f"safesend: no JVM class archive for {self.path.name}: {exc}", file=sys.stderr)
            finally:
                pending.unlink(missing_ok=True)


class FirestoreEmulator(Emulator):
    """Google's Firestore emulator jar, run with java directly so pid == the JVM."""

    name = "firestore"

    def __init__(
        self,
        port: int | None = None,
        project: str = DEFAULT_PROJECT,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        sdk_root: str | os.PathLike[str] | None = None,
        startup_timeout: float | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        super().__init__(port, log_dir=log_dir, startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.project = project
        self.jar_path = Path(sdk_root or gcloud_sdk_root()) / _FIRESTORE_JAR
        self._java: Path | None = None

    def check_installed(self) -> None:
        if not self.jar_path.is_file():
            raise EmulatorMissingError(
                f"Firestore emulator not found: expected {self.jar_path}. Install it with "
                f"`apt-get install -y google-cloud-cli-firestore-emulator` (or "
                f"`gcloud components install cloud-firestore-emulator`), or set SAFESEND_GCLOUD_SDK_ROOT."
            )
        self._java = _find_java()

    def command(self, port: int) -> list[str]:
        java = self._java or _find_java()
        return [
            str(java),
            *JVM_OPTIONS,
            *self._archive_options(),
            "-Duser.language=en",
            "-cp",
            str(self.jar_path),
            _FIRESTORE_MAIN_CLASS,
            "start",
            f"--host={LOOPBACK}",
            f"--port={port}",
        ]

    def class_archive(self) -> ClassArchive:
        return ClassArchive("firestore", self._java or _find_java(), [self.jar_path])

    def is_ready(self) -> bool:
        return _http_status("GET", f"http://{self.host}/") == 200

    def env(self) -> dict[str, str]:
        return {"FIRESTORE_EMULATOR_HOST": self.host}

    def reset(self, project: str | None = None) -> None:
        """Delete every document of the project's default database (fast test isolation)."""
        project = project or self.project
        url = f"http://{self.host}/emulator/v1/projects/{project}/databases/(default)/documents"
        try:
            status = _http_status("DELETE", url, timeout=10.0)
        except OSError as exc:
            raise EmulatorRequestError(f"Firestore reset of {project!r} failed: {exc}") from exc
        if status != 200:
            raise EmulatorRequestError(f"Firestore reset of {project!r} answered HTTP {status}")


class PubSubEmulator(Emulator):
    """Google's Pub/Sub emulator; its wrapper script execs java, so pid == the JVM."""

    name = "pubsub"

    def __init__(
        self,
        port: int | None = None,
        project: str = DEFAULT_PROJECT,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        sdk_root: str | os.PathLike[str] | None = None,
        startup_timeout: float | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        super().__init__(port, log_dir=log_dir, startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.project = project
        self.script_path = Path(sdk_root or gcloud_sdk_root()) / _PUBSUB_SCRIPT

    def check_installed(self) -> None:
        if not os.access(self.script_path, os.X_OK):
            raise EmulatorMissingError(
                f"Pub/Sub emulator not found: expected executable {self.script_path}. Install it with "
                f"`apt-get install -y google-cloud-cli-pubsub-emulator` (or "
                f"`gcloud components install pubsub-emulator`), or set SAFESEND_GCLOUD_SDK_ROOT."
            )
        _find_java()

    def command(self, port: int) -> list[str]:
        return [str(self.script_path), f"--host={LOOPBACK}", f"--port={port}"]

    def process_env(self) -> dict[str, str]:
        env = super().process_env()
        # the wrapper script evals JAVA_OPTS: each option quoted; a caller's own come last and win
        ours = (*JVM_OPTIONS, *(shlex.quote(option) for option in self._archive_options()))
        env["JAVA_OPTS"] = " ".join((*ours, env.get("JAVA_OPTS", ""))).strip()
        return env

    def class_archive(self) -> ClassArchive:
        lib = self.script_path.parent.parent / "lib"
        return ClassArchive("pubsub", _find_java(), [self.script_path, *sorted(lib.glob("*.jar"))])

    def is_ready(self) -> bool:
        _http_status("GET", f"http://{self.host}/")  # any HTTP answer means the server is up
        return True

    def env(self) -> dict[str, str]:
        return {"PUBSUB_EMULATOR_HOST": self.host}


class CloudTasksEmulator(Emulator):
    """gcloud-tasks-emulator from its own venv (.venv-tasks), bound to 127.0.0.1.

    It lives in a separate venv because it pins protobuf<5, which the project's
    client libraries cannot use.
    """

    name = "tasks"
    default_startup_timeout = 30.0

    def __init__(
        self,
        port: int | None = None,
        *,
        venv: str | os.PathLike[str] | None = None,
        max_retries: int = 5,
        queues: Iterable[str] = (),
        project: str = DEFAULT_PROJECT,
        location: str = DEFAULT_LOCATION,
        log_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float | None = None,
        stop_timeout: float = 10.0,
    ) -> None:
        super().__init__(port, log_dir=log_dir, startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0 (the emulator retries every ~0.1 s, never retry forever)")
        self.venv = Path(venv or os.environ.get("SAFESEND_TASKS_VENV") or REPO_ROOT / ".venv-tasks")
        self.max_retries = max_retries
        self.project = project
        self.location = location
        self.queues = [self.queue_path(q) for q in queues]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def location_path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}"

    def queue_path(self, queue: str) -> str:
        """Full queue name; a bare queue id is placed under this project and location."""
        return queue if "/" in queue else f"{self.location_path}/queues/{queue}"

    def check_installed(self) -> None:
        if not os.access(self.python, os.X_OK):
            raise EmulatorMissingError(
                f"Cloud Tasks emulator venv not found: expected {self.python} "
                f"(gcloud-tasks-emulator==0.6.2 in its own venv). Run scripts/bootstrap.sh, "
                f"or point SAFESEND_TASKS_VENV at such a venv."
            )
        if not TASKS_MAIN.is_file():
            raise EmulatorMissingError(f"Cloud Tasks emulator launcher missing: {TASKS_MAIN}")

    def command(self, port: int) -> list[str]:
        # -I: ignore PYTHON* variables and the script directory, so nothing from the
        # project's venv can leak into the protobuf<5 environment; -u: unbuffered log.
        argv = [
            str(self.python),
            "-I",
            "-u",
            str(TASKS_MAIN),
            "--port",
            str(port),
            "--max-retries",
            str(self.max_retries),
        ]
        for queue in self.queues:
            argv += ["--queue", queue]
        return argv

    def is_ready(self) -> bool:
        if not _tcp_open(LOOPBACK, self.port):
            return False
        return _grpc_list_queues_ok(self.host)

    def env(self) -> dict[str, str]:
        return {TASKS_EMULATOR_HOST_ENV: self.host}

    def client(self) -> Any:
        """A tasks_v2.CloudTasksClient connected to this emulator (needs google-cloud-tasks)."""
        from safesend.adapters.cloud_tasks import emulator_tasks_client

        return emulator_tasks_client(self.host)


def _grpc_list_queues_ok(host: str, timeout: float = 2.0) -> bool:
    """A real ListQueues RPC, sent as raw bytes so only grpcio is needed.

    Without grpcio in this interpreter, the TCP check already done has to suffice.
    """
    try:
        import grpc  # optional dependency, imported lazily on purpose
    except ImportError:
        return True
    with grpc.insecure_channel(host, options=list(_GRPC_LOCAL_OPTIONS)) as channel:
        list_queues = channel.unary_unary("/google.cloud.tasks.v2.CloudTasks/ListQueues")
        list_queues(b"", timeout=timeout)  # empty ListQueuesRequest; raises grpc.RpcError if not serving
    return True


# --------------------------------------------------------------------------- stack


class EmulatorStack:
    """Firestore + Pub/Sub + Cloud Tasks started together and stopped together."""

    def __init__(
        self,
        *,
        project: str = DEFAULT_PROJECT,
        log_dir: str | os.PathLike[str] | None = None,
        firestore_port: int | None = None,
        pubsub_port: int | None = None,
        tasks_port: int | None = None,
        tasks_queues: Iterable[str] = (),
        tasks_max_retries: int = 5,
        tasks_venv: str | os.PathLike[str] | None = None,
        startup_timeout: float | None = None,
    ) -> None:
        self.project = project
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="safesend-emulators-"))
        self.firestore = FirestoreEmulator(
            firestore_port, project, log_dir=self.log_dir, startup_timeout=startup_timeout
        )
        self.pubsub = PubSubEmulator(pubsub_port, project, log_dir=self.log_dir, startup_timeout=startup_timeout)
        self.tasks = CloudTasksEmulator(
            tasks_port,
            venv=tasks_venv,
            max_retries=tasks_max_retries,
            queues=tasks_queues,
            project=project,
            log_dir=self.log_dir,
            startup_timeout=startup_timeout,
        )

    @property
    def emulators(self) -> tuple[Emulator, ...]:
        return (self.firestore, self.pubsub, self.tasks)

    def start(self) -> Self:
        """Start all three in parallel (start-up is mostly JVM warm-up); all or nothing."""
        for emulator in self.emulators:
            emulator.check_installed()  # fail before launching anything
        with ThreadPoolExecutor(max_workers=len(self.emulators), thread_name_prefix="emulator-start") as pool:
            futures = [pool.submit(emulator.start) for emulator in self.emulators]
            errors = [f.exception() for f in futures]
        failures = [e for e in errors if e is not None]
        if failures:
            with contextlib.suppress(DevstackError):
                self.stop()
            if len(failures) == 1:
                raise failures[0]
            raise ProcessStartError("\n\n".join(str(e) for e in failures)) from failures[0]
        return self

    def stop(self) -> None:
        """Stop everything, even if one stop fails; then report the failures."""
        failures: list[BaseException] = []
        for emulator in reversed(self.emulators):
            try:
                emulator.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                failures.append(exc)
        if failures:
            raise ProcessStopError("; ".join(str(e) for e in failures))

    def env(self) -> dict[str, str]:
        """All client environment variables (emulator hosts)."""
        merged: dict[str, str] = {}
        for emulator in self.emulators:
            merged.update(emulator.env())
        return merged

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_all(**kwargs: Any) -> EmulatorStack:
    """Start Firestore, Pub/Sub and Cloud Tasks; use the result as a context manager to stop them."""
    return EmulatorStack(**kwargs).start()


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stack in the foreground, printing `export` lines; stop on Ctrl-C/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m devstack.emulators", description=main.__doc__)
    parser.add_argument("--project", default=DEFAULT_PROJECT)
    parser.add_argument("--firestore-port", type=int)
    parser.add_argument("--pubsub-port", type=int)
    parser.add_argument("--tasks-port", type=int)
    parser.add_argument("--tasks-queue", action="append", default=[], help="queue id or full path (repeatable)")
    parser.add_argument("--tasks-max-retries", type=int, default=5)
    parser.add_argument("--log-dir")
    args = parser.parse_args(argv)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    stack = EmulatorStack(
        project=args.project,
        log_dir=args.log_dir,
        firestore_port=args.firestore_port,
        pubsub_port=args.pubsub_port,
        tasks_port=args.tasks_port,
        tasks_queues=args.tasks_queue,
        tasks_max_retries=args.tasks_max_retries,
    )
    try:
        with stack:
            for key, value in stack.env().items():
                print(f"export {key}={value}")
            print(f"# logs: {stack.log_dir}  (Ctrl-C to stop)", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except DevstackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--watchdog":
        sys.exit(_watchdog_main(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
    sys.exit(main())
