"""PostgresJobStore against a real PostgreSQL server (Debian's, started by tests/postgres_fixtures.py):
what the shared contract (test_store_contract.py) does not cover. The schema and its migrations,
the cost of each operation on the wire, the indexes the queries use, logins through the connection
factory (password / IAM token per connection), lost and killed connections, NUL in diagnostics, and
rows damaged in ways only JSONB allows.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from devstack.postgres import PgFaultProxy, PostgresServer
from safesend.adapters.postgres_schema import Migration, migrate, migrations, pending
from safesend.adapters.postgres_store import (
    PostgresJobStore,
    build_store,
    connect,
    connection_pool,
    dumps,
    iam_login,
    job_from_row,
    job_row,
    loads,
)
from safesend.core.errors import ConcurrentUpdateError, ConfigurationError, StoreUnavailableError
from safesend.core.states import State
from tests.integration.store_jobs import NOW, draft

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stores() -> Iterator[list[PostgresJobStore]]:
    made: list[PostgresJobStore] = []
    yield made
    for store in made:
        store.close()


@pytest.fixture
def store(postgres_dsn: str, stores: list[PostgresJobStore]) -> PostgresJobStore:
    made = PostgresJobStore(connection_pool(postgres_dsn, max_size=4))
    stores.append(made)
    return made


@pytest.fixture
def proxy(postgres_server: PostgresServer) -> Iterator[PgFaultProxy]:
    with PgFaultProxy(postgres_server.port) as running:
        yield running


def sql(server: PostgresServer, schema: str, statement: str, params: Any = None) -> list[tuple]:
    return server.execute(statement.replace("{s}", f'"{schema}"'), params)


# ------------------------------------------------------------------------------------ the schema


def test_the_table_has_the_seeds_columns_and_the_rest_alongside(store, postgres_server, postgres_schema):
    store.ensure_schema()
    columns = sql(
        postgres_server,
        postgres_schema,
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = 'ai_jobs' ORDER BY ordinal_position",
        (postgres_schema,),
    )
    assert columns == [
        ("id", "text"),
        ("message_id", "text"),
        ("state", "text"),
        ("payload", "jsonb"),
        ("attempts", "integer"),
        ("claimed_at", "timestamp with time zone"),
        ("provider_ref", "jsonb"),
        ("next_check_at", "timestamp with time zone"),
        ("notice_due_at", "timestamp with time zone"),
        ("updated_at", "timestamp with time zone"),
        ("version", "bigint"),
        ("write_id", "uuid"),
        ("doc", "jsonb"),
    ]
    indexes = dict(
        sql(
            postgres_server,
            postgres_schema,
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s",
            (postgres_schema,),
        )
    )
    assert "(state, next_check_at, id) WHERE (next_check_at IS NOT NULL)" in indexes["ai_jobs_due"]


def test_a_stored_job_is_readable_as_plain_columns_and_json(store, postgres_server, postgres_schema):
    job = draft()
    job.add_event(NOW, "note", detail={"at": NOW})
    store.claim_or_get(job)
    row = sql(
        postgres_server,
        postgres_schema,
        "SELECT id, message_id, state, payload->>'subject', attempts, claimed_at, next_check_at, version, "
        "doc->>'dedup_key', doc->'events'->-1->'detail'->'at'->>'$ts' FROM {s}.ai_jobs",
    )[0]
    assert row == (
        job.id,
        job.message_id,
        "sending",
        "s",
        1,
        NOW,
        NOW + timedelta(seconds=120),
        1,
        "c:e:o",
        "2026-11-29T12:00:00+00:00",
    )


def test_migrations_are_numbered_and_applied_once(postgres_server, postgres_schema):
    known = migrations()
    assert [m.version for m in known] == list(range(1, len(known) + 1)) and known[0].name == "ai_jobs"
    with connect(postgres_server.schema_dsn(postgres_schema)) as conn:
        assert [m.version for m in pending(conn)] == [m.version for m in known]
        assert migrate(conn) == known
        assert migrate(conn) == [] and pending(conn) == []
        ledger = conn.execute("SELECT version, name, checksum FROM safesend_schema_migrations").fetchall()
    assert ledger == [(m.version, m.name, m.checksum) for m in known]


def test_concurrent_start_ups_migrate_once(postgres_server, postgres_schema, stores):
    import threading

    dsn = postgres_server.schema_dsn(postgres_schema)
    barrier = threading.Barrier(6)
    applied: list[int] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            with connect(dsn) as conn:
                barrier.wait(timeout=10)
                applied.append(len(migrate(conn)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and sorted(applied) == [0] * 5 + [len(migrations())]


def test_a_new_migration_is_applied_on_top_and_an_edited_one_is_refused(postgres_server, postgres_schema):
    known = migrations()
    extra = Migration(len(known) + 1, "extra_column", "ALTER TABLE ai_jobs ADD COLUMN extra text;")
    with connect(postgres_server.schema_dsn(postgres_schema)) as conn:
        migrate(conn, known)
        assert migrate(conn, [*known, extra]) == [extra]
        assert pending(conn, [*known, extra]) == []
        edited = Migration(extra.version, extra.name, extra.sql + "\n-- changed")
        with pytest.raises(ConfigurationError, match="edited after it was applied"):
            migrate(conn, [*known, edited])
        assert migrate(conn, known) == []  # an older release, on a newer schema, starts


def test_misnumbered_migration_files_are_refused(tmp_path):
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0003_c.sql").write_text("SELECT 1;")
    with pytest.raises(ConfigurationError, match="without gaps"):
        migrations(tmp_path)
    (tmp_path / "2_b.sql").write_text("SELECT 1;")
    with pytest.raises(ConfigurationError, match="NNNN_name"):
        migrations(tmp_path)


def test_with_migrations_off_a_store_on_an_old_schema_is_a_configuration_error(postgres_dsn, stores):
    checking = PostgresJobStore(connection_pool(postgres_dsn), migrate=False)
    stores.append(checking)
    with pytest.raises(ConfigurationError, match="postgres_schema_behind"):
        checking.get("anything")
    with connect(postgres_dsn) as conn:
        migrate(conn)
    assert checking.get("anything") is None


def test_a_schema_that_does_not_exist_is_a_configuration_error(postgres_server, stores):
    missing = PostgresJobStore(connection_pool(postgres_server.schema_dsn("no_such_schema")))
    stores.append(missing)
    with pytest.raises(ConfigurationError):
        missing.claim_or_get(draft())


def test_the_migration_command(postgres_server, postgres_schema):
    dsn = postgres_server.schema_dsn(postgres_schema)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "functions"), "SAFESEND_POSTGRES_DSN": dsn}
    command = [sys.executable, "-m", "safesend.adapters.postgres_schema"]
    status = subprocess.run([*command, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and f"0 applied, {len(migrations())} pending" in status.stdout
    applied = subprocess.run([*command, "migrate"], env=env, capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0 and "0001_ai_jobs" in applied.stdout, applied.stderr
    again = subprocess.run(
        [*command, "migrate", "--dsn", dsn],
        env={**env, "SAFESEND_POSTGRES_DSN": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and "applied 0 migration(s)" in again.stdout


# ------------------------------------------------------------------------- cost on the wire, indexes


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after) if after.get(k, 0) != before.get(k, 0)
    }


def test_a_new_job_costs_two_statements_and_two_round_trips(postgres_server, postgres_schema, proxy, stores):
    store = PostgresJobStore(connection_pool(proxy.dsn_of(postgres_server, postgres_schema), max_size=1))
    stores.append(store)
    warm, _ = store.claim_or_get(draft("warm:up:1"))  # schema check, connection, prepared statements: once
    warm.state, warm.next_check_at = State.SENT, None  # per connection and per pattern of NULL parameters
    store.compare_and_set(warm, expected_version=1)
    store.get(warm.id)
    before = proxy.wire()
    claimed, _ = store.claim_or_get(draft())
    sent = claimed.copy()
    sent.state, sent.next_check_at = State.SENT, None
    store.compare_and_set(sent, expected_version=1)
    assert _delta(before, proxy.wire()) == {
        "bind": 2,
        "describe": 2,
        "execute": 2,
        "sync": 2,
        "round_trips": 2,
        "rows_written": 2,
    }  # no BEGIN/COMMIT, no Parse: prepared
    before = proxy.wire()
    store.claim_or_get(draft(owner="owner-b"))  # a duplicate: a refused insert, then one select
    assert _delta(before, proxy.wire()) == {
        "bind": 2,
        "describe": 2,
        "execute": 2,
        "sync": 2,
        "round_trips": 2,
        "rows_read": 1,
    }
    before = proxy.wire()
    with store.pool.connection() as conn, conn.transaction():  # what the counter would see of a transaction
        conn.execute("SELECT 1", prepare=False)
    assert _delta(before, proxy.wire())["transaction_control"] == 2


def test_the_open_reviews_query_and_its_index_name_the_states_the_code_has():
    from safesend.adapters.postgres_store import _Sql

    states = f"('{State.REVIEW.value}', '{State.FAILED.value}')"
    assert f"state IN {states}" in _Sql.find_open_reviews
    assert f"WHERE state IN {states}" in migrations()[0].sql


def test_the_queries_are_served_by_their_indexes(store, postgres_server, postgres_schema):
    store.ensure_schema()
    sql(
        postgres_server,
        postgres_schema,
        """
        INSERT INTO {s}.ai_jobs SELECT md5(i::text), 'm',
          CASE WHEN i % 100 = 0 THEN 'review' WHEN i % 50 = 0 THEN 'unknown' ELSE 'sent' END, '{}', 1, NULL, NULL,
          CASE WHEN i % 50 = 0 THEN now() - interval '1 minute' END, CASE WHEN i % 70 = 0 THEN now() END,
          now() - (i || ' s')::interval, 1, gen_random_uuid(), '{}' FROM generate_series(1, 5000) i""",
    )
    sql(postgres_server, postgres_schema, "ANALYZE {s}.ai_jobs")
    from safesend.adapters.postgres_store import _Sql

    with store.pool.connection() as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")  # as a prepared statement runs
        for statement, params, index in [
            (_Sql.find_due, {"state": "unknown", "now": datetime.now(UTC), "limit": 50}, "ai_jobs_due"),
            (_Sql.find_open_reviews, {"limit": 50}, "ai_jobs_open_reviews"),
            (_Sql.find_notices_due, {"now": datetime.now(UTC), "limit": 50}, "ai_jobs_notices_due"),
        ]:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params).fetchall())
            assert f"Index Scan using {index}" in plan and "Sort" not in plan, plan


# ------------------------------------------------------------------------------ connections, logins


def test_each_new_connection_asks_the_factory_for_its_login(postgres_server, postgres_schema, stores):
    role = f"iam_{uuid.uuid4().hex[:8]}"
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'token-1'")
    postgres_server.execute(f'GRANT ALL ON SCHEMA "{postgres_schema}" TO {role}')
    dsn = postgres_server.schema_dsn(postgres_schema).replace("safesend@", f"{role}@", 1)
    tokens = iter(["token-1", "token-1", "token-2", "token-2"])
    issued: list[str] = []

    def login() -> dict[str, str]:
        issued.append(next(tokens))
        return {"password": issued[-1]}

    store = PostgresJobStore(
        connection_pool(dsn, min_size=1, max_size=2, timeout_s=2.0, connect_kwargs=login), timeout_s=2.0
    )
    stores.append(store)
    stored, _ = store.claim_or_get(draft())  # migrated and written as the role, with the issued password
    assert issued and issued[0] == "token-1"
    postgres_server.execute(f"ALTER ROLE {role} PASSWORD 'token-2'")  # the token rotates
    postgres_server.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
    changed = stored.copy()
    changed.attempts = 2
    assert store.compare_and_set(changed, expected_version=1).version == 2  # reconnected with a new login
    assert "token-2" in issued


def test_a_refused_login_is_store_unavailable(postgres_server, postgres_schema, stores):
    dsn = postgres_server.schema_dsn(postgres_schema).replace("safesend@", "nobody@", 1)
    store = PostgresJobStore(
        connection_pool(dsn, timeout_s=1.0, connect_kwargs=lambda: {"password": "wrong"}), timeout_s=1.0
    )
    stores.append(store)
    with pytest.raises(StoreUnavailableError):
        store.claim_or_get(draft())


class FakeCredentials:
    def __init__(self) -> None:
        self.token: str | None = None
        self.valid = False
        self.refreshes = 0

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token, self.valid = f"access-token-{self.refreshes}", True


def test_iam_login_uses_a_fresh_access_token_as_the_password():
    credentials = FakeCredentials()
    login = iam_login(credentials, request=object())
    assert login() == {"password": "access-token-1"} and login() == {"password": "access-token-1"}
    credentials.valid = False  # expired: google-auth's `valid` includes its refresh margin
    assert login() == {"password": "access-token-2"} and credentials.refreshes == 2


def test_build_store_reads_the_settings_it_is_given(postgres_dsn, stores):
    with pytest.raises(ConfigurationError, match="SAFESEND_POSTGRES_DSN"):
        build_store(SimpleNamespace(postgres_dsn=None))
    store = build_store(SimpleNamespace(postgres_dsn=postgres_dsn, postgres_pool_max=3, postgres_timeout_s=5.0))
    stores.append(store)
    assert store.pool.max_size == 3 and store.claim_or_get(draft())[1] is True


def test_killed_connections_are_replaced_and_no_write_is_lost(store, postgres_server):
    stored, _ = store.claim_or_get(draft())
    killed = postgres_server.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'safesend'"
    )[0][0]
    assert killed >= 1
    changed = stored.copy()
    changed.attempts = 2
    written = store.compare_and_set(changed, expected_version=1)  # the first try meets a dead connection
    assert written.version == 2 and store.get(stored.id) == written


def test_a_server_that_is_not_there_is_store_unavailable_within_the_timeout(stores):
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresJobStore(
        connection_pool(f"postgresql://safesend@127.0.0.1:{port}/safesend?sslmode=disable", timeout_s=1.0),
        timeout_s=1.0,
    )
    stores.append(store)
    started = time.monotonic()
    for call in (
        lambda: store.claim_or_get(draft()),
        lambda: store.get("x"),
        lambda: store.find_due(State.UNKNOWN, NOW, 10),
    ):
        with pytest.raises(StoreUnavailableError):
            call()
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------------- data edge cases


def test_a_nul_in_a_diagnostic_is_stored_as_a_replacement_character(store):
    job = draft()
    job.add_event(
        NOW,
        "attempt_failed",
        error={"detail": "garbage \x00 from a proxy", "k\x00": 1},
        literal="a backslash-u0000 text: \\u0000 stays",
    )
    store.claim_or_get(job)
    event = store.get(job.id).events[-1]
    assert event["error"] == {"detail": "garbage \ufffd from a proxy", "k\ufffd": 1}
    assert event["literal"] == "a backslash-u0000 text: \\u0000 stays"


def test_json_timestamps_round_trip_and_foreign_values_are_refused_loudly():
    value = {"at": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=-5))), "n": [1, 2.5]}
    assert loads(dumps(value)) == {"at": datetime(2026, 1, 2, 8, 4, 5, 678901, tzinfo=UTC), "n": [1, 2.5]}
    assert loads(dumps({"$ts": "not a time", "other": 1})) == {"$ts": "not a time", "other": 1}
    with pytest.raises(TypeError):
        dumps({"x": object()})
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


def test_rows_only_jsonb_can_damage_are_skipped_by_the_queries(store, postgres_server, postgres_schema):
    good, _ = store.claim_or_get(draft("good:1:x"))
    row = job_row(draft("bad:1:x"), uuid.uuid4())
    insert = (
        "INSERT INTO {s}.ai_jobs (id, message_id, state, payload, attempts, claimed_at, provider_ref, "
        "next_check_at, notice_due_at, updated_at, version, write_id, doc) VALUES (%(id)s, %(message_id)s, "
        "%(state)s, %(payload)s::jsonb, %(attempts)s, %(claimed_at)s, %(provider_ref)s::jsonb, "
        "%(next_check_at)s, %(notice_due_at)s, %(updated_at)s, %(version)s, %(write_id)s, %(doc)s::jsonb)"
    )
    for i, doc in enumerate(["[1, 2]", '"a string"', '{"dedup_key": "k", "created_at": {"$ts": "yesterday"}}']):
        sql(
            postgres_server,
            postgres_schema,
            insert,
            {**row, "id": f"bad{i}", "doc": doc, "next_check_at": NOW - timedelta(seconds=i)},
        )
    due = store.find_due(State.SENDING, NOW + timedelta(hours=1), 10)
    assert [j.id for j in due] == [good.id]
    with pytest.raises((TypeError, ValueError)):
        job_from_row(
            sql(
                postgres_server,
                postgres_schema,
                "SELECT id, message_id, state, payload::text, attempts, claimed_at, provider_ref::text, "
                "next_check_at, notice_due_at, updated_at, version, write_id, doc::text FROM {s}.ai_jobs "
                "WHERE id = 'bad0'",
            )[0]
        )


def test_a_naive_time_in_a_column_means_utc_whatever_the_sessions_zone(postgres_server, postgres_schema, stores):
    dsn = postgres_server.schema_dsn(postgres_schema) + "%20-c%20TimeZone%3DAsia%2FTokyo"  # appended to options
    tokyo = PostgresJobStore(connection_pool(dsn))
    stores.append(tokyo)
    job = draft()
    job.next_check_at = (NOW + timedelta(minutes=1)).replace(tzinfo=None)
    tokyo.claim_or_get(job)
    assert tokyo.get(job.id).next_check_at == NOW + timedelta(minutes=1)
    naive_now = (NOW + timedelta(minutes=1)).replace(tzinfo=None)
    assert [j.id for j in tokyo.find_due(State.SENDING, naive_now, 5)] == [job.id]


def test_compare_and_set_is_conditioned_on_the_version_alone(store):
    stored, _ = store.claim_or_get(draft())
    other = stored.copy()
    other.store_token = object()  # whatever token a caller holds, the version decides
    assert store.compare_and_set(other, expected_version=1).version == 2
    with pytest.raises(ConcurrentUpdateError):
        store.compare_and_set(other, expected_version=1)
