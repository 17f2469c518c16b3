"""The PostgreSQL job store's versioned schema: plain SQL files in safesend/migrations, applied in order.

`NNNN_name.sql` files, numbered from 0001 without gaps. migrate() applies the ones a database has
not recorded, all in one transaction under an advisory lock (two instances starting together: one
applies, the other waits and finds nothing left to do), and records each in the ledger table
`safesend_schema_migrations` with a checksum of its text. It is idempotent, and refuses to run if
an applied file was edited since (migrations are append-only). Everything is created in the
session's current schema (the first of the DSN's search_path), so one database can hold several
isolated sets of tables (tests do this).

Applied at start-up by the store (SAFESEND_POSTGRES_MIGRATE, default on), or by hand:

    python -m safesend.adapters.postgres_schema migrate [--dsn DSN] [--iam]
    python -m safesend.adapters.postgres_schema status  [--dsn DSN] [--iam]

(DSN default: $SAFESEND_POSTGRES_DSN; --iam logs in with an IAM access token as the password.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg.errors import UndefinedTable

from ..core.errors import ConfigurationError

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
LEDGER = "safesend_schema_migrations"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_LEDGER = """CREATE TABLE IF NOT EXISTS safesend_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
# One lock per schema: concurrent start-ups serialise here, other schemas are not held up.
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('safesend-migrations:' || current_schema(), 0))"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files, in order. Raises ConfigurationError on a stray or misnumbered file."""
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if match is None:
            raise ConfigurationError(f"migration file {path.name}: expected NNNN_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path.read_text(encoding="utf-8")))
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ConfigurationError(
            f"migrations in {directory} must be numbered 0001, 0002, ... without gaps: {[m.version for m in found]}"
        )
    return found


def migrate(conn: Any, known: Sequence[Migration] | None = None) -> list[Migration]:
    """Apply every migration `conn`'s schema has not recorded; return those applied now.

    `conn` is a psycopg connection in autocommit mode. When nothing is pending this costs one
    SELECT of the ledger (a warm start); otherwise one transaction, under the schema's lock."""
    known = migrations() if known is None else list(known)
    try:
        applied = _applied(conn)
    except UndefinedTable:
        applied = None
    if applied is not None:
        _check_applied(applied, known)
        if all(m.version in applied for m in known):
            return []
    with conn.transaction():
        _run(conn, "SET LOCAL statement_timeout = 0")  # a migration may take longer than a job write
        if _current_schema(conn) is None:
            raise ConfigurationError("no schema to migrate: the first schema in search_path does not exist")
        _run(conn, _LOCK)
        _run(conn, _CREATE_LEDGER)
        applied = _applied(conn)  # again, under the lock: another instance may have just migrated
        _check_applied(applied, known)
        pending = [m for m in known if m.version not in applied]
        for migration in pending:
            _run(conn, migration.sql)
            _run(
                conn,
                "INSERT INTO safesend_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
    return pending


def pending(conn: Any, known: Sequence[Migration] | None = None) -> list[Migration]:
    """Migrations not applied yet (all of them if the ledger does not exist). Read-only."""
    known = migrations() if known is None else list(known)
    try:
        applied = _applied(conn)
    except UndefinedTable:
        applied = {}
    _check_applied(applied, known)
    return [m for m in known if m.version not in applied]


def require_current(conn: Any, known: Sequence[Migration] | None = None) -> None:
    """Raise ConfigurationError unless every migration is applied (SAFESEND_POSTGRES_MIGRATE off)."""
    missing = pending(conn, known)
    if missing:
        raise ConfigurationError(
            f"postgres_schema_behind: {len(missing)} migration(s) not applied "
            f"({', '.join(f'{m.version:04d}_{m.name}' for m in missing)}): run "
            "`python -m safesend.adapters.postgres_schema migrate`, or set SAFESEND_POSTGRES_MIGRATE=true"
        )


def _run(conn: Any, sql: str, params: Sequence[Any] | None = None) -> Any:
    """Never prepared on the server: these run once per process, and a file holds several statements."""
    return conn.execute(sql, params, prepare=False)


def _current_schema(conn: Any) -> str | None:
    schema: str | None = _run(conn, "SELECT current_schema()").fetchone()[0]
    return schema


def _applied(conn: Any) -> dict[int, str]:
    """The ledger; psycopg.errors.UndefinedTable if there is none (outside a transaction, harmless)."""
    return dict(_run(conn, "SELECT version, checksum FROM safesend_schema_migrations").fetchall())


def _check_applied(applied: dict[int, str], known: Sequence[Migration]) -> None:
    by_version = {m.version: m for m in known}
    for version, checksum in sorted(applied.items()):
        migration = by_version.get(version)
        if migration is None:
            continue  # applied by a newer release; additive migrations keep older code working
        if migration.checksum != checksum:
            raise ConfigurationError(
                f"migration {version:04d}_{migration.name} was edited after it was applied "
                "(checksum differs): migrations are append-only, add a new file instead"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m safesend.adapters.postgres_schema",
        description="Apply or list the job store's schema migrations.",
    )
    parser.add_argument("command", choices=("migrate", "status"))
    parser.add_argument(
        "--dsn",
        default=os.environ.get("SAFESEND_POSTGRES_DSN"),
        help="libpq DSN or URI (default: $SAFESEND_POSTGRES_DSN)",
    )
    parser.add_argument(
        "--iam",
        action="store_true",
        help="Cloud SQL IAM database authentication: an access token of the ambient credentials is the password",
    )
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("no DSN: pass --dsn or set SAFESEND_POSTGRES_DSN")
    from .postgres_store import connect, iam_login

    with connect(args.dsn, iam_login() if args.iam else None) as conn:
        if args.command == "migrate":
            applied = migrate(conn)
            print(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m.version:04d}_{m.name}" for m in applied))
        else:
            missing = pending(conn)
            print(
                f"{len(migrations()) - len(missing)} applied, {len(missing)} pending"
                + "".join(f"\n  pending {m.version:04d}_{m.name}" for m in missing)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
