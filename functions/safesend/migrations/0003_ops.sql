-- The service's own small records (functions/safesend/adapters/postgres_store.py record_sweep):
-- one row per name, last writer wins. `sweep` is what the last completed sweep saw, for /health.

CREATE TABLE ops (
    name       text        PRIMARY KEY,
    doc        jsonb       NOT NULL,
    updated_at timestamptz NOT NULL
);
