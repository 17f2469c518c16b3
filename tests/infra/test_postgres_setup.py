"""(f) The PostgreSQL job store's one manual step works, run for real: the module's postgres_setup_sql
(as a Cloud SQL-like `postgres` user: CREATEROLE, member of cloudsqlsuperuser, not a superuser) on a
throwaway PostgreSQL server (devstack/postgres.py, Debian's binaries, loopback only), then every
function's database user (a LOGIN role with no privilege, as google_sql_user creates it) runs the
app's store with exactly the DSN the module renders for it, but for what only Cloud SQL provides
(its private IP, TLS against its CA, the IAM access token as the password):

* the first function to use the store migrates it (SAFESEND_POSTGRES_MIGRATE's default), into schema
  safesend, and every table belongs to safesend_owner, whichever function it was;
* every other function reads and writes those tables, and can apply a later migration;
* a function whose user the SQL has not granted (the reviewer side turned on later) cannot even
  connect, until the SQL runs again, which is idempotent.

Not shown here: Cloud SQL's IAM login and its TLS (sslmode=verify-ca against the instance's CA),
and anything of cloudsqlsuperuser beyond CREATEROLE / CREATEDB."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from .tfmodel import SQL_PRIVATE_IP, ModuleModel

REVIEWERS = {
    "reviewers_enabled": True,
    "review_iap_members": ["group:r@example.com"],
    "review_allowed_emails": ["ann@example.com"],
}
TOKEN = "ya29.stand-in-for-an-iam-access-token"  # what iam_login() sends as the password
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def server() -> Iterator:
    from devstack.emulators import DevstackError
    from devstack.postgres import PostgresServer

    pg = PostgresServer()
    try:
        pg.start()
    except DevstackError as exc:
        pytest.fail(f"PostgreSQL could not start (scripts/install-postgres.sh installs it):\n{exc}", pytrace=False)
    try:
        # Cloud SQL: the database is created through the Admin API, owned by cloudsqlsuperuser, whose
        # member `postgres` (CREATEROLE, CREATEDB, no superuser) is the admin who runs the setup SQL.
        pg.execute("CREATE ROLE cloudsqlsuperuser NOLOGIN CREATEROLE CREATEDB")
        pg.execute("CREATE ROLE postgres LOGIN CREATEROLE CREATEDB PASSWORD 'admin' IN ROLE cloudsqlsuperuser")
        pg.execute("ALTER DATABASE safesend OWNER TO cloudsqlsuperuser")
        yield pg
    finally:
        pg.stop()


def as_admin(pg, sql: str) -> None:
    import psycopg

    with psycopg.connect(pg.dsn("safesend", user="postgres", password="admin"), autocommit=True) as conn:
        conn.execute(sql, prepare=False)


def create_database_users(pg, model: ModuleModel) -> None:
    """What google_sql_user (CLOUD_IAM_SERVICE_ACCOUNT) leaves in the database: a login role, no privilege."""
    for user in model.instances("google_sql_user", "functions"):
        if not pg.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [user["name"]]):
            pg.execute(f"CREATE ROLE \"{user['name']}\" LOGIN PASSWORD '{TOKEN}'")


def local_dsn(pg, rendered: str) -> str:
    """The module's DSN for this server: its private IP and TLS replaced (loopback, no TLS here), the
    IAM token as the password (iam_login() supplies it per connection); user, database, options kept."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = conninfo_to_dict(rendered)
    assert parts.pop("host") == SQL_PRIVATE_IP and parts.pop("port") == "5432"
    assert parts.pop("sslmode") == "verify-ca" and parts.pop("sslrootcert")
    assert "password" not in parts
    return make_conninfo(**parts, host="127.0.0.1", port=str(pg.port), sslmode="disable", password=TOKEN)


def store_of(pg, model: ModuleModel, fn: str):
    from safesend.adapters.postgres_store import PostgresJobStore, connection_pool

    dsn = local_dsn(pg, model.local("function_env")[fn]["SAFESEND_POSTGRES_DSN"])
    return PostgresJobStore(connection_pool(dsn, max_size=int(model.variables["postgres_pool_max"])), timeout_s=10)


def draft(key: str):
    from safesend.core.lifecycle import new_job

    return new_job(
        f"id{uuid.uuid5(uuid.NAMESPACE_URL, key).hex[:30]}",
        key,
        "<x@mail.example.com>",
        "receipts",
        {"to": ["a@example.com"], "subject": "s", "text": "t", "html": None},
        "h" * 64,
        NOW,
    )


