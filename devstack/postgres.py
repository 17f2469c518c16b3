"""A throwaway PostgreSQL server for tests, the local stack and the benchmarks (local only, never deployed).

Debian's server binaries (scripts/install-postgres.sh): `initdb` into a fresh temporary directory,
then `postgres` on a free 127.0.0.1 port (no Unix socket), in its own process group through
devstack.emulators.ManagedProcess (log file, orphan watchdog). PostgreSQL refuses to run as root,
so under root both run as the `postgres` system user (setpriv, which execs: the pid we hold is the
postmaster's).

Stopping: the postmaster puts every backend it forks in a process group of its own, so signalling
its group alone would not reach them, and its SIGTERM ("smart" shutdown) waits for every client to
disconnect, which a connection pool never does. stop() therefore sends SIGINT (fast shutdown: the
postmaster terminates its backends, checkpoints, exits), waits (bounded), then lets ManagedProcess
stop the group (SIGTERM, SIGKILL), and finally SIGKILLs the group of any backend of ours still
alive. The data directory is deleted afterwards.

    with PostgresServer() as pg:
        dsn = pg.dsn()                 # postgresql://safesend@127.0.0.1:<port>/safesend
        schema_dsn = pg.schema_dsn(pg.create_schema())   # an isolated schema (search_path)
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from devstack.emulators import (
    LOOPBACK,
    DevstackError,
    EmulatorMissingError,
    ManagedProcess,
    PortInUseError,
    ProcessStartError,
    _tcp_open,
    free_port,
)
from devstack.procs import alive, children_of

BIN_ENV = "SAFESEND_POSTGRES_BIN"
USER_ENV = "SAFESEND_POSTGRES_USER"
SUPERUSER = "safesend"  # the bootstrap superuser initdb creates; trusted on loopback only
DATABASE = "safesend"
INSTALL_HINT = "run scripts/install-postgres.sh (Debian: apt-get install -y postgresql)"

# Fast and disposable: tests and the local stack lose nothing if the machine crashes.
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def find_bin_dir() -> Path:
    """$SAFESEND_POSTGRES_BIN, else the newest /usr/lib/postgresql/<major>/bin (Debian's layout)."""
    override = os.environ.get(BIN_ENV)
    if override:
        return Path(override)
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1
    )
    if not found:
        raise EmulatorMissingError(
            f"PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: {INSTALL_HINT}, or set {BIN_ENV}"
        )
    return found[-1]


