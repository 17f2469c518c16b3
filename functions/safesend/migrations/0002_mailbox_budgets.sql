-- The budget of each sender mailbox (functions/safesend/adapters/postgres_ledger.py), shared by every
-- instance: one row per mailbox, changed under a row lock (SELECT ... FOR UPDATE) in one transaction.
-- `budget` is safesend.mailbox_budget.Budget as JSON: bounded coarse buckets for the minute and the
-- day, the admitted rate after refusals and the time until which the mailbox is exhausted.

CREATE TABLE safesend_mailbox_budgets (
    mailbox    text        PRIMARY KEY,
    budget     jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
