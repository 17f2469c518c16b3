"""JobStore on PostgreSQL (table `ai_jobs`, schema in safesend/migrations), psycopg 3 with a pool.

Every operation is one statement in autocommit mode, so one round trip, never an explicit
transaction: a claim is `INSERT ... ON CONFLICT (id) DO NOTHING RETURNING`, a compare-and-set an
`UPDATE ... WHERE id = $id AND version = $expected RETURNING` (the version column is the
condition, every write bumps it). Statements are prepared on the server on first use per
connection (prepare_threshold 0). A new job costs 2 statements (claim, outcome), like Firestore's 2
writes; a duplicate request 1 refused insert + 1 select.

A write whose answer is lost (the connection drops after the server committed) is settled like
FirestoreJobStore does it: every write carries a fresh id in the store-private `write_id` column,
the same one on every retry of that write. After an ambiguous failure we re-read (version,
write_id): ours -> our write landed; the row as we expected it -> it did not, send it again (a
bounded number of times, within the store's timeout); anything else -> someone else wrote first.

The SQL lives in `_Sql`, the row <-> Job mapping in `job_row` / `job_from_row`, nowhere else.
Connections come from `connection_pool(dsn, connect_kwargs=...)`: `connect_kwargs` is called for
every new connection, which is where per-connection credentials plug in (`iam_login()`: Cloud SQL
IAM database authentication, an access token as the password).
"""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from ..core.errors import ConcurrentUpdateError, ConfigurationError, StoreUnavailableError
from ..core.model import Job, as_utc
from ..core.ports import Cursor
from ..core.states import State
from . import postgres_schema
from .store_common import BoundedAttempts, readable_page

MAX_WRITE_ATTEMPTS = 3  # and none started after the call's deadline; jittered backoff up to 0.1 s, then 0.2 s
MAX_READ_ATTEMPTS = 3
_BACKOFF_S = 0.1
SQL_LOGIN_SCOPE = "https://www.googleapis.com/auth/sqlservice.login"

# The server refused the statement because the schema or the grants are not what this code needs:
# no retry fixes that, so it is loud (a ConfigurationError), never "store unavailable".
_SCHEMA_ERRORS = (
    pg_errors.UndefinedTable,
    pg_errors.UndefinedColumn,
    pg_errors.UndefinedFunction,
    pg_errors.InvalidSchemaName,
    pg_errors.InsufficientPrivilege,
)


# --------------------------------------------------------------------------------------------- SQL

_COLUMNS = (
    "id",
    "message_id",
    "state",
    "payload",
    "attempts",
    "claimed_at",
    "provider_ref",
    "next_check_at",
    "notice_due_at",
    "updated_at",
    "version",
)  # Job fields kept as columns
_TIME_COLUMNS = ("claimed_at", "next_check_at", "notice_due_at", "updated_at")
# Places in a row of _Sql._select: the keysets of find_due, find_notices_due, find_open_reviews.
_DUE_AT, _NOTICE_AT, _UPDATED_AT = 7, 8, 9


