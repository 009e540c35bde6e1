-- Records and the journal in weekly partitions by time: executions, their calls, verdicts and phases by
-- received_at (the children carry it, so that a record's rows share its partition), the journal by
-- opened_at. Weeks start on Monday, 00:00 UTC; each table also has a DEFAULT partition, so a row of any
-- time inserts. Old weeks leave whole (DROP TABLE of a partition, not DELETE); the store makes the
-- weeks ahead itself (internal/adapters/store/postgres/partitions.go). The rollups of the books
-- (spend_daily, requests_daily, key_periods) are small and stay as they are, kept forever.
--
-- A primary key of a partitioned table includes its partition key, so a record is unique by
-- (request_id, received_at) and a call by (opened_at, call_id): a record written again carries its
-- receipt time, a call's settlement its intent's opening time. The children have no foreign key to
-- their execution: a record's rows are written in its transaction, only when the execution was new,
-- and leave with it by partition; a key check would cost an index probe and a row lock per row.
--
-- The existing rows move across: the old tables go to a schema of their own, the new ones are made
-- without indexes, the rows copied, then the keys and indexes built (faster than index by row), and
-- the views of 003, 005 and 006 made again over the new tables.

DROP VIEW workflow.request_trace;
DROP VIEW workflow.model_performance;
DROP VIEW workflow.provider_cost_daily;
DROP VIEW workflow.request_cost_daily;
DROP VIEW workflow.phase_latency;
DROP VIEW workflow.provider_timeouts;

CREATE SCHEMA conclave_007;
ALTER TABLE workflow.executions SET SCHEMA conclave_007;
ALTER TABLE workflow.worker_results SET SCHEMA conclave_007;
ALTER TABLE workflow.arbiter_decisions SET SCHEMA conclave_007;
ALTER TABLE workflow.phases SET SCHEMA conclave_007;
ALTER TABLE books.journal SET SCHEMA conclave_007;

CREATE TABLE workflow.executions (
    request_id        text NOT NULL,
    client_request_id text NOT NULL DEFAULT '',
    node_id           text NOT NULL DEFAULT '',
    received_at       timestamptz NOT NULL,
    completed_at      timestamptz,
    task              text NOT NULL,
    category          text NOT NULL DEFAULT '',
    confidence        double precision NOT NULL DEFAULT 0,
    blueprint         text NOT NULL DEFAULT '',
    workers           integer NOT NULL DEFAULT 0,
    min_responses     integer NOT NULL DEFAULT 0,
    timeout_seconds   double precision NOT NULL DEFAULT 0,
    overrides         text[] NOT NULL DEFAULT '{}',
    strategy          text NOT NULL DEFAULT '',
    outcome           text NOT NULL CONSTRAINT executions_outcome_check CHECK (outcome IN ('ok', 'degraded', 'failed')),
    status_code       integer NOT NULL,
    error_code        text NOT NULL DEFAULT '',
    degraded          boolean NOT NULL DEFAULT false,
    answer            text NOT NULL DEFAULT '',
    total_ms          double precision NOT NULL DEFAULT 0,
    input_tokens      bigint NOT NULL DEFAULT 0,
    output_tokens     bigint NOT NULL DEFAULT 0,
    cost_nanos        bigint NOT NULL DEFAULT 0,
    feedback          jsonb,
    feedback_at       timestamptz,
    record            bytea NOT NULL,
    key_id            text NOT NULL DEFAULT '',
    trace_id          text NOT NULL DEFAULT ''
) PARTITION BY RANGE (received_at);

CREATE TABLE workflow.worker_results (
    request_id          text NOT NULL,
    received_at         timestamptz NOT NULL,
    position            integer NOT NULL,
    job_id              text NOT NULL DEFAULT '',
    model               text NOT NULL,
    provider            text NOT NULL,
    worker              text NOT NULL DEFAULT '',
    attempt             integer NOT NULL DEFAULT 0,
    status              text NOT NULL,
    latency_ms          double precision NOT NULL DEFAULT 0,
    provider_latency_ms double precision NOT NULL DEFAULT 0,
    budget_ms           double precision NOT NULL DEFAULT 0,
    raw_response        text NOT NULL DEFAULT '',
    weighted_score      double precision NOT NULL DEFAULT 0,
    contributed         boolean NOT NULL DEFAULT false,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cost_nanos          bigint NOT NULL DEFAULT 0,
    error_kind          text NOT NULL DEFAULT '',
    error_scope         text NOT NULL DEFAULT '',
    error_message       text NOT NULL DEFAULT '',
    http_status         integer NOT NULL DEFAULT 0,
    finish_reason       text NOT NULL DEFAULT '',
    served_model        text NOT NULL DEFAULT '',
    upstream_request_id text NOT NULL DEFAULT '',
    decider             boolean NOT NULL DEFAULT false
) PARTITION BY RANGE (received_at);

CREATE TABLE workflow.arbiter_decisions (
    request_id            text NOT NULL,
    received_at           timestamptz NOT NULL,
    strategy              text NOT NULL,
    arbiter               text NOT NULL DEFAULT '',
    fallback              boolean NOT NULL DEFAULT false,
    arbiter_error         text NOT NULL DEFAULT '',
    chosen_model          text NOT NULL DEFAULT '',
    chosen                integer NOT NULL DEFAULT 0,
    synthesis             boolean NOT NULL DEFAULT false,
    scores                double precision[] NOT NULL DEFAULT '{}',
    agreement             text[] NOT NULL DEFAULT '{}',
    disagreement          text[] NOT NULL DEFAULT '{}',
    arbiter_latency_ms    double precision NOT NULL DEFAULT 0,
    arbiter_input_tokens  bigint NOT NULL DEFAULT 0,
    arbiter_output_tokens bigint NOT NULL DEFAULT 0,
    arbiter_cost_nanos    bigint NOT NULL DEFAULT 0
) PARTITION BY RANGE (received_at);

CREATE TABLE workflow.phases (
    request_id  text NOT NULL,
    received_at timestamptz NOT NULL,
    phase       text NOT NULL,
    duration_ms double precision NOT NULL
) PARTITION BY RANGE (received_at);

CREATE TABLE books.journal (
    call_id         text NOT NULL,
    request_id      text NOT NULL,
    key_id          text NOT NULL DEFAULT '',
    period_start    timestamptz,
    model           text NOT NULL,
    provider        text NOT NULL,
    node_id         text NOT NULL,
    run_id          text NOT NULL,
    opened_at       timestamptz NOT NULL,
    deadline        timestamptz NOT NULL,
    reserved_nanos  bigint NOT NULL CONSTRAINT journal_reserved_nanos_check CHECK (reserved_nanos >= 0),
    reserved_tokens bigint NOT NULL CONSTRAINT journal_reserved_tokens_check CHECK (reserved_tokens >= 0),
    state           text NOT NULL CONSTRAINT journal_state_check CHECK (state IN ('open', 'settled', 'interrupted')),
    settled_at      timestamptz,
    input_tokens    bigint NOT NULL DEFAULT 0,
    output_tokens   bigint NOT NULL DEFAULT 0,
    estimated       boolean NOT NULL DEFAULT false,
    cost_nanos      bigint NOT NULL DEFAULT 0 CONSTRAINT journal_cost_nanos_check CHECK (cost_nanos >= 0)
) PARTITION BY RANGE (opened_at);

-- A partition for each week that holds rows of the last two years, and for this week and the four
-- after it; rows of other times go to the DEFAULT partitions (where retention deletes them row by
-- row, and the store moves them into their week's partition should it make it). A partition is named
-- after its table and the Monday its week starts: workflow.executions_p20261130.
DO $$
DECLARE
    week timestamp;
    t record;
BEGIN
    FOR week IN
        SELECT date_trunc('week', received_at AT TIME ZONE 'UTC') FROM conclave_007.executions
        WHERE received_at >= now() - interval '2 years' AND received_at < now() + interval '5 weeks'
        UNION
        SELECT date_trunc('week', opened_at AT TIME ZONE 'UTC') FROM conclave_007.journal
        WHERE opened_at >= now() - interval '2 years' AND opened_at < now() + interval '5 weeks'
        UNION
        SELECT generate_series(date_trunc('week', now() AT TIME ZONE 'UTC'), now() AT TIME ZONE 'UTC' + interval '4 weeks', interval '7 days')
    LOOP
        FOR t IN SELECT * FROM (VALUES ('workflow', 'executions'), ('workflow', 'worker_results'), ('workflow', 'arbiter_decisions'),
                ('workflow', 'phases'), ('books', 'journal')) AS v(nsp, name) LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                t.nsp, t.name || '_p' || to_char(week, 'YYYYMMDD'), t.nsp, t.name,
                to_char(week, 'YYYY-MM-DD') || ' 00:00:00+00', to_char(week + interval '7 days', 'YYYY-MM-DD') || ' 00:00:00+00');
        END LOOP;
    END LOOP;
END
$$;
CREATE TABLE workflow.executions_default PARTITION OF workflow.executions DEFAULT;
CREATE TABLE workflow.worker_results_default PARTITION OF workflow.worker_results DEFAULT;
CREATE TABLE workflow.arbiter_decisions_default PARTITION OF workflow.arbiter_decisions DEFAULT;
CREATE TABLE workflow.phases_default PARTITION OF workflow.phases DEFAULT;
CREATE TABLE books.journal_default PARTITION OF books.journal DEFAULT;

INSERT INTO workflow.executions (request_id, client_request_id, node_id, received_at, completed_at, task, category, confidence,
    blueprint, workers, min_responses, timeout_seconds, overrides, strategy, outcome, status_code, error_code, degraded, answer,
    total_ms, input_tokens, output_tokens, cost_nanos, feedback, feedback_at, record, key_id, trace_id)
SELECT request_id, client_request_id, node_id, received_at, completed_at, task, category, confidence,
    blueprint, workers, min_responses, timeout_seconds, overrides, strategy, outcome, status_code, error_code, degraded, answer,
    total_ms, input_tokens, output_tokens, cost_nanos, feedback, feedback_at, record, key_id, trace_id
FROM conclave_007.executions;

INSERT INTO workflow.worker_results (request_id, received_at, position, job_id, model, provider, worker, attempt, status, latency_ms,
    provider_latency_ms, budget_ms, raw_response, weighted_score, contributed, input_tokens, output_tokens, cost_nanos, error_kind,
    error_scope, error_message, http_status, finish_reason, served_model, upstream_request_id, decider)
SELECT r.request_id, e.received_at, r.position, r.job_id, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
    r.provider_latency_ms, r.budget_ms, r.raw_response, r.weighted_score, r.contributed, r.input_tokens, r.output_tokens, r.cost_nanos,
    r.error_kind, r.error_scope, r.error_message, r.http_status, r.finish_reason, r.served_model, r.upstream_request_id, r.decider
FROM conclave_007.worker_results r JOIN conclave_007.executions e USING (request_id);

INSERT INTO workflow.arbiter_decisions (request_id, received_at, strategy, arbiter, fallback, arbiter_error, chosen_model, chosen,
    synthesis, scores, agreement, disagreement, arbiter_latency_ms, arbiter_input_tokens, arbiter_output_tokens, arbiter_cost_nanos)
SELECT d.request_id, e.received_at, d.strategy, d.arbiter, d.fallback, d.arbiter_error, d.chosen_model, d.chosen,
    d.synthesis, d.scores, d.agreement, d.disagreement, d.arbiter_latency_ms, d.arbiter_input_tokens, d.arbiter_output_tokens,
    d.arbiter_cost_nanos
FROM conclave_007.arbiter_decisions d JOIN conclave_007.executions e USING (request_id);

INSERT INTO workflow.phases (request_id, received_at, phase, duration_ms)
SELECT p.request_id, e.received_at, p.phase, p.duration_ms
FROM conclave_007.phases p JOIN conclave_007.executions e USING (request_id);

INSERT INTO books.journal (call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline,
    reserved_nanos, reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos)
SELECT call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline,
    reserved_nanos, reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos
FROM conclave_007.journal;

DROP SCHEMA conclave_007 CASCADE;

-- The keys and indexes of before, each key with the partition key (a key must have it). Request and
-- call ids are random: an index that leads with one takes each new row at a random page, which once
-- the week's index outgrows the cache is a read and, after each checkpoint, a full page written to
-- the WAL. So the children's keys and the journal's lead with the time (new rows go to the index's
-- right edge), and a record's rows are found by (received_at, request_id), both known from its
-- execution; only the executions' key leads with the request id, by which a record is asked for.
-- journal_request (request_id), which no query used, is not made again: it took two such rows per
-- call (its intent, and its settlement, which changes the state journal_open is partial on).
ALTER TABLE workflow.executions ADD PRIMARY KEY (request_id, received_at);
CREATE INDEX executions_received ON workflow.executions (received_at DESC, request_id DESC);
CREATE INDEX executions_category ON workflow.executions (category, received_at DESC, request_id DESC);
CREATE INDEX executions_outcome ON workflow.executions (outcome, received_at DESC, request_id DESC);
CREATE INDEX executions_client_request ON workflow.executions (client_request_id) WHERE client_request_id <> '';
CREATE INDEX executions_key ON workflow.executions (key_id, received_at DESC, request_id DESC) WHERE key_id <> '';
ALTER TABLE workflow.worker_results ADD PRIMARY KEY (received_at, request_id, position);
CREATE INDEX worker_results_model ON workflow.worker_results (model, received_at, request_id);
CREATE INDEX worker_results_provider ON workflow.worker_results (provider, status);
ALTER TABLE workflow.arbiter_decisions ADD PRIMARY KEY (received_at, request_id);
ALTER TABLE workflow.phases ADD PRIMARY KEY (received_at, request_id, phase);
CREATE INDEX phases_phase ON workflow.phases (phase);
ALTER TABLE books.journal ADD PRIMARY KEY (opened_at, call_id);
CREATE INDEX journal_open ON books.journal (node_id, opened_at) WHERE state = 'open';

-- The views of before; a record's rows join on (request_id, received_at), which finds them in their
-- partition.
CREATE VIEW workflow.model_performance AS
WITH fb AS (
    SELECT e.category, f->>'model' AS model, avg((f->>'reward')::double precision) AS feedback_reward, count(*) AS feedback_count
    FROM workflow.executions e, jsonb_array_elements(e.feedback) f
    WHERE e.feedback IS NOT NULL
    GROUP BY 1, 2
)
SELECT e.category, r.model, r.provider,
       count(*) AS calls,
       count(*) FILTER (WHERE r.status = 'ok') AS answers,
       avg(CASE WHEN r.contributed THEN 1.0 ELSE 0.0 END) FILTER (WHERE r.status = 'ok') AS agreement_rate,
       max(fb.feedback_reward) AS feedback_reward,
       coalesce(max(fb.feedback_count), 0) AS feedback_count,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.latency_ms) FILTER (WHERE r.status = 'ok') AS p50_latency_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY r.latency_ms) FILTER (WHERE r.status = 'ok') AS p95_latency_ms,
       sum(r.cost_nanos)::bigint AS cost_nanos
