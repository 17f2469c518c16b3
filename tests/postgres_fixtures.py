"""pytest plugin: a throwaway PostgreSQL server for the session, and an isolated schema per test.

Enabled from tests/conftest.py next to tests.emulator_fixtures. The server (devstack/postgres.py:
Debian's binaries, initdb into a temp dir, a free 127.0.0.1 port, stopped by process group) starts
on first use, once per session, and is stopped at session end. A start failure FAILS the tests
that asked for it (never skips): a silently skipped store suite would hide a broken CI machine.
Each test gets a schema of its own (search_path in its DSN), dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.emulators import DevstackError
from devstack.postgres import PostgresServer


@pytest.fixture(scope="session")
def postgres_server(emulator_log_dir: Path) -> Iterator[PostgresServer]:
    """Running PostgreSQL; logs next to the emulators' (printed when a test failed)."""
    server = PostgresServer(log_dir=emulator_log_dir)
    try:
        server.start()
    except DevstackError as exc:
        pytest.fail(
            f"PostgreSQL could not start (logs in {emulator_log_dir}; install it with "
            f"scripts/install-postgres.sh):\n{exc}",
            pytrace=False,
        )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_schema(postgres_server: PostgresServer) -> Iterator[str]:
    """An empty schema of this test's own, dropped afterwards."""
    schema = postgres_server.create_schema()
    try:
        yield schema
    finally:
        postgres_server.drop_schema(schema)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer, postgres_schema: str) -> str:
    """A DSN whose sessions work in this test's schema."""
    return postgres_server.schema_dsn(postgres_schema)