class _Sql:
    """Every statement the store sends, written out. Parameters are named after the row's keys
    (job_row); JSON goes in as text and comes out as text (job_from_row decodes it)."""

    record_ops = (
        "INSERT INTO ops (name, doc, updated_at) VALUES (%(name)s, %(doc)s::jsonb, now()) "
        "ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc, updated_at = EXCLUDED.updated_at"
    )
    read_ops = "SELECT doc::text FROM ops WHERE name = %(name)s"
    read_lag = "SELECT doc::text, version FROM safesend_mailbox_lag WHERE mailbox = %(mailbox)s"
    create_lag = (
        "INSERT INTO safesend_mailbox_lag (mailbox, doc, version) VALUES (%(mailbox)s, %(doc)s::jsonb, 1) "
        "ON CONFLICT (mailbox) DO NOTHING RETURNING version"
    )
    update_lag = (
        "UPDATE safesend_mailbox_lag SET doc = %(doc)s::jsonb, version = version + 1, updated_at = now() "
        "WHERE mailbox = %(mailbox)s AND version = %(version)s RETURNING version"
    )
    all_lags = "SELECT mailbox, doc::text FROM safesend_mailbox_lag ORDER BY mailbox LIMIT 500"

    _select = (
        "SELECT id, message_id, state, payload::text, attempts, claimed_at, provider_ref::text, "
        "next_check_at, notice_due_at, updated_at, version, write_id, doc::text FROM ai_jobs"
    )
    claim = (
        "INSERT INTO ai_jobs (id, message_id, state, payload, attempts, claimed_at, provider_ref, next_check_at, "
        "notice_due_at, updated_at, version, write_id, doc) "
        "VALUES (%(id)s, %(message_id)s, %(state)s, %(payload)s::jsonb, %(attempts)s, %(claimed_at)s, "
        "%(provider_ref)s::jsonb, %(next_check_at)s, %(notice_due_at)s, %(updated_at)s, %(version)s, "
        "%(write_id)s, %(doc)s::jsonb) "
        "ON CONFLICT (id) DO NOTHING RETURNING version"
    )
    compare_and_set = (
        "UPDATE ai_jobs SET message_id = %(message_id)s, state = %(state)s, payload = %(payload)s::jsonb, "
        "attempts = %(attempts)s, claimed_at = %(claimed_at)s, provider_ref = %(provider_ref)s::jsonb, "
        "next_check_at = %(next_check_at)s, notice_due_at = %(notice_due_at)s, updated_at = %(updated_at)s, "
        "version = %(version)s, write_id = %(write_id)s, doc = %(doc)s::jsonb "
        "WHERE id = %(id)s AND version = %(expected_version)s RETURNING version"
    )
    get = _select + " WHERE id = %(id)s"
    write_of = "SELECT version, write_id FROM ai_jobs WHERE id = %(id)s"
    # Served by ai_jobs_due (state, next_check_at, id). No FOR UPDATE SKIP LOCKED: in autocommit a
    # row lock ends with the statement, so it would coordinate nothing and write a lock per row;
    # overlapping sweeps are settled by compare-and-set (one winner per job).
    find_due = _select + (
        " WHERE state = %(state)s AND next_check_at <= %(now)s ORDER BY next_check_at, id LIMIT %(limit)s"
    )
    # The next page (keyset on the index's own order): a row comparison after the last one seen.
    find_due_after = _select + (
        " WHERE state = %(state)s AND next_check_at <= %(now)s"
        " AND (next_check_at, id) > (%(after_at)s, %(after_id)s) ORDER BY next_check_at, id LIMIT %(limit)s"
    )
    find_open_reviews = _select + (
        " WHERE state IN ('review', 'failed') "  # ai_jobs_open_reviews
        "ORDER BY updated_at, id LIMIT %(limit)s"
    )
    find_open_reviews_after = _select + (
        " WHERE state IN ('review', 'failed') AND (updated_at, id) > (%(after_at)s, %(after_id)s) "
        "ORDER BY updated_at, id LIMIT %(limit)s"
    )
    find_notices_due = _select + (
        " WHERE notice_due_at <= %(now)s "  # ai_jobs_notices_due
        "ORDER BY notice_due_at, id LIMIT %(limit)s"
    )
    find_notices_due_after = _select + (
        " WHERE notice_due_at <= %(now)s AND (notice_due_at, id) > (%(after_at)s, %(after_id)s) "
        "ORDER BY notice_due_at, id LIMIT %(limit)s"
    )


# ------------------------------------------------------------------------------ row <-> Job mapping

_TS = "$ts"  # a timestamp inside JSON: {"$ts": "2026-11-29T12:00:00+00:00"}
# JSON text cannot carry NUL into PostgreSQL (jsonb refuses \u0000); only diagnostics could hold one
# (request fields are validated), so it is stored as U+FFFD instead of failing the write for good.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {_TS: as_utc(value).isoformat()}
    raise TypeError(f"cannot store a {type(value).__name__} in a job")


