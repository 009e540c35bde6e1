-- The questions records answer, as views (GET /analysis/... reads them).

-- Fastest and most accurate models per category: how often a model's answer agreed with the consensus,
-- how often callers' feedback rewarded it, and its latency.
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

-- Tokens and cost per provider per day (every call, the arbiter's counted with its request), and per
-- request per day.
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

-- The trace of one request: each response, what it scored, and whether it led to the answer.
CREATE VIEW workflow.request_trace AS
SELECT r.request_id, r.position, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
       r.weighted_score, r.contributed, (r.model = d.chosen_model AND r.status = 'ok') AS chosen,
       r.error_kind, d.strategy, d.arbiter, d.fallback
FROM workflow.worker_results r
LEFT JOIN workflow.arbiter_decisions d USING (request_id);

-- The slowest phases, and the providers that time out most.
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

DROP VIEW workflow.provider_timeouts;
DROP VIEW workflow.phase_latency;
DROP VIEW workflow.request_trace;
DROP VIEW workflow.request_cost_daily;
DROP VIEW workflow.provider_cost_daily;
DROP VIEW workflow.model_performance;
