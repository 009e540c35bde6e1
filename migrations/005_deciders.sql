-- Which answers decided a majority vote: the blueprint's min_responses answers of the models learned
-- best, the others only breaking ties (false on every response of a decision where all answers
-- weighed in alike).
ALTER TABLE workflow.worker_results ADD COLUMN decider boolean NOT NULL DEFAULT false;

-- A view's new column goes last, for CREATE OR REPLACE keeps the old ones in place.
CREATE OR REPLACE VIEW workflow.request_trace AS
SELECT r.request_id, r.position, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
       r.weighted_score, r.contributed, (r.model = d.chosen_model AND r.status = 'ok') AS chosen,
       r.error_kind, d.strategy, d.arbiter, d.fallback, r.decider
FROM workflow.worker_results r
LEFT JOIN workflow.arbiter_decisions d USING (request_id);

---- create above / drop below ----

DROP VIEW workflow.request_trace;
CREATE VIEW workflow.request_trace AS
SELECT r.request_id, r.position, r.model, r.provider, r.worker, r.attempt, r.status, r.latency_ms,
       r.weighted_score, r.contributed, (r.model = d.chosen_model AND r.status = 'ok') AS chosen,
       r.error_kind, d.strategy, d.arbiter, d.fallback
FROM workflow.worker_results r
LEFT JOIN workflow.arbiter_decisions d USING (request_id);
ALTER TABLE workflow.worker_results DROP COLUMN decider;