def _run_as() -> pwd.struct_passwd | None:
    """The user to run the server as: None when we are not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(USER_ENV, "postgres")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise EmulatorMissingError(
            f"running as root, but there is no user {name!r} to run PostgreSQL as: "
            f"{INSTALL_HINT} (it creates `postgres`), or set {USER_ENV}"
        ) from None


class PostgresServer:
    """One initdb'd data directory and one postmaster on 127.0.0.1; start() waits until it answers."""

    name = "postgres"

    def __init__(
        self,
        port: int | None = None,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        durable: bool = False,
        settings: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
    ):
        """durable=False turns fsync and synchronous commit off (tests, local stack); the benchmarks
        keep PostgreSQL's defaults. `settings` are extra server settings (-c name=value)."""
        self._requested_port = port
        self._port: int | None = port
        self.durable = durable
        self.settings = dict(settings or {})
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="safesend-pg-logs-"))
        self.base_dir: Path | None = None
        self.process: ManagedProcess | None = None
        self.startup_seconds: float | None = None
        self.version: str | None = None

    # -- addresses

    @property
    def port(self) -> int:
        if self._port is None:
            raise DevstackError("postgres has no port yet: call start() first")
        return self._port

    @property
    def host(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def dsn(self, database: str = DATABASE, user: str = SUPERUSER, **params: str) -> str:
        """A libpq URI for `database` as `user` (trusted on loopback), plus any libpq parameters."""
        query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in {"sslmode": "disable", **params}.items())
        return f"postgresql://{quote(user, safe='')}@{LOOPBACK}:{self.port}/{quote(database, safe='')}?{query}"

    def schema_dsn(self, schema: str, database: str = DATABASE, **params: str) -> str:
        """A DSN whose sessions use `schema` (search_path): an isolated set of tables per test or bench."""
        return self.dsn(database, options=f"-c search_path={schema}", **params)

    def env(self, schema: str | None = None) -> dict[str, str]:
        """What a safesend process needs to use this server as its job store."""
        return {
            "SAFESEND_STORE": "postgres",
            "SAFESEND_POSTGRES_DSN": self.schema_dsn(schema) if schema else self.dsn(),
        }

    # -- administration (as the superuser, autocommit)

    def execute(self, sql: str, params: Sequence[Any] | None = None, database: str = DATABASE) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.dsn(database), autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def create_schema(self, prefix: str = "t") -> str:
        """A new, empty schema with a unique name; returns the name."""
        schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.execute(f'CREATE SCHEMA "{schema}"')
        return schema

    def drop_schema(self, schema: str) -> None:
        self.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    # -- lifecycle

    def check_installed(self) -> Path:
        bin_dir = find_bin_dir()
        for tool in ("initdb", "postgres"):
            if not os.access(bin_dir / tool, os.X_OK):
                raise EmulatorMissingError(f"{bin_dir / tool} is missing or not executable: {INSTALL_HINT}")
        if _run_as() is not None and shutil.which("setpriv") is None:
            raise EmulatorMissingError(
                "running as root needs setpriv (util-linux) to start PostgreSQL as "
                "another user: apt-get install -y util-linux"
            )
        return bin_dir

    def _as_user(self, argv: list[str]) -> list[str]:
        user = _run_as()
        if user is None:
            return argv
        return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--", *argv]

    def _initdb(self, bin_dir: Path) -> Path:
        self.base_dir = Path(tempfile.mkdtemp(prefix="safesend-pg-"))
        user = _run_as()
        if user is not None:
            os.chown(self.base_dir, user.pw_uid, user.pw_gid)
        data = self.base_dir / "data"
        argv = self._as_user(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]
        )
        try:
            done = subprocess.run(
                argv,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.startup_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ProcessStartError(f"initdb did not finish in {self.startup_timeout:.0f}s") from exc
        if done.returncode != 0:
            raise ProcessStartError(
                f"initdb failed ({done.returncode}): {(done.stderr or done.stdout).decode(errors='replace')[-2000:]}"
            )
        # Loopback TCP only: the bootstrap superuser is trusted; any other role needs its password
        # (scram), so tests can check password / IAM-token style logins against the same server.
        (data / "pg_hba.conf").write_text(
            f"host all {SUPERUSER} 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
        )
        return data

    def _command(self, bin_dir: Path, data: Path, port: int) -> list[str]:
        settings = {
            "listen_addresses": LOOPBACK,
            "port": str(port),
            "unix_socket_directories": "",
            "max_connections": "200",
            "log_min_messages": "warning",
            "log_timezone": "UTC",
            **({} if self.durable else THROWAWAY_SETTINGS),
            **self.settings,
        }
        argv = [str(bin_dir / "postgres"), "-D", str(data)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        return self._as_user(argv)

    def _ready(self) -> bool:
        if not _tcp_open(LOOPBACK, self.port):
            return False
        self.version = self.execute("SHOW server_version", database="postgres")[0][0]
        return True

    def is_running(self) -> bool:
        return self.process is not None and self.process.is_running()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def pgid(self) -> int | None:
        return self.process.pgid if self.process else None

    def start(self) -> Self:
        if self.is_running():
            return self
        bin_dir = self.check_installed()
        started = time.monotonic()
        data = self._initdb(bin_dir)
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            if _tcp_open(LOOPBACK, port):
                if attempt < attempts:
                    continue
                raise PortInUseError(f"postgres: port {port} on {LOOPBACK} is already in use")
            self._port = port
            self.process = ManagedProcess(
                self._command(bin_dir, data, port),
                name=f"postgres-{port}",
                log_dir=self.log_dir,
                cwd=self.base_dir,
                stop_timeout=self.stop_timeout,
            )
            self.process.start()
            try:
                self.process.wait_ready(self._ready, timeout=self.startup_timeout, what=f"ready on {self.host}")
                self.execute(f'CREATE DATABASE "{DATABASE}"', database="postgres")
            except ProcessStartError:
                exited_early = not self.process.is_running()
                self._stop_process()
                if exited_early and attempt < attempts:
                    continue  # most likely lost the race for the port
                self._remove_data()
                raise
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - started
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def _stop_process(self) -> None:
        proc = self.process
        if proc is None or proc.pid is None:
            return
        backends = children_of(proc.pid)
        if proc.is_running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)  # fast shutdown: ends every backend, then exits
            deadline = time.monotonic() + self.stop_timeout
            while proc.is_running() and time.monotonic() < deadline:
                time.sleep(0.05)
        backends += [pid for pid in children_of(proc.pid) if pid not in backends]
        proc.stop()  # reaps the postmaster; SIGTERM, then SIGKILL, to its group if it is still there
        for pid in backends:  # each backend leads a process group of its own
            if alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def _remove_data(self) -> None:
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def stop(self) -> None:
        """Stop the server and everything it forked, then delete its data directory; idempotent."""
        try:
            self._stop_process()
        finally:
            self._remove_data()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.is_running() else "stopped"
        return f"<PostgresServer {LOOPBACK}:{self._port or 'auto'} {state}>"


# ----------------------------------------------------------------------------------- fault proxy


class PgFaultProxy:
    """A TCP proxy on 127.0.0.1 in front of a PostgreSQL server, for fault tests (never deployed).

    The dangerous failure of a write is not "the server refused" but "the server committed it and
    the answer never came back" (a connection dropped after COMMIT). Only a real server can commit,
    so the fault sits on the wire, reading the server's messages (type byte + length frames):

    - ``lose_write_answers``: the next `times` statements that the server reports as an applied
      write (CommandComplete ``INSERT 0 1`` / ``UPDATE 1``), on a connection whose request carried
      `needle` (any request if None), run to completion: the proxy waits for ReadyForQuery (the
      implicit transaction has committed), swallows the answer and closes both sides;
    - ``fail_before_send``: the next `times` requests carrying `needle` (any Bind or Query message
      if None) are never forwarded: both sides are closed at once;
    - ``cut``: every open connection is closed and new ones are closed on accept, until ``restore``.

    It also counts what crossed the wire (``wire()``): the client's messages by type (Parse, Bind,
    Execute, Sync, simple Query...), statements that control a transaction (BEGIN, COMMIT...), the
    server's ReadyForQuery (one per round trip) and the rows its CommandCompletes report as read
    (SELECT n) and written (INSERT/UPDATE/DELETE n).

    Clients must connect with sslmode=disable and gssencmode=disable (plain frames). Thread-safe;
    every injected fault is recorded in ``injected``.
    """

    def __init__(self, upstream_port: int, upstream_host: str = LOOPBACK):
        import socket
        import threading

        self._socket_mod = socket
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._rules: list[dict[str, Any]] = []
        self._counts: dict[str, int] = {}
        self._cut = False
        self._pairs: set[tuple[Any, Any]] = set()
        self._closed = threading.Event()
        self.injected: list[str] = []
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept_loop, name="pg-fault-proxy", daemon=True)
        self._accept_thread.start()

    def dsn_of(self, server: PostgresServer, schema: str | None = None, **params: str) -> str:
        """`server`'s DSN (optionally isolated to `schema`), through this proxy."""
        base = (
            server.schema_dsn(schema, gssencmode="disable", **params)
            if schema
            else server.dsn(gssencmode="disable", **params)
        )
        return base.replace(f":{server.port}/", f":{self.port}/", 1)

    # -- rules

    def lose_write_answers(self, times: int = 1, needle: bytes | None = None) -> None:
        with self._lock:
            self._rules.append({"mode": "lose_answer", "remaining": times, "needle": needle})

    def fail_before_send(self, times: int = 1, needle: bytes | None = None) -> None:
        with self._lock:
            self._rules.append({"mode": "fail_before_send", "remaining": times, "needle": needle})

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def count(self, mode: str | None = None) -> int:
        with self._lock:
            return sum(1 for m in self.injected if mode is None or m == mode)

    def wire(self) -> dict[str, int]:
        """Counters so far: client messages by name, round_trips, rows_read, rows_written."""
        with self._lock:
            return dict(self._counts)

    def _count(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] = self._counts.get(name, 0) + amount

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            pairs = list(self._pairs)
        for pair in pairs:
            self._close(pair)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed.set()
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._accept_thread.join(timeout=5)
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> PgFaultProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing

    def _take(self, mode: str, data: bytes) -> bool:
        """Use up one matching rule of `mode` for a request carrying `data`."""
        with self._lock:
            for rule in self._rules:
                if rule["mode"] != mode or rule["remaining"] <= 0:
                    continue
                needle = rule["needle"]
                if needle is None and mode == "fail_before_send" and data[:1] not in (b"B", b"Q", b"P"):
                    continue
                if needle is not None and needle not in data:
                    continue
                rule["remaining"] -= 1
                self.injected.append(mode)
                return True
        return False

    def _lost_answer_rule(self, data: bytes) -> dict[str, Any] | None:
        """The lose_answer rule a request carrying `data` would use, if any (not used up yet)."""
        with self._lock:
            return next(
                (
                    r
                    for r in self._rules
                    if r["mode"] == "lose_answer"
                    and r["remaining"] > 0
                    and (r["needle"] is None or r["needle"] in data)
                ),
                None,
            )

    def _use(self, rule: dict[str, Any]) -> bool:
        with self._lock:
            if rule["remaining"] <= 0:
                return False
            rule["remaining"] -= 1
            self.injected.append(rule["mode"])
            return True

    def _accept_loop(self) -> None:
        import threading

        self._listener.settimeout(0.2)
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                client.close()
                continue
            try:
                server = self._socket_mod.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            pair = (client, server)
            state: dict[str, Any] = {"armed": None}
            with self._lock:
                self._pairs.add(pair)
            for target in (self._client_to_server, self._server_to_client):
                thread = threading.Thread(target=target, args=(pair, state), daemon=True, name="pg-fault-pump")
                thread.start()
                self._threads.append(thread)
            self._threads = [t for t in self._threads if t.is_alive()]

    def _close(self, pair: tuple[Any, Any]) -> None:
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(self._socket_mod.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        with self._lock:
            self._pairs.discard(pair)

    def _client_to_server(self, pair: tuple[Any, Any], state: dict[str, Any]) -> None:
        import struct

        client, server = pair
        buffer, started = b"", False
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                if self._take("fail_before_send", data):
                    break
                state["armed"] = self._lost_answer_rule(data)  # requests on a connection are serial
                buffer += data
                while True:  # count whole frames; the first one (startup) has no type byte
                    head = 4 if not started else 5
                    if len(buffer) < head:
                        break
                    length = struct.unpack("!I", buffer[head - 4 : head])[0] + (head - 4)
                    if len(buffer) < length:
                        break
                    kind = _CLIENT_MESSAGES.get(buffer[:1], "other") if started else "startup"
                    frame, buffer, started = buffer[:length], buffer[length:], True
                    self._count(**{kind: 1})
                    if kind in ("query", "parse") and _controls_a_transaction(frame, kind):
                        self._count(transaction_control=1)
                server.sendall(data)
        except OSError:
            pass
        self._close(pair)

    def _server_to_client(self, pair: tuple[Any, Any], state: dict[str, Any]) -> None:
        import struct

        client, server = pair
        buffer = b""
        swallowing = False
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                buffer += data
                forward = b""
                while len(buffer) >= 5:
                    length = struct.unpack("!I", buffer[1:5])[0]
                    if len(buffer) < 1 + length:
                        break
                    frame, buffer = buffer[: 1 + length], buffer[1 + length :]
                    if frame[:1] == b"Z":
                        self._count(round_trips=1)
                    elif frame[:1] == b"C":
                        self._count(**_rows_of(frame[5:]))
                    if swallowing:
                        if frame[:1] == b"Z":  # ReadyForQuery: the implicit transaction has committed
                            client.sendall(forward)
                            raise ConnectionAbortedError("answer lost on purpose")
                        continue
                    if frame[:1] == b"C" and state["armed"] is not None and _applied_write(frame[5:]):
                        rule, state["armed"] = state["armed"], None
                        if self._use(rule):
                            swallowing = True
                            continue
                    forward += frame
                if forward:
                    client.sendall(forward)
        except OSError:
            pass
        self._close(pair)


_CLIENT_MESSAGES = {
    b"P": "parse",
    b"B": "bind",
    b"E": "execute",
    b"S": "sync",
    b"Q": "query",
    b"D": "describe",
    b"C": "close",
    b"H": "flush",
    b"X": "terminate",
    b"p": "password",
}


def _controls_a_transaction(frame: bytes, kind: str) -> bool:
    """A Query or Parse message whose SQL is BEGIN, START TRANSACTION, COMMIT, ROLLBACK, SAVEPOINT..."""
    body = frame[5:]
    if kind == "parse":  # statement name, then the query, both NUL-terminated
        body = body.split(b"\x00", 1)[-1]
    words = body.split(b"\x00", 1)[0].strip().upper().split()
    return bool(words) and words[0] in (
        b"BEGIN",
        b"START",
        b"COMMIT",
        b"ROLLBACK",
        b"SAVEPOINT",
        b"RELEASE",
        b"END",
        b"ABORT",
    )


def _rows_of(tag: bytes) -> dict[str, int]:
    """Rows a CommandComplete tag reports: SELECT n -> read; INSERT 0 n, UPDATE n, DELETE n -> written."""
    words = tag.rstrip(b"\x00").split()
    if len(words) < 2 or not words[-1].isdigit():
        return {}
    if words[0] == b"SELECT":
        return {"rows_read": int(words[-1])}
    if words[0] in (b"INSERT", b"UPDATE", b"DELETE"):
        return {"rows_written": int(words[-1])}
    return {}


def _applied_write(tag: bytes) -> bool:
    """A CommandComplete tag of a write that changed a row: b'INSERT 0 1', b'UPDATE 1'."""
    words = tag.rstrip(b"\x00").split()
    return bool(words) and words[0] in (b"INSERT", b"UPDATE") and words[-1] != b"0"
