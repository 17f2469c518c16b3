-- The job table of the PostgreSQL job store (functions/safesend/adapters/postgres_store.py).
--
-- The seed's columns are real columns: id, message_id, state, payload, attempts, claimed_at,
-- provider_ref. The sweeper's due times and the update time are columns too, so indexes serve the
-- queries. Every other field of the Job lives in `doc` (JSONB), timestamps inside JSON written as
-- {"$ts": "<ISO 8601, UTC>"} so they come back as timestamps. `version` is the compare-and-set
-- condition (every write bumps it); `write_id` is store-private: the id of the write that put the
-- row there, read back to settle a write whose answer was lost.
--
-- Migrations are append-only: never edit a file once it has been applied anywhere (the runner
-- refuses a changed checksum); add 0002_*.sql instead.

CREATE TABLE ai_jobs (
    id            text        PRIMARY KEY,
    message_id    text        NOT NULL,
    state         text        NOT NULL,
    payload       jsonb       NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    claimed_at    timestamptz,
    provider_ref  jsonb,
    next_check_at timestamptz,
    notice_due_at timestamptz,
    updated_at    timestamptz NOT NULL,
    version       bigint      NOT NULL,
    write_id      uuid        NOT NULL,
    doc           jsonb       NOT NULL
);

-- find_due: state = $1 AND next_check_at <= $2 ORDER BY next_check_at, id LIMIT $3. Finished jobs
-- (next_check_at NULL) are not in the index, so it does not grow with them.
CREATE INDEX ai_jobs_due ON ai_jobs (state, next_check_at, id) WHERE next_check_at IS NOT NULL;

-- find_open_reviews: the jobs waiting for a person, oldest update first.
CREATE INDEX ai_jobs_open_reviews ON ai_jobs (updated_at, id) WHERE state IN ('review', 'failed');

-- find_notices_due: callback notices whose time has come, across states.
CREATE INDEX ai_jobs_notices_due ON ai_jobs (notice_due_at, id) WHERE notice_due_at IS NOT NULL;
