-- The measured index lag of each sender mailbox (functions/safesend/index_lag.py): one row per mailbox,
-- its last observations per kind, its raised unknown window. Written with a compare-and-set on
-- `version` (functions/safesend/adapters/postgres_store.py write_mailbox_lag); /health reads them all.

CREATE TABLE safesend_mailbox_lag (
    mailbox    text        PRIMARY KEY,
    doc        jsonb       NOT NULL,
    version    bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