@pytest.mark.timeout(300)
def test_the_setup_sql_lets_every_function_run_and_migrate_the_store_as_the_owner_role(server):
    import psycopg

    from safesend.adapters import postgres_schema
    from safesend.core.errors import StoreUnavailableError

    model = ModuleModel({"job_store": "postgres"})
    create_database_users(server, model)
    as_admin(server, model.local("postgres_setup_sql"))
    as_admin(server, model.local("postgres_setup_sql"))  # idempotent: again after adding functions
    functions = sorted(model.local("postgres_users"))
    assert functions == ["reconcile", "send", "status", "sweep"]

    stores = {fn: store_of(server, model, fn) for fn in functions}
    try:
        # the first use migrates (SAFESEND_POSTGRES_MIGRATE's default), as safesend_owner
        sent, created = stores["send"].claim_or_get(draft("first"))
        assert created
        owners = server.execute("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'safesend'")
        assert dict(owners) == {
            "ai_jobs": "safesend_owner",
            "safesend_mailbox_budgets": "safesend_owner",
            "ops": "safesend_owner",  # the last sweep's record (issue 20)
            "safesend_mailbox_lag": "safesend_owner",  # index lag per mailbox (issue 20.3)
            "safesend_schema_migrations": "safesend_owner",
        }
        stores["sweep"].record_sweep({"at": NOW, "due": 0})
        assert stores["status"].last_sweep() == {"at": NOW, "due": 0}
        # every other function reads and writes the same tables
        for fn in ("reconcile", "sweep", "status"):
            assert stores[fn].get(sent.id).id == sent.id, fn
        stored = stores["reconcile"].get(sent.id)
        updated = stores["sweep"].compare_and_set(stored, expected_version=stored.version)
        assert stores["status"].get(sent.id).version == updated.version
        # any function applies a later migration (it runs as the owner role too)
        rendered = model.local("function_env")["status"]["SAFESEND_POSTGRES_DSN"]
        later = [
            *postgres_schema.migrations(),
            postgres_schema.Migration(
                len(postgres_schema.migrations()) + 1, "later", "ALTER TABLE ai_jobs ADD COLUMN later integer"
            ),
        ]
        with psycopg.connect(local_dsn(server, rendered), autocommit=True) as conn:
            assert conn.execute("SELECT session_user, current_user, current_schema()").fetchone() == (
                model.local("postgres_users")["status"],
                "safesend_owner",
                "safesend",
            )
            assert [m.name for m in postgres_schema.migrate(conn, later)] == ["later"]
    finally:
        for store in stores.values():
            store.close()

    # The reviewer side turned on later: notify's and review's users exist (google_sql_user) but the
    # setup SQL has not granted them yet, so they cannot connect; once it runs again, they can.
    reviewers = ModuleModel({"job_store": "postgres", **REVIEWERS})
    create_database_users(server, reviewers)
    notify_dsn = local_dsn(server, reviewers.local("function_env")["notify"]["SAFESEND_POSTGRES_DSN"])
    with pytest.raises(psycopg.OperationalError, match="safesend_owner"):
        psycopg.connect(notify_dsn, connect_timeout=5).close()
    as_admin(server, reviewers.local("postgres_setup_sql"))
    for fn in ("notify", "review"):
        store = store_of(server, reviewers, fn)
        try:
            assert store.get(sent.id).id == sent.id, fn
        except StoreUnavailableError as exc:  # pragma: no cover - reported with the cause
            pytest.fail(f"{fn}: {exc}")
        finally:
            store.close()


def test_without_the_owner_role_option_a_first_migration_would_own_the_tables_privately(server):
    """Why every DSN carries `-c role=safesend_owner`: without it, the first function's migration would
    create tables only that function's user owns, and the others could not use them."""
    import psycopg

    model = ModuleModel({"job_store": "postgres"})
    create_database_users(server, model)
    as_admin(server, model.local("postgres_setup_sql"))
    schema = f"probe_{uuid.uuid4().hex[:8]}"
    as_admin(server, f"CREATE SCHEMA {schema} AUTHORIZATION safesend_owner")
    users = model.local("postgres_users")
    base = local_dsn(server, model.local("function_env")["send"]["SAFESEND_POSTGRES_DSN"])
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    def without_role(user: str) -> str:
        parts = conninfo_to_dict(base)
        parts.update(user=user, options=f"-c search_path={schema}")
        return make_conninfo(**parts)

    with psycopg.connect(without_role(users["send"]), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x integer)")
        assert conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 't'").fetchone() == (users["send"],)
    with (
        psycopg.connect(without_role(users["reconcile"]), autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT * FROM t")
