package postgres

import (
	"context"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Spend implements store.Spender over the records' projection.
func (s *Store) Spend(ctx context.Context, q store.SpendQuery) ([]store.SpendGroup, error) {
	query := `SELECT r.model, count(*), sum(r.cost_nanos)::bigint FROM (
	SELECT w.model, w.cost_nanos FROM workflow.worker_results w JOIN workflow.executions e USING (request_id)
	WHERE e.key_id = $1 AND e.received_at >= $2 AND e.received_at < $3
	UNION ALL
	SELECT a.arbiter, a.arbiter_cost_nanos FROM workflow.arbiter_decisions a JOIN workflow.executions e USING (request_id)
	WHERE e.key_id = $1 AND e.received_at >= $2 AND e.received_at < $3 AND a.arbiter_cost_nanos > 0) r
GROUP BY r.model ORDER BY sum(r.cost_nanos) DESC, r.model`
	if q.ByDay {
		query = `SELECT to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*), sum(cost_nanos)::bigint FROM workflow.executions
WHERE key_id = $1 AND received_at >= $2 AND received_at < $3 GROUP BY day ORDER BY day`
	}
	rows, err := s.pool.Query(ctx, query, q.KeyID, q.Since, q.Until)
	if err != nil {
		return nil, classify(err)
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.SpendGroup, error) {
		var g store.SpendGroup
		var name string
		err := row.Scan(&name, &g.Requests, &g.CostUSD)
		if q.ByDay {
			g.Day = name
		} else {
			g.Model = name
		}
		return g, err
	})
	return groups, classify(err)
}

// Pool is the store's connection pool, for the adapters that keep other tables of the same database.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
