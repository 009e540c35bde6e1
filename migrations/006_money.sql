-- Money as whole nano-dollars (1e-9 US dollars) in bigint, everywhere: a sum of integers is exact, where
-- sums of double precision gathered noise (0.07500000000000001). Amounts already kept are rounded to
-- the nearest nano-dollar once, here. See internal/core/money for the one rounding rule of a call.

DROP VIEW workflow.model_performance;
DROP VIEW workflow.provider_cost_daily;
DROP VIEW workflow.request_cost_daily;

ALTER TABLE workflow.executions RENAME COLUMN cost TO cost_nanos;
ALTER TABLE workflow.executions ALTER COLUMN cost_nanos TYPE bigint USING round(cost_nanos * 1e9)::bigint;
ALTER TABLE workflow.worker_results RENAME COLUMN cost TO cost_nanos;
ALTER TABLE workflow.worker_results ALTER COLUMN cost_nanos TYPE bigint USING round(cost_nanos * 1e9)::bigint;
ALTER TABLE workflow.arbiter_decisions RENAME COLUMN arbiter_cost TO arbiter_cost_nanos;
ALTER TABLE workflow.arbiter_decisions ALTER COLUMN arbiter_cost_nanos TYPE bigint USING round(arbiter_cost_nanos * 1e9)::bigint;

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

-- cost_per_request_nanos is rounded down: an average, not a charge.
CREATE VIEW workflow.request_cost_daily AS
SELECT date_trunc('day', received_at) AS day, count(*) AS requests,
       avg(input_tokens + output_tokens) AS tokens_per_request, (sum(cost_nanos) / count(*))::bigint AS cost_per_request_nanos,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_nanos)::bigint AS cost_nanos
FROM workflow.executions
GROUP BY 1;

-- Keys: the budget and the spend in nano-dollars.
ALTER TABLE auth.keys RENAME COLUMN budget_usd TO budget_nanos;
ALTER TABLE auth.keys ALTER COLUMN budget_nanos TYPE bigint USING round(budget_nanos * 1e9)::bigint;
ALTER TABLE auth.keys RENAME COLUMN period_spend_usd TO period_spend_nanos;
ALTER TABLE auth.keys ALTER COLUMN period_spend_nanos TYPE bigint USING round(period_spend_nanos * 1e9)::bigint;
ALTER TABLE auth.keys RENAME COLUMN spend_usd TO spend_nanos;
ALTER TABLE auth.keys ALTER COLUMN spend_nanos TYPE bigint USING round(spend_nanos * 1e9)::bigint;

---- create above / drop below ----

ALTER TABLE auth.keys ALTER COLUMN spend_nanos TYPE double precision USING spend_nanos / 1e9;
ALTER TABLE auth.keys RENAME COLUMN spend_nanos TO spend_usd;
ALTER TABLE auth.keys ALTER COLUMN period_spend_nanos TYPE double precision USING period_spend_nanos / 1e9;
ALTER TABLE auth.keys RENAME COLUMN period_spend_nanos TO period_spend_usd;
ALTER TABLE auth.keys ALTER COLUMN budget_nanos TYPE double precision USING budget_nanos / 1e9;
ALTER TABLE auth.keys RENAME COLUMN budget_nanos TO budget_usd;

DROP VIEW workflow.request_cost_daily;
DROP VIEW workflow.provider_cost_daily;
DROP VIEW workflow.model_performance;

ALTER TABLE workflow.arbiter_decisions ALTER COLUMN arbiter_cost_nanos TYPE double precision USING arbiter_cost_nanos / 1e9;
ALTER TABLE workflow.arbiter_decisions RENAME COLUMN arbiter_cost_nanos TO arbiter_cost;
ALTER TABLE workflow.worker_results ALTER COLUMN cost_nanos TYPE double precision USING cost_nanos / 1e9;
ALTER TABLE workflow.worker_results RENAME COLUMN cost_nanos TO cost;
ALTER TABLE workflow.executions ALTER COLUMN cost_nanos TYPE double precision USING cost_nanos / 1e9;
ALTER TABLE workflow.executions RENAME COLUMN cost_nanos TO cost;

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
       sum(r.cost) AS cost
FROM workflow.worker_results r
JOIN workflow.executions e USING (request_id)
LEFT JOIN fb ON fb.category = e.category AND fb.model = r.model
GROUP BY e.category, r.model, r.provider;

CREATE VIEW workflow.provider_cost_daily AS
SELECT date_trunc('day', e.received_at) AS day, r.provider,
       count(DISTINCT r.request_id) AS requests, count(*) AS calls,
       sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens, sum(r.cost) AS cost
FROM workflow.worker_results r
JOIN workflow.executions e USING (request_id)
GROUP BY 1, 2;

CREATE VIEW workflow.request_cost_daily AS
SELECT date_trunc('day', received_at) AS day, count(*) AS requests,
       avg(input_tokens + output_tokens) AS tokens_per_request, avg(cost) AS cost_per_request,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost) AS cost
FROM workflow.executions
GROUP BY 1;