def _decode(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and isinstance(obj.get(_TS), str):
        return datetime.fromisoformat(obj[_TS]).astimezone(UTC)
    return obj


def dumps(value: Any) -> str:
    text = json.dumps(value, default=_encode, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return _JSON_NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text, object_hook=_decode)


def _after(cursor: Cursor) -> dict[str, Any]:
    """The keyset cursor's parameters: the last page's (due time, id)."""
    return {"after_at": as_utc(cursor[0]), "after_id": cursor[1]}


def job_row(job: Job, write_id: uuid.UUID) -> dict[str, Any]:
    """The row that stores `job`: the column fields as columns, the rest in `doc`, plus the write id."""
    data = job.to_dict()  # never the store token
    row = {name: data.pop(name) for name in _COLUMNS}
    for name in _TIME_COLUMNS:  # a naive time means UTC (as in Firestore), never the session's zone
        row[name] = as_utc(row[name])
    row["payload"] = dumps(row["payload"])
    row["provider_ref"] = None if row["provider_ref"] is None else dumps(row["provider_ref"])
    row["doc"] = dumps(data)
    row["write_id"] = write_id
    return row


def job_from_row(row: Sequence[Any]) -> Job:
    """The Job a row of `_Sql._select` holds. Raises TypeError/ValueError/KeyError if it is not one."""
    (
        job_id,
        message_id,
        state,
        payload,
        attempts,
        claimed_at,
        provider_ref,
        next_check_at,
        notice_due_at,
        updated_at,
        version,
        _write_id,
        doc,
    ) = row
    data = loads(doc)
    if not isinstance(data, dict):
        raise TypeError(f"doc is a JSON {type(data).__name__}, not an object")
    data.update(
        id=job_id,
        message_id=message_id,
        state=state,
        payload=loads(payload),
        attempts=attempts,
        claimed_at=claimed_at,
        provider_ref=loads(provider_ref),
        next_check_at=next_check_at,
        notice_due_at=notice_due_at,
        updated_at=updated_at,
        version=version,
    )
    return Job.from_dict(data)


# --------------------------------------------------------------------------------------- connections


def _with_session_options(dsn: str, timeout_s: float) -> str:
    """The DSN's own `options` plus server-side bounds on every statement of our sessions."""
    existing = psycopg.conninfo.conninfo_to_dict(dsn).get("options") or ""
    timeout_ms = int(timeout_s * 1000)
    return (
        f"{existing} -c statement_timeout={timeout_ms} -c lock_timeout={timeout_ms} "
        f"-c idle_in_transaction_session_timeout={timeout_ms * 3}"
    ).strip()


def connection_kwargs(dsn: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """libpq and psycopg parameters of every store connection: autocommit (one statement, one round
    trip), server-side prepared statements from the first execution, bounded connects and statements,
    TCP keepalives so a vanished server is noticed."""
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "application_name": "safesend",
        "connect_timeout": max(2, math.ceil(timeout_s)),
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": int(timeout_s * 1000),
        "options": _with_session_options(dsn, timeout_s),
    }


def connection_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 4,
    timeout_s: float = 10.0,
    connect_kwargs: Callable[[], Mapping[str, Any]] | None = None,
    name: str = "safesend-jobs",
) -> ConnectionPool:
    """A pool that opens in the background (building a runtime never waits for the database).
    `connect_kwargs`, if given, is called for every new connection and its parameters override the
    DSN's: e.g. {"password": <fresh token>} (iam_login), or a host from a connector."""
    base = connection_kwargs(dsn, timeout_s)
    kwargs: Any = base if connect_kwargs is None else (lambda: {**base, **connect_kwargs()})
    pool = ConnectionPool(
        dsn,
        kwargs=kwargs,
        min_size=min_size,
        max_size=max(min_size, max_size),
        timeout=timeout_s,
        open=False,
        name=name,
        max_idle=300.0,
        reconnect_timeout=max(60.0, timeout_s),
    )
    pool.open(wait=False)
    return pool