FROM workflow.worker_results r
JOIN workflow.executions e USING (request_id, received_at)
LEFT JOIN fb ON fb.category = e.category AND fb.model = r.model
GROUP BY e.category, r.model, r.provider;

CREATE VIEW workflow.provider_cost_daily AS
SELECT date_trunc('day', e.received_at) AS day, r.provider,
       count(DISTINCT r.request_id) AS requests, count(*) AS calls,
       sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens, sum(r.cost_nanos)::bigint AS cost_nanos
FROM workflow.worker_results r
JOIN workflow.executions e USING (request_id, received_at)
GROUP BY 1, 2;

CREATE VIEW workflow.request_cost_daily AS
SELECT date_trunc('day', received_at) AS day, count(*) AS requests,
       avg(input_tokens + output_tokens) AS tokens_per_request, (sum(cost_nanos) / count(*))::bigint AS cost_per_request_nanos,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_nanos)::bigint AS cost_nanos
FROM workflow.executions
GROUP BY 1;

-- received_at comes last (a view's new column does): a request's trace is read by it and the
-- request id, which its calls' key leads with.
CREATE VIEW workflow.request_trace AS
SELECT r.request_id, r.position, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
       r.weighted_score, r.contributed, (r.model = d.chosen_model AND r.status = 'ok') AS chosen,
       r.error_kind, d.strategy, d.arbiter, d.fallback, r.decider, r.received_at
FROM workflow.worker_results r
LEFT JOIN workflow.arbiter_decisions d USING (request_id, received_at);

CREATE VIEW workflow.phase_latency AS
SELECT phase, count(*) AS requests, avg(duration_ms) AS avg_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95_ms,
       max(duration_ms) AS max_ms
FROM workflow.phases
WHERE phase <> 'total'
GROUP BY phase;

CREATE VIEW workflow.provider_timeouts AS
SELECT provider, count(*) AS calls,
       count(*) FILTER (WHERE status = 'timeout') AS timeouts,
       count(*) FILTER (WHERE status = 'timeout')::double precision / count(*) AS timeout_rate,
       count(*) FILTER (WHERE error_kind = 'host_timeout') AS host_timeouts
FROM workflow.worker_results
GROUP BY provider;

---- create above / drop below ----

-- Back to one table each, as 007 left them: every row of every partition comes along. A record kept
-- twice under two times (which the partitioned keys allow) keeps its earliest; a call kept twice its
-- settlement.
DROP VIEW workflow.request_trace;
DROP VIEW workflow.model_performance;
DROP VIEW workflow.provider_cost_daily;
DROP VIEW workflow.request_cost_daily;
DROP VIEW workflow.phase_latency;
DROP VIEW workflow.provider_timeouts;

CREATE SCHEMA conclave_008;
ALTER TABLE workflow.executions SET SCHEMA conclave_008;
ALTER TABLE workflow.worker_results SET SCHEMA conclave_008;
ALTER TABLE workflow.arbiter_decisions SET SCHEMA conclave_008;
ALTER TABLE workflow.phases SET SCHEMA conclave_008;
ALTER TABLE books.journal SET SCHEMA conclave_008;

CREATE TABLE workflow.executions (
    request_id        text PRIMARY KEY,
    client_request_id text NOT NULL DEFAULT '',
    node_id           text NOT NULL DEFAULT '',
    received_at       timestamptz NOT NULL,
    completed_at      timestamptz,
    task              text NOT NULL,
    category          text NOT NULL DEFAULT '',
    confidence        double precision NOT NULL DEFAULT 0,
    blueprint         text NOT NULL DEFAULT '',
    workers           integer NOT NULL DEFAULT 0,
    min_responses     integer NOT NULL DEFAULT 0,
    timeout_seconds   double precision NOT NULL DEFAULT 0,
    overrides         text[] NOT NULL DEFAULT '{}',
    strategy          text NOT NULL DEFAULT '',
    outcome           text NOT NULL CONSTRAINT executions_outcome_check CHECK (outcome IN ('ok', 'degraded', 'failed')),
    status_code       integer NOT NULL,
    error_code        text NOT NULL DEFAULT '',
    degraded          boolean NOT NULL DEFAULT false,
    answer            text NOT NULL DEFAULT '',
    total_ms          double precision NOT NULL DEFAULT 0,
    input_tokens      bigint NOT NULL DEFAULT 0,
    output_tokens     bigint NOT NULL DEFAULT 0,
    cost_nanos        bigint NOT NULL DEFAULT 0,
    feedback          jsonb,
    feedback_at       timestamptz,
    record            bytea NOT NULL,
    key_id            text NOT NULL DEFAULT '',
    trace_id          text NOT NULL DEFAULT ''
);
INSERT INTO workflow.executions (request_id, client_request_id, node_id, received_at, completed_at, task, category, confidence,
    blueprint, workers, min_responses, timeout_seconds, overrides, strategy, outcome, status_code, error_code, degraded, answer,
    total_ms, input_tokens, output_tokens, cost_nanos, feedback, feedback_at, record, key_id, trace_id)
SELECT request_id, client_request_id, node_id, received_at, completed_at, task, category, confidence,
    blueprint, workers, min_responses, timeout_seconds, overrides, strategy, outcome, status_code, error_code, degraded, answer,
    total_ms, input_tokens, output_tokens, cost_nanos, feedback, feedback_at, record, key_id, trace_id
FROM conclave_008.executions ORDER BY received_at
ON CONFLICT (request_id) DO NOTHING;
CREATE INDEX executions_received ON workflow.executions (received_at DESC, request_id DESC);
CREATE INDEX executions_category ON workflow.executions (category, received_at DESC, request_id DESC);
CREATE INDEX executions_outcome ON workflow.executions (outcome, received_at DESC, request_id DESC);
CREATE INDEX executions_client_request ON workflow.executions (client_request_id) WHERE client_request_id <> '';
CREATE INDEX executions_key ON workflow.executions (key_id, received_at DESC, request_id DESC) WHERE key_id <> '';

-- The rows of a record's second copy stay behind with it.
CREATE TABLE workflow.worker_results (
    request_id          text NOT NULL REFERENCES workflow.executions ON DELETE CASCADE,
    position            integer NOT NULL,
    job_id              text NOT NULL DEFAULT '',
    model               text NOT NULL,
    provider            text NOT NULL,
    worker              text NOT NULL DEFAULT '',
    attempt             integer NOT NULL DEFAULT 0,
    status              text NOT NULL,
    latency_ms          double precision NOT NULL DEFAULT 0,
    provider_latency_ms double precision NOT NULL DEFAULT 0,
    budget_ms           double precision NOT NULL DEFAULT 0,
    raw_response        text NOT NULL DEFAULT '',
    weighted_score      double precision NOT NULL DEFAULT 0,
    contributed         boolean NOT NULL DEFAULT false,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cost_nanos          bigint NOT NULL DEFAULT 0,
    error_kind          text NOT NULL DEFAULT '',
    error_scope         text NOT NULL DEFAULT '',
    error_message       text NOT NULL DEFAULT '',
    http_status         integer NOT NULL DEFAULT 0,
    finish_reason       text NOT NULL DEFAULT '',
    served_model        text NOT NULL DEFAULT '',
    upstream_request_id text NOT NULL DEFAULT '',
    decider             boolean NOT NULL DEFAULT false,
    PRIMARY KEY (request_id, position)
);
INSERT INTO workflow.worker_results (request_id, position, job_id, model, provider, worker, attempt, status, latency_ms,
    provider_latency_ms, budget_ms, raw_response, weighted_score, contributed, input_tokens, output_tokens, cost_nanos, error_kind,
    error_scope, error_message, http_status, finish_reason, served_model, upstream_request_id, decider)
SELECT r.request_id, r.position, r.job_id, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
    r.provider_latency_ms, r.budget_ms, r.raw_response, r.weighted_score, r.contributed, r.input_tokens, r.output_tokens, r.cost_nanos,
    r.error_kind, r.error_scope, r.error_message, r.http_status, r.finish_reason, r.served_model, r.upstream_request_id, r.decider
FROM conclave_008.worker_results r JOIN workflow.executions e USING (request_id, received_at)
ON CONFLICT DO NOTHING;
CREATE INDEX worker_results_model ON workflow.worker_results (model, request_id);
CREATE INDEX worker_results_provider ON workflow.worker_results (provider, status);

CREATE TABLE workflow.arbiter_decisions (
    request_id            text PRIMARY KEY REFERENCES workflow.executions ON DELETE CASCADE,
    strategy              text NOT NULL,
    arbiter               text NOT NULL DEFAULT '',
    fallback              boolean NOT NULL DEFAULT false,
    arbiter_error         text NOT NULL DEFAULT '',
    chosen_model          text NOT NULL DEFAULT '',
    chosen                integer NOT NULL DEFAULT 0,
    synthesis             boolean NOT NULL DEFAULT false,
    scores                double precision[] NOT NULL DEFAULT '{}',
    agreement             text[] NOT NULL DEFAULT '{}',
    disagreement          text[] NOT NULL DEFAULT '{}',
    arbiter_latency_ms    double precision NOT NULL DEFAULT 0,
    arbiter_input_tokens  bigint NOT NULL DEFAULT 0,
    arbiter_output_tokens bigint NOT NULL DEFAULT 0,
    arbiter_cost_nanos    bigint NOT NULL DEFAULT 0
);
INSERT INTO workflow.arbiter_decisions (request_id, strategy, arbiter, fallback, arbiter_error, chosen_model, chosen, synthesis,
    scores, agreement, disagreement, arbiter_latency_ms, arbiter_input_tokens, arbiter_output_tokens, arbiter_cost_nanos)
SELECT d.request_id, d.strategy, d.arbiter, d.fallback, d.arbiter_error, d.chosen_model, d.chosen, d.synthesis,
    d.scores, d.agreement, d.disagreement, d.arbiter_latency_ms, d.arbiter_input_tokens, d.arbiter_output_tokens, d.arbiter_cost_nanos
FROM conclave_008.arbiter_decisions d JOIN workflow.executions e USING (request_id, received_at)
ON CONFLICT DO NOTHING;

CREATE TABLE workflow.phases (
    request_id  text NOT NULL REFERENCES workflow.executions ON DELETE CASCADE,
    phase       text NOT NULL,
    duration_ms double precision NOT NULL,
    PRIMARY KEY (request_id, phase)
);
INSERT INTO workflow.phases (request_id, phase, duration_ms)
SELECT p.request_id, p.phase, p.duration_ms
FROM conclave_008.phases p JOIN workflow.executions e USING (request_id, received_at)
ON CONFLICT DO NOTHING;
CREATE INDEX phases_phase ON workflow.phases (phase);

CREATE TABLE books.journal (
    call_id         text PRIMARY KEY,
    request_id      text NOT NULL,
    key_id          text NOT NULL DEFAULT '',
    period_start    timestamptz,
    model           text NOT NULL,
    provider        text NOT NULL,
    node_id         text NOT NULL,
    run_id          text NOT NULL,
    opened_at       timestamptz NOT NULL,
    deadline        timestamptz NOT NULL,
    reserved_nanos  bigint NOT NULL CONSTRAINT journal_reserved_nanos_check CHECK (reserved_nanos >= 0),
    reserved_tokens bigint NOT NULL CONSTRAINT journal_reserved_tokens_check CHECK (reserved_tokens >= 0),
    state           text NOT NULL CONSTRAINT journal_state_check CHECK (state IN ('open', 'settled', 'interrupted')),
    settled_at      timestamptz,
    input_tokens    bigint NOT NULL DEFAULT 0,
    output_tokens   bigint NOT NULL DEFAULT 0,
    estimated       boolean NOT NULL DEFAULT false,
    cost_nanos      bigint NOT NULL DEFAULT 0 CONSTRAINT journal_cost_nanos_check CHECK (cost_nanos >= 0)
);
INSERT INTO books.journal (call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline,
    reserved_nanos, reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos)
SELECT call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline,
    reserved_nanos, reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos
FROM conclave_008.journal ORDER BY state = 'open', opened_at
ON CONFLICT (call_id) DO NOTHING;
CREATE INDEX journal_open ON books.journal (node_id, opened_at) WHERE state = 'open';
CREATE INDEX journal_request ON books.journal (request_id);

DROP SCHEMA conclave_008 CASCADE;

CREATE VIEW workflow.model_performance AS
WITH fb AS (
    SELECT e.category, f->>'model' AS model, avg((f->>'reward')::double precision) AS feedback_reward, count(*) AS feedback_count
    FROM workflow.executions e, jsonb_array_elements(e.feedback) f
    WHERE e.feedback IS NOT NULL
    GROUP BY 1, 2
)
SELECT e.category, r.model, r.provider,
       count(*) AS calls,
       count(*) FILTER (WHERE r.status = 'ok') AS answers,
       avg(CASE WHEN r.contributed THEN 1.0 ELSE 0.0 END) FILTER (WHERE r.status = 'ok') AS agreement_rate,
       max(fb.feedback_reward) AS feedback_reward,
       coalesce(max(fb.feedback_count), 0) AS feedback_count,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.latency_ms) FILTER (WHERE r.status = 'ok') AS p50_latency_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY r.latency_ms) FILTER (WHERE r.status = 'ok') AS p95_latency_ms,
       sum(r.cost_nanos)::bigint AS cost_nanos
