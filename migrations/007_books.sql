-- The books: the journal of every provider call, the controllers' leases, and what keys spent.
CREATE SCHEMA books;

-- One row per call sent to a provider: its intent is written (state open) before the call leaves, and
-- settled with its usage and cost after, in the transaction that writes its request's record. A call
-- whose controller died is settled at its reservation (state interrupted) by the next controller to
-- find it open once that controller's lease has ended. A row turns from open to settled or interrupted
-- once: the charge to its key is made in that same statement, so every call is charged once.
CREATE TABLE books.journal (
    call_id         text PRIMARY KEY,
    request_id      text NOT NULL,
    -- key_id is the API key charged ('' for the admin token); period_start the start of the key's
    -- budget period the call counts in.
    key_id          text NOT NULL DEFAULT '',
    period_start    timestamptz,
    model           text NOT NULL,
    provider        text NOT NULL,
    node_id         text NOT NULL,
    run_id          text NOT NULL,
    opened_at       timestamptz NOT NULL,
    deadline        timestamptz NOT NULL,
    reserved_nanos  bigint NOT NULL CHECK (reserved_nanos >= 0),
    reserved_tokens bigint NOT NULL CHECK (reserved_tokens >= 0),
    state           text NOT NULL CHECK (state IN ('open', 'settled', 'interrupted')),
    settled_at      timestamptz,
    input_tokens    bigint NOT NULL DEFAULT 0,
    output_tokens   bigint NOT NULL DEFAULT 0,
    estimated       boolean NOT NULL DEFAULT false,
    cost_nanos      bigint NOT NULL DEFAULT 0 CHECK (cost_nanos >= 0)
);
-- The open intents of a controller, for its recovery and its peers'.
CREATE INDEX journal_open ON books.journal (node_id, opened_at) WHERE state = 'open';
CREATE INDEX journal_request ON books.journal (request_id);

-- Each controller's lease: renewed while it runs; once it has ended, its open intents are settled by
-- whoever finds them.
CREATE TABLE books.nodes (
    node_id     text PRIMARY KEY,
    run_id      text NOT NULL,
    started_at  timestamptz NOT NULL,
    lease_until timestamptz NOT NULL
);

-- What each key spent in each budget period: one row per key and period, added to by the statement that
-- settles its calls (rows taken in key order, so concurrent writers do not deadlock).
CREATE TABLE books.key_periods (
    key_id       text NOT NULL,
    period_start timestamptz NOT NULL,
    spent_nanos  bigint NOT NULL DEFAULT 0,
    calls        bigint NOT NULL DEFAULT 0,
    last_at      timestamptz NOT NULL,
    PRIMARY KEY (key_id, period_start)
);

-- What each key spent each day (UTC, by when the call was sent) on each model: a key's spend over
-- days or models reads a few rows per day, however many records there are.
CREATE TABLE books.spend_daily (
    key_id        text NOT NULL,
    day           date NOT NULL,
    model         text NOT NULL,
    calls         bigint NOT NULL DEFAULT 0,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_nanos    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day, model)
);

-- The requests each key made each day (UTC, by their receipt), added to as their records are written.
CREATE TABLE books.requests_daily (
    key_id   text NOT NULL,
    day      date NOT NULL,
    requests bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);

-- Keys: their spend moves to books.key_periods. What they spent before is kept there: the current
-- period's spend as its own row, earlier periods' together at the key's creation.
INSERT INTO books.key_periods (key_id, period_start, spent_nanos, last_at)
SELECT id, coalesce(period_start, created_at), period_spend_nanos, coalesce(last_used_at, created_at)
FROM auth.keys WHERE period_spend_nanos > 0;
INSERT INTO books.key_periods (key_id, period_start, spent_nanos, last_at)
SELECT id, '-infinity', spend_nanos - period_spend_nanos, coalesce(last_used_at, created_at)
FROM auth.keys WHERE spend_nanos > period_spend_nanos;

-- period_origin is when a key's periods count from: its creation, or the last change of its period.
ALTER TABLE auth.keys ADD COLUMN period_origin timestamptz;
UPDATE auth.keys SET period_origin = created_at;
ALTER TABLE auth.keys ALTER COLUMN period_origin SET NOT NULL;
ALTER TABLE auth.keys DROP COLUMN period_start;
ALTER TABLE auth.keys DROP COLUMN period_spend_nanos;
ALTER TABLE auth.keys DROP COLUMN spend_nanos;
ALTER TABLE auth.keys DROP COLUMN last_used_at;

---- create above / drop below ----

ALTER TABLE auth.keys ADD COLUMN last_used_at timestamptz;
ALTER TABLE auth.keys ADD COLUMN spend_nanos bigint NOT NULL DEFAULT 0;
ALTER TABLE auth.keys ADD COLUMN period_spend_nanos bigint NOT NULL DEFAULT 0;
ALTER TABLE auth.keys ADD COLUMN period_start timestamptz;
UPDATE auth.keys k SET spend_nanos = coalesce((SELECT sum(spent_nanos) FROM books.key_periods p WHERE p.key_id = k.id), 0),
    last_used_at = (SELECT max(last_at) FROM books.key_periods p WHERE p.key_id = k.id);
ALTER TABLE auth.keys DROP COLUMN period_origin;
DROP SCHEMA books CASCADE;
