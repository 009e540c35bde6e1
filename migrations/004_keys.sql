-- API keys: one row per key the admin API created. The secret is kept only as its SHA-256; the spend
-- of the current budget period sits beside the key, so that a charge and the check of the budget are
-- one row's update and read on every controller.
CREATE SCHEMA auth;

CREATE TABLE auth.keys (
    id               text PRIMARY KEY,
    name             text NOT NULL,
    secret_hash      bytea NOT NULL UNIQUE,
    -- budget_usd is NULL for a key without a budget; budget_period is '' (the key's whole life), 1d,
    -- 7d or 30d, counted from created_at.
    budget_usd       double precision CHECK (budget_usd IS NULL OR budget_usd >= 0),
    budget_period    text NOT NULL DEFAULT '' CHECK (budget_period IN ('', '1d', '7d', '30d')),
    rpm              integer NOT NULL DEFAULT 0 CHECK (rpm >= 0),
    tpm              integer NOT NULL DEFAULT 0 CHECK (tpm >= 0),
    max_concurrency  integer NOT NULL DEFAULT 0 CHECK (max_concurrency >= 0),
    models           text[] NOT NULL DEFAULT '{}',
    expires_at       timestamptz,
    metadata         jsonb NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    revoked_at       timestamptz,
    last_used_at     timestamptz,
    -- period_start is the budget period period_spend_usd counts; spend_usd is every period's.
    period_start     timestamptz,
    period_spend_usd double precision NOT NULL DEFAULT 0,
    spend_usd        double precision NOT NULL DEFAULT 0
);

-- Records say which key asked, and the trace they were part of.
ALTER TABLE workflow.executions ADD COLUMN key_id text NOT NULL DEFAULT '';
ALTER TABLE workflow.executions ADD COLUMN trace_id text NOT NULL DEFAULT '';
CREATE INDEX executions_key ON workflow.executions (key_id, received_at DESC, request_id DESC) WHERE key_id <> '';

---- create above / drop below ----

DROP INDEX workflow.executions_key;
ALTER TABLE workflow.executions DROP COLUMN trace_id;
ALTER TABLE workflow.executions DROP COLUMN key_id;
DROP SCHEMA auth CASCADE;
