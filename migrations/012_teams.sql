-- Teams: groups of keys with an allowance of their own (a budget over periods, request limits, the
-- models allowed), which holds every request of their keys besides each key's own.
CREATE TABLE auth.teams (
    id              text PRIMARY KEY,
    name            text NOT NULL,
    budget_nanos    bigint CHECK (budget_nanos IS NULL OR budget_nanos >= 0),
    budget_period   text NOT NULL DEFAULT '' CHECK (budget_period IN ('', '1d', '7d', '30d')),
    rpm             integer NOT NULL DEFAULT 0 CHECK (rpm >= 0),
    tpm             integer NOT NULL DEFAULT 0 CHECK (tpm >= 0),
    max_concurrency integer NOT NULL DEFAULT 0 CHECK (max_concurrency >= 0),
    models          text[] NOT NULL DEFAULT '{}',
    budget_alerts   double precision[],
    metadata        jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    -- period_origin is when the budget periods count from: the creation, or the last change of period.
    period_origin   timestamptz NOT NULL
);

-- A key's team. A team is deleted only when no key that can still be used belongs to it; revoked keys
-- then leave it.
ALTER TABLE auth.keys ADD COLUMN team_id text REFERENCES auth.teams (id) ON DELETE SET NULL;
CREATE INDEX keys_team ON auth.keys (team_id) WHERE team_id IS NOT NULL;

-- A call's team, charged with its key in the statement that settles it; team_period_start is the
-- start of the team's budget period the call counts in.
ALTER TABLE books.journal ADD COLUMN team_id text NOT NULL DEFAULT '';
ALTER TABLE books.journal ADD COLUMN team_period_start timestamptz;

-- What each team spent in each budget period, and each day on each model: added to as its keys' calls
-- settle, as books.key_periods and books.spend_daily are for keys.
CREATE TABLE books.team_periods (
    team_id      text NOT NULL,
    period_start timestamptz NOT NULL,
    spent_nanos  bigint NOT NULL DEFAULT 0,
    calls        bigint NOT NULL DEFAULT 0,
    last_at      timestamptz NOT NULL,
    PRIMARY KEY (team_id, period_start)
);

CREATE TABLE books.team_spend_daily (
    team_id       text NOT NULL,
    day           date NOT NULL,
    model         text NOT NULL,
    calls         bigint NOT NULL DEFAULT 0,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_nanos    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (team_id, day, model)
);

-- The requests each team's keys made each day (UTC, by their receipt), added to as their records are
-- written (records carry their key's team).
CREATE TABLE books.team_requests_daily (
    team_id  text NOT NULL,
    day      date NOT NULL,
    requests bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (team_id, day)
);

---- create above / drop below ----

DROP TABLE books.team_requests_daily;
DROP TABLE books.team_spend_daily;
DROP TABLE books.team_periods;
ALTER TABLE books.journal DROP COLUMN team_period_start;
ALTER TABLE books.journal DROP COLUMN team_id;
DROP INDEX auth.keys_team;
ALTER TABLE auth.keys DROP COLUMN team_id;
DROP TABLE auth.teams;