def connect(
    dsn: str, connect_kwargs: Callable[[], Mapping[str, Any]] | None = None, timeout_s: float = 10.0
) -> psycopg.Connection:
    """One connection with the store's settings (the migration command)."""
    return psycopg.connect(dsn, **{**connection_kwargs(dsn, timeout_s), **(connect_kwargs() if connect_kwargs else {})})


def iam_login(credentials: Any = None, request: Any = None) -> Callable[[], dict[str, str]]:
    """Cloud SQL IAM database authentication without a connector library: for each new connection,
    the password is an OAuth2 access token of `credentials` (default: the runtime's service account,
    scope sqlservice.login), refreshed when it is no longer valid. The DSN names the IAM database user
    (a service account's email without `.gserviceaccount.com`) and no password. Cloud SQL checks the
    token at login only, so pooled connections outlive it."""
    lock = threading.Lock()
    state: dict[str, Any] = {"credentials": credentials, "request": request}

    def params() -> dict[str, str]:
        with lock:
            if state["credentials"] is None:
                import google.auth

                state["credentials"], _ = google.auth.default(scopes=[SQL_LOGIN_SCOPE])
            creds = state["credentials"]
            if not creds.valid:
                if state["request"] is None:
                    from google.auth.transport.requests import Request

                    state["request"] = Request()
                creds.refresh(state["request"])
            return {"password": creds.token}

    return params


class _NotSentError(Exception):
    """No connection could be had: the statement never left this process."""


# ------------------------------------------------------------------------------------------- store


