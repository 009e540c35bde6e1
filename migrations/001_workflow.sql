-- Execution records: one row per request, its calls, its consensus and its phases. The whole record is
-- kept as protobuf in executions.record (GET /executions/:id returns it exactly); the columns and the
-- child tables are its queryable projection, written in the same transaction.
CREATE SCHEMA workflow;

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
    -- outcome is ok, degraded (answered with less than asked for) or failed (status_code is not 200).
    outcome           text NOT NULL CHECK (outcome IN ('ok', 'degraded', 'failed')),
    status_code       integer NOT NULL,
    error_code        text NOT NULL DEFAULT '',
    degraded          boolean NOT NULL DEFAULT false,
    answer            text NOT NULL DEFAULT '',
    total_ms          double precision NOT NULL DEFAULT 0,
    input_tokens      bigint NOT NULL DEFAULT 0,
    output_tokens     bigint NOT NULL DEFAULT 0,
    cost              double precision NOT NULL DEFAULT 0,
    -- feedback is set once, by the conditional update of POST /executions/:id/feedback.
    feedback          jsonb,
    feedback_at       timestamptz,
    record            bytea NOT NULL
);
-- GET /executions: newest first, by keyset, with or without a category or an outcome; prune by age.
CREATE INDEX executions_received ON workflow.executions (received_at DESC, request_id DESC);
CREATE INDEX executions_category ON workflow.executions (category, received_at DESC, request_id DESC);
CREATE INDEX executions_outcome ON workflow.executions (outcome, received_at DESC, request_id DESC);
CREATE INDEX executions_client_request ON workflow.executions (client_request_id) WHERE client_request_id <> '';

CREATE TABLE workflow.worker_results (
    request_id          text NOT NULL REFERENCES workflow.executions ON DELETE CASCADE,
    position            integer NOT NULL,
    job_id              text NOT NULL DEFAULT '',
    model               text NOT NULL,
    provider            text NOT NULL,
    worker              text NOT NULL DEFAULT '',
    attempt             integer NOT NULL DEFAULT 0,
    -- status is ok, timeout, error, cancelled, not_sent or late.
    status              text NOT NULL,
    latency_ms          double precision NOT NULL DEFAULT 0,
    provider_latency_ms double precision NOT NULL DEFAULT 0,
    budget_ms           double precision NOT NULL DEFAULT 0,
    raw_response        text NOT NULL DEFAULT '',
    weighted_score      double precision NOT NULL DEFAULT 0,
    contributed         boolean NOT NULL DEFAULT false,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cost                double precision NOT NULL DEFAULT 0,
    error_kind          text NOT NULL DEFAULT '',
    error_scope         text NOT NULL DEFAULT '',
    error_message       text NOT NULL DEFAULT '',
    http_status         integer NOT NULL DEFAULT 0,
    finish_reason       text NOT NULL DEFAULT '',
    served_model        text NOT NULL DEFAULT '',
    upstream_request_id text NOT NULL DEFAULT '',
    PRIMARY KEY (request_id, position)
);
-- GET /executions?model=, and the per-model and per-provider views.
CREATE INDEX worker_results_model ON workflow.worker_results (model, request_id);
CREATE INDEX worker_results_provider ON workflow.worker_results (provider, status);

CREATE TABLE workflow.arbiter_decisions (
    request_id         text PRIMARY KEY REFERENCES workflow.executions ON DELETE CASCADE,
    strategy           text NOT NULL,
    -- arbiter is the model that decided, or local; fallback is true when an arbiter model was asked
    -- and its verdict was not used (arbiter_error says why).
    arbiter            text NOT NULL DEFAULT '',
    fallback           boolean NOT NULL DEFAULT false,
    arbiter_error      text NOT NULL DEFAULT '',
    chosen_model       text NOT NULL DEFAULT '',
    chosen             integer NOT NULL DEFAULT 0,
    synthesis          boolean NOT NULL DEFAULT false,
    -- scores[i] is the strategy's score of the i-th answer that went to consensus.
    scores             double precision[] NOT NULL DEFAULT '{}',
    agreement          text[] NOT NULL DEFAULT '{}',
    disagreement       text[] NOT NULL DEFAULT '{}',
    arbiter_latency_ms double precision NOT NULL DEFAULT 0,
    arbiter_input_tokens  bigint NOT NULL DEFAULT 0,
    arbiter_output_tokens bigint NOT NULL DEFAULT 0,
    arbiter_cost       double precision NOT NULL DEFAULT 0
);

CREATE TABLE workflow.phases (
    request_id  text NOT NULL REFERENCES workflow.executions ON DELETE CASCADE,
    phase       text NOT NULL,
    duration_ms double precision NOT NULL,
    PRIMARY KEY (request_id, phase)
);
CREATE INDEX phases_phase ON workflow.phases (phase);

---- create above / drop below ----

DROP SCHEMA workflow CASCADE;
