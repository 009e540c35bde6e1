package postgres

import (
	"context"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Spend implements store.Spender over the books' rollups, a few rows per key (or team) and day however
// many records there are: by model, the calls and cost of each (books.spend_daily, or
// books.team_spend_daily, charged as the calls settle); by day, the requests (books.requests_daily, or
// books.team_requests_daily, as their records are written) and the cost. The rollups count whole days
// (UTC), so a window counts every day it touches: its first and last days whole.
func (s *Store) Spend(ctx context.Context, q store.SpendQuery) ([]store.SpendGroup, error) {
	first, last := day(q.Since), day(q.Until.Add(-time.Microsecond))
	owner, spend, requests, id := "key_id", "books.spend_daily", "books.requests_daily", q.KeyID
	if q.TeamID != "" {
		owner, spend, requests, id = "team_id", "books.team_spend_daily", "books.team_requests_daily", q.TeamID
	}
	query := `
SELECT model, sum(calls)::bigint, sum(cost_nanos)::bigint FROM ` + spend + `
WHERE ` + owner + ` = $1 AND day >= $2 AND day <= $3
GROUP BY model ORDER BY sum(cost_nanos) DESC, model`
	if q.ByDay {
		query = `
WITH requests AS (
    SELECT day, requests FROM ` + requests + ` WHERE ` + owner + ` = $1 AND day >= $2 AND day <= $3
), cost AS (
    SELECT day, sum(cost_nanos) AS cost_nanos FROM ` + spend + ` WHERE ` + owner + ` = $1 AND day >= $2 AND day <= $3 GROUP BY day
)
SELECT to_char(day, 'YYYY-MM-DD'), coalesce(requests, 0), coalesce(cost_nanos, 0)::bigint
FROM requests FULL JOIN cost USING (day) ORDER BY day`
	}
	rows, err := s.pool.Query(ctx, query, id, first, last)
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

// day is t's day in UTC, as a date parameter.
func day(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// Pool is the store's connection pool, for the adapters that keep other tables of the same database.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