class PostgresJobStore:
    """One row per job. Thread-safe (connections come from the pool, one per operation)."""

    def __init__(self, pool: ConnectionPool, *, timeout_s: float = 10.0, migrate: bool = True):
        """`migrate`: apply pending migrations on first use (else only check none is pending)."""
        self._pool = pool
        self._timeout_s = timeout_s
        self._migrate = migrate
        self._schema_ok = False
        self._schema_lock = threading.Lock()

    @property
    def pool(self) -> ConnectionPool:
        return self._pool

    def close(self) -> None:
        self._pool.close()

    # -- the port

    def claim_or_get(self, job: Job) -> tuple[Job, bool]:
        """INSERT ... ON CONFLICT DO NOTHING: exactly one of any number of concurrent claims inserts;
        the others insert nothing and read the winner's row. Our own insert is recognised by its write
        id after a lost answer, never by caller data such as lease_owner."""
        stored = job.copy()
        stored.version, stored.store_token = 1, None
        write_id = uuid.uuid4()
        if self._write(
            job.id,
            _Sql.claim,
            job_row(stored, write_id),
            write_id,
            stored.version,
            untouched=lambda current: current is None,
        ):
            return stored, True
        existing = self.get(job.id)
        if existing is None:
            raise StoreUnavailableError(f"job {job.id} reported as existing but cannot be read")
        return existing, False

    def get(self, job_id: str) -> Job | None:
        rows = self._read(_Sql.get, {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    def compare_and_set(self, job: Job, expected_version: int) -> Job:
        """One conditional UPDATE on the version column; no read first, whatever the job carries."""
        stored = job.copy()
        stored.version, stored.store_token = expected_version + 1, None
        write_id = uuid.uuid4()
        params = {**job_row(stored, write_id), "expected_version": expected_version}
        if not self._write(
            job.id,
            _Sql.compare_and_set,
            params,
            write_id,
            stored.version,
            untouched=lambda current: current is not None and current[0] == expected_version,
        ):
            raise ConcurrentUpdateError(job.id)
        return stored

    def find_due(self, state: State, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        params = {"state": state.value, "now": as_utc(now)}
        return self._page(_Sql.find_due, _Sql.find_due_after, params, _DUE_AT, limit, start_after)

    def find_open_reviews(self, limit: int) -> Sequence[Job]:
        return self._page(_Sql.find_open_reviews, _Sql.find_open_reviews_after, {}, _UPDATED_AT, limit, None)

    def find_notices_due(self, now: datetime, limit: int, start_after: Cursor | None = None) -> Sequence[Job]:
        params = {"now": as_utc(now)}
        return self._page(_Sql.find_notices_due, _Sql.find_notices_due_after, params, _NOTICE_AT, limit, start_after)

    def record_sweep(self, summary: Mapping[str, Any]) -> None:
        """An upsert of the `sweep` row (idempotent: tried again like a read)."""
        self._read(_Sql.record_ops, {"name": "sweep", "doc": dumps(dict(summary))})

    def last_sweep(self) -> dict[str, Any] | None:
        rows = self._read(_Sql.read_ops, {"name": "sweep"})
        return dict(loads(rows[0][0])) if rows else None

    def record_op(self, name: str, doc: Mapping[str, Any]) -> None:
        """An upsert of the row `op:<name>` of the ops table (apart from `sweep`)."""
        self._read(_Sql.record_ops, {"name": f"op:{name}", "doc": dumps(dict(doc))})

    def read_op(self, name: str) -> dict[str, Any] | None:
        rows = self._read(_Sql.read_ops, {"name": f"op:{name}"})
        return dict(loads(rows[0][0])) if rows else None

    def read_mailbox_lag(self, mailbox: str) -> tuple[dict[str, Any] | None, Any]:
        """The token is the row's version (None: no row)."""
        rows = self._read(_Sql.read_lag, {"mailbox": mailbox})
        return (dict(loads(rows[0][0])), int(rows[0][1])) if rows else (None, None)

    def write_mailbox_lag(self, mailbox: str, record: Mapping[str, Any], token: Any) -> bool:
        """One conditional statement (insert if absent, else update at the version read). A retry after
        a lost answer meets its own write and reports a lost race: the caller reads again."""
        params = {"mailbox": mailbox, "doc": dumps(dict(record)), "version": token}
        return bool(self._read(_Sql.create_lag if token is None else _Sql.update_lag, params))

    def mailbox_lags(self) -> dict[str, dict[str, Any]]:
        return {str(mailbox): dict(loads(doc)) for mailbox, doc in self._read(_Sql.all_lags, {})}

    # -- schema

    def ensure_schema(self) -> None:
        """Migrate (or check) once per store; until it succeeds, every operation tries again first."""
        if self._schema_ok:
            return
        with self._schema_lock:
            if self._schema_ok:
                return
            try:
                with self._pool.connection(timeout=self._timeout_s) as conn:
                    if not conn.autocommit:
                        conn.autocommit = True
                    if self._migrate:
                        postgres_schema.migrate(conn)
                    else:
                        postgres_schema.require_current(conn)
            except (PoolTimeout, psycopg.OperationalError) as exc:
                raise StoreUnavailableError(f"postgres: schema check: {exc}") from exc
            except _SCHEMA_ERRORS as exc:
                raise ConfigurationError(f"postgres_schema: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreUnavailableError(f"postgres: schema check: {exc}") from exc
            self._schema_ok = True

    # -- statements

    def _run(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """One statement on a pooled connection. _NotSentError if no connection could be had."""
        self.ensure_schema()
        try:
            conn = self._pool.getconn(timeout=self._timeout_s)
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise _NotSentError(str(exc)) from exc
        try:
            if not conn.autocommit:  # a pool from elsewhere: never leave a transaction open
                conn.autocommit = True
            cursor = conn.execute(sql, params, prepare=True)
            return cursor.fetchall() if cursor.description else []
        finally:
            self._pool.putconn(conn)  # a broken connection is discarded and replaced by the pool

    def _read(self, sql: str, params: Mapping[str, Any], deadline: float | None = None) -> list[tuple[Any, ...]]:
        """An idempotent read, tried again on a lost connection until `deadline` (the store call's;
        default: the timeout from now)."""
        error: Exception | None = None
        attempts = BoundedAttempts(MAX_READ_ATTEMPTS, self._timeout_s, _BACKOFF_S, deadline)
        for _ in attempts:
            try:
                return self._run(sql, params)
            except (_NotSentError, psycopg.OperationalError) as exc:
                error = exc
            except _SCHEMA_ERRORS as exc:
                raise ConfigurationError(f"postgres_schema: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreUnavailableError(f"postgres: {exc}") from exc
        raise StoreUnavailableError(f"postgres: read failed after {attempts.made} attempt(s): {error}") from error

    def _write(
        self,
        job_id: str,
        sql: str,
        params: Mapping[str, Any],
        write_id: uuid.UUID,
        version: int,
        untouched: Callable[[tuple[int, uuid.UUID] | None], bool],
    ) -> bool:
        """Send one conditional write until its fate is known: True if our write is stored, False if
        its condition failed (another write won). Every attempt sends the same row under the same
        condition, so at most one of them can ever apply."""
        maybe_landed = False
        error: Exception | None = None
        attempts = BoundedAttempts(MAX_WRITE_ATTEMPTS, self._timeout_s, _BACKOFF_S)
        for _ in attempts:
            try:
                if self._run(sql, params):
                    return True
                if not maybe_landed:
                    return False
                # Refused after an attempt that may have landed: the re-read below decides.
            except _NotSentError as exc:
                error = exc
                continue
            except psycopg.OperationalError as exc:  # the connection broke: the server may have committed
                error = exc
                maybe_landed = True
            except _SCHEMA_ERRORS as exc:
                raise ConfigurationError(f"postgres_schema: {exc}") from exc
            except psycopg.Error as exc:  # refused by the server: the statement was not applied
                if maybe_landed:
                    error = exc
                else:
                    raise StoreUnavailableError(f"postgres: {exc}") from exc
            rows = self._read(_Sql.write_of, {"id": job_id}, attempts.deadline)  # within the write's deadline
            current = (rows[0][0], rows[0][1]) if rows else None
            if current == (version, write_id):
                return True
            if not untouched(current):
                return False
        raise StoreUnavailableError(
            f"postgres: write of {job_id} not stored after {attempts.made} attempt(s) "
            f"(a late one may still land): {error}"
        ) from error

    def _page(
        self,
        first: str,
        following: str,
        params: Mapping[str, Any],
        order_column: int,
        limit: int,
        start_after: Cursor | None,
    ) -> list[Job]:
        """A keyset page of readable jobs: `first` from the start, `following` after a cursor; rows that
        are not jobs are left out and read past (store_common.readable_page)."""

        def fetch(after: Cursor | None, count: int) -> list[tuple[Any, ...]]:
            if after is None:
                return self._read(first, {**params, "limit": count})
            return self._read(following, {**params, "limit": count, **_after(after)})

        def position(row: tuple[Any, ...]) -> tuple[Cursor, str]:
            return (row[order_column], row[0]), row[0]

        return readable_page(fetch, job_from_row, position, limit, start_after)


def build_store(settings: Any) -> PostgresJobStore:
    """The store a runtime uses when SAFESEND_STORE=postgres. Reads, with these defaults:
    postgres_dsn (required), postgres_iam_auth (False), postgres_pool_max (4),
    postgres_timeout_s (10.0), postgres_migrate (True)."""
    dsn = getattr(settings, "postgres_dsn", None)
    if not dsn:
        raise ConfigurationError("SAFESEND_STORE=postgres needs SAFESEND_POSTGRES_DSN")
    timeout_s = float(getattr(settings, "postgres_timeout_s", 10.0))
    connect_kwargs = iam_login() if getattr(settings, "postgres_iam_auth", False) else None
    pool = connection_pool(
        dsn, max_size=int(getattr(settings, "postgres_pool_max", 4)), timeout_s=timeout_s, connect_kwargs=connect_kwargs
    )
    return PostgresJobStore(pool, timeout_s=timeout_s, migrate=bool(getattr(settings, "postgres_migrate", True)))
