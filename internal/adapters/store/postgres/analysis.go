package postgres

import (
	"context"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/jackc/pgx/v5"
)

// Models implements store.Analyst.
func (s *Store) Models(ctx context.Context, category string, limit int) ([]store.ModelPerformance, error) {
	rows, err := s.pool.Query(ctx, `
SELECT category, model, provider, calls, answers, agreement_rate, feedback_reward, feedback_count, p50_latency_ms, p95_latency_ms, cost_nanos
FROM workflow.model_performance
WHERE $1 = '' OR category = $1
ORDER BY category, coalesce(feedback_reward, agreement_rate) DESC NULLS LAST, p50_latency_ms NULLS LAST
LIMIT $2`, category, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.ModelPerformance])
	return out, classify(err)
}

// Cost implements store.Analyst.
func (s *Store) Cost(ctx context.Context, since, until time.Time) ([]store.ProviderCost, []store.RequestCost, error) {
	rows, err := s.pool.Query(ctx, `
SELECT day, provider, requests, calls, input_tokens, output_tokens, cost_nanos FROM workflow.provider_cost_daily
WHERE day >= date_trunc('day', $1::timestamptz) AND day < $2 ORDER BY day DESC, cost_nanos DESC`, since, until)
	if err != nil {
		return nil, nil, classify(err)
	}
	providers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.ProviderCost])
	if err != nil {
		return nil, nil, classify(err)
	}
	rows, err = s.pool.Query(ctx, `
SELECT day, requests, tokens_per_request, cost_per_request_nanos, input_tokens, output_tokens, cost_nanos FROM workflow.request_cost_daily
WHERE day >= date_trunc('day', $1::timestamptz) AND day < $2 ORDER BY day DESC`, since, until)
	if err != nil {
		return nil, nil, classify(err)
	}
	requests, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.RequestCost])
	return providers, requests, classify(err)
}

// Trace implements store.Analyst: a record's calls are found by its receipt time and request id, the
// key of their partitions.
func (s *Store) Trace(ctx context.Context, id string) ([]store.TraceStep, error) {
	rows, err := s.pool.Query(ctx, `
SELECT position, model, provider, worker, attempt, status, latency_ms, weighted_score, contributed, decider,
    coalesce(chosen, false), error_kind, strategy, arbiter, fallback
FROM workflow.request_trace
WHERE request_id = $1 AND received_at = (SELECT received_at FROM workflow.executions WHERE request_id = $1 LIMIT 1)
ORDER BY position`, id)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.TraceStep])
	return out, classify(err)
}

// Latency implements store.Analyst.
func (s *Store) Latency(ctx context.Context) ([]store.PhaseLatency, []store.ProviderTimeouts, error) {
	rows, err := s.pool.Query(ctx, `SELECT phase, requests, avg_ms, p50_ms, p95_ms, max_ms FROM workflow.phase_latency ORDER BY avg_ms DESC`)
	if err != nil {
		return nil, nil, classify(err)
	}
	phases, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.PhaseLatency])
	if err != nil {
		return nil, nil, classify(err)
	}
	rows, err = s.pool.Query(ctx, `SELECT provider, calls, timeouts, timeout_rate, host_timeouts FROM workflow.provider_timeouts ORDER BY timeout_rate DESC, calls DESC`)
	if err != nil {
		return nil, nil, classify(err)
	}
	timeouts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.ProviderTimeouts])
	return phases, timeouts, classify(err)
}
