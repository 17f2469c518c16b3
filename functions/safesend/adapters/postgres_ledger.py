"""MailboxLedger on PostgreSQL: one row per mailbox in `safesend_mailbox_budgets` (migration 0002).

Each change is one short transaction: lock the mailbox's row (SELECT ... FOR UPDATE; the row is
created first if it does not exist yet), apply safesend.core.mailbox_budget's rules, write the row back.
Concurrent instances queue on the row lock for the few milliseconds it is held, so every decision
is made on the latest budget. A refusal writes nothing (the transaction ends without an UPDATE).

Connections come from the job store's pool helper (postgres_store.connection_pool: autocommit,
bounded statements, lock waits bounded by lock_timeout). A connection lost before the transaction
committed changed nothing and the change is decided again; one lost during COMMIT may or may not
have landed: decided again too, so at worst a reservation is counted twice (slower, never over
Gmail's limit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ..core import mailbox_budget
from ..core.errors import ConfigurationError, StoreUnavailableError
from ..core.mailbox_budget import Budget, MailboxSnapshot, Refusal, Reservation
from ..core.mailboxes import Mailbox
from . import postgres_schema
from .postgres_store import _SCHEMA_ERRORS

T = TypeVar("T")
MAX_ATTEMPTS = 3
_BACKOFF_S = 0.1
_CREATE = (
    "INSERT INTO safesend_mailbox_budgets (mailbox, budget) VALUES (%(mailbox)s, '{}'::jsonb) "
    "ON CONFLICT (mailbox) DO NOTHING"
)
_LOCK = "SELECT budget::text FROM safesend_mailbox_budgets WHERE mailbox = %(mailbox)s FOR UPDATE"
_READ = "SELECT budget::text FROM safesend_mailbox_budgets WHERE mailbox = %(mailbox)s"
_WRITE = (
    "UPDATE safesend_mailbox_budgets SET budget = %(budget)s::jsonb, updated_at = now() WHERE mailbox = %(mailbox)s"
)


class PostgresMailboxLedger:
    """Thread-safe (one pooled connection per call)."""

    def __init__(self, pool: ConnectionPool, *, timeout_s: float = 10.0, migrate: bool = True):
        self._pool = pool
        self._timeout_s = timeout_s
        self._migrate = migrate
        self._schema_ok = False

    def reserve(
        self, mailbox: Mailbox, units: int, recipients: int, now: datetime, behind_turns: bool = False
    ) -> Reservation | Refusal:
        return self._apply(
            mailbox, lambda budget: mailbox_budget.reserve(budget, mailbox, units, recipients, now, behind_turns)
        )

    def book_turn(self, mailbox: Mailbox, not_before: datetime, now: datetime) -> datetime:
        return self._apply(mailbox, lambda budget: mailbox_budget.book_turn(budget, mailbox, not_before, now))

    def penalise(self, mailbox: Mailbox, kind: str, now: datetime, until: datetime | None = None) -> bool:
        return self._apply(mailbox, lambda budget: mailbox_budget.penalise(budget, mailbox, kind, now, until))

    def snapshot(self, mailbox: Mailbox, now: datetime) -> MailboxSnapshot:
        def read(conn: psycopg.Connection[Any]) -> Budget:
            row = conn.execute(_READ, {"mailbox": mailbox.id}).fetchone()
            return _budget(row[0] if row else None)

        return mailbox_budget.snapshot(self._run(read), mailbox, now)

    def _apply(self, mailbox: Mailbox, change: Callable[[Budget], T]) -> T:
        params = {"mailbox": mailbox.id}

        def locked(conn: psycopg.Connection[Any]) -> T:
            with conn.transaction():
                row = conn.execute(_LOCK, params).fetchone()
                if row is None:
                    conn.execute(_CREATE, params)
                    row = conn.execute(_LOCK, params).fetchone()
                budget = _budget(row[0] if row else None)
                result = change(budget)
                if not isinstance(result, Refusal):
                    conn.execute(_WRITE, {**params, "budget": budget.to_json()})
                return result

        return self._run(locked)

    def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`work` on a pooled connection, decided again after a lost connection, bounded."""
        deadline = time.monotonic() + self._timeout_s
        error: Exception | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if attempt > 1:
                if time.monotonic() >= deadline:
                    break
                time.sleep(_BACKOFF_S * 2 ** (attempt - 2))
            try:
                with self._pool.connection(timeout=self._timeout_s) as conn:
                    if not conn.autocommit:
                        conn.autocommit = True
                    self._ensure_schema(conn)
                    return work(conn)
            except (PoolTimeout, psycopg.OperationalError) as exc:
                error = exc
            except _SCHEMA_ERRORS as exc:
                raise ConfigurationError(f"postgres_schema: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreUnavailableError(f"postgres ledger: {exc}") from exc
        raise StoreUnavailableError(f"postgres ledger: failed after {MAX_ATTEMPTS} attempt(s): {error}") from error

    def _ensure_schema(self, conn: psycopg.Connection[Any]) -> None:
        if self._schema_ok:
            return
        if self._migrate:
            postgres_schema.migrate(conn)
        else:
            postgres_schema.require_current(conn)
        self._schema_ok = True


def _budget(text: str | None) -> Budget:
    """`{}` is the row just created: an empty budget."""
    return Budget.from_json(None if text in (None, "{}") else text)