FROM workflow.worker_results r
JOIN workflow.executions e USING (request_id)
LEFT JOIN fb ON fb.category = e.category AND fb.model = r.model
GROUP BY e.category, r.model, r.provider;

CREATE VIEW workflow.provider_cost_daily AS
SELECT date_trunc('day', e.received_at) AS day, r.provider,
       count(DISTINCT r.request_id) AS requests, count(*) AS calls,
       sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens, sum(r.cost_nanos)::bigint AS cost_nanos
FROM workflow.worker_results r
JOIN workflow.executions e USING (request_id)
GROUP BY 1, 2;

CREATE VIEW workflow.request_cost_daily AS
SELECT date_trunc('day', received_at) AS day, count(*) AS requests,
       avg(input_tokens + output_tokens) AS tokens_per_request, (sum(cost_nanos) / count(*))::bigint AS cost_per_request_nanos,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_nanos)::bigint AS cost_nanos
FROM workflow.executions
GROUP BY 1;

CREATE VIEW workflow.request_trace AS
SELECT r.request_id, r.position, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
       r.weighted_score, r.contributed, (r.model = d.chosen_model AND r.status = 'ok') AS chosen,
       r.error_kind, d.strategy, d.arbiter, d.fallback, r.decider
FROM workflow.worker_results r
LEFT JOIN workflow.arbiter_decisions d USING (request_id);

CREATE VIEW workflow.phase_latency AS
SELECT phase, count(*) AS requests, avg(duration_ms) AS avg_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95_ms,
       max(duration_ms) AS max_ms
FROM workflow.phases
WHERE phase <> 'total'
GROUP BY phase;

CREATE VIEW workflow.provider_timeouts AS
SELECT provider, count(*) AS calls,
       count(*) FILTER (WHERE status = 'timeout') AS timeouts,
       count(*) FILTER (WHERE status = 'timeout')::double precision / count(*) AS timeout_rate,
       count(*) FILTER (WHERE error_kind = 'host_timeout') AS host_timeouts
FROM workflow.worker_results
GROUP BY provider;
