package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/jackc/pgx/v5"
)

// Difference is one place where the books disagree: what, about whom, and the two sides' amounts.
type Difference struct {
	What  string
	Who   string
	Left  money.USD
	Right money.USD
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s: %s against %s (%s)", d.What, d.Who, d.Left, d.Right, d.Left-d.Right)
}

// BooksReport is what CheckBooks found: the differences, and how much it compared.
type BooksReport struct {
	Since       time.Time
	Calls       int64
	Requests    int64
	Keys        int64
	Charged     money.USD
	Differences []Difference
}

// OpenAfter is how long past its deadline an intent may stay open before the check names it: its
// controller's lease must end, and another controller's recovery come round.
const OpenAfter = 2 * time.Minute

// CheckBooks compares the books: every key's and team's spend by period with its spend by day and
// model (kept forever), and, for what was sent since since, the journal's settled calls with both and with the
// records' calls (each call's cost in its record, and each record's cost with its calls'). An intent
// still open well past its deadline is a difference too. No difference means every token a provider
// served is charged to one key (and its team), once, and recorded.
func (s *Store) CheckBooks(ctx context.Context, since time.Time) (BooksReport, error) {
	r := BooksReport{Since: since}
	err := s.pool.QueryRow(ctx, `
SELECT count(*), count(DISTINCT request_id), count(DISTINCT key_id) FILTER (WHERE key_id <> ''), coalesce(sum(cost_nanos), 0)::bigint
FROM books.journal WHERE opened_at >= $1 AND state <> 'open'`, since).Scan(&r.Calls, &r.Requests, &r.Keys, &r.Charged)
	if err != nil {
		return r, classify(err)
	}
	checks := []struct {
		what string
		sql  string
	}{
		// A key's spend by period and its spend by day and model: two sums of the same charges.
		{"key spend by period against by day", `
WITH p AS (SELECT key_id, sum(spent_nanos) AS n FROM books.key_periods WHERE period_start <> '-infinity' GROUP BY key_id),
     d AS (SELECT key_id, sum(cost_nanos) AS n FROM books.spend_daily GROUP BY key_id)
SELECT coalesce(p.key_id, d.key_id), coalesce(p.n, 0)::bigint, coalesce(d.n, 0)::bigint FROM p FULL JOIN d USING (key_id)
WHERE coalesce(p.n, 0) <> coalesce(d.n, 0) AND $1::timestamptz IS NOT NULL`},
		// The journal's charges each day against the spend by day and model.
		{"key spend by day and model against the journal", `
WITH j AS (SELECT key_id, (opened_at AT TIME ZONE 'UTC')::date AS day, model, sum(cost_nanos) AS n FROM books.journal
           WHERE state <> 'open' AND key_id <> '' AND opened_at >= date_trunc('day', $1::timestamptz) GROUP BY 1, 2, 3),
     d AS (SELECT key_id, day, model, cost_nanos AS n FROM books.spend_daily WHERE day >= ($1::timestamptz AT TIME ZONE 'UTC')::date)
SELECT coalesce(j.key_id, d.key_id) || ' ' || coalesce(j.day, d.day) || ' ' || coalesce(j.model, d.model), coalesce(j.n, 0)::bigint, coalesce(d.n, 0)::bigint
FROM j FULL JOIN d ON j.key_id = d.key_id AND j.day = d.day AND j.model = d.model WHERE coalesce(j.n, 0) <> coalesce(d.n, 0)`},
		// The same two for teams: a team's spend by period and by day and model, and the journal's
		// charges to the team each day.
		{"team spend by period against by day", `
WITH p AS (SELECT team_id, sum(spent_nanos) AS n FROM books.team_periods WHERE period_start <> '-infinity' GROUP BY team_id),
     d AS (SELECT team_id, sum(cost_nanos) AS n FROM books.team_spend_daily GROUP BY team_id)
SELECT coalesce(p.team_id, d.team_id), coalesce(p.n, 0)::bigint, coalesce(d.n, 0)::bigint FROM p FULL JOIN d USING (team_id)
WHERE coalesce(p.n, 0) <> coalesce(d.n, 0) AND $1::timestamptz IS NOT NULL`},
		{"team spend by day and model against the journal", `
WITH j AS (SELECT team_id, (opened_at AT TIME ZONE 'UTC')::date AS day, model, sum(cost_nanos) AS n FROM books.journal
           WHERE state <> 'open' AND key_id <> '' AND team_id <> '' AND opened_at >= date_trunc('day', $1::timestamptz) GROUP BY 1, 2, 3),
     d AS (SELECT team_id, day, model, cost_nanos AS n FROM books.team_spend_daily WHERE day >= ($1::timestamptz AT TIME ZONE 'UTC')::date)
SELECT coalesce(j.team_id, d.team_id) || ' ' || coalesce(j.day, d.day) || ' ' || coalesce(j.model, d.model), coalesce(j.n, 0)::bigint, coalesce(d.n, 0)::bigint
FROM j FULL JOIN d ON j.team_id = d.team_id AND j.day = d.day AND j.model = d.model WHERE coalesce(j.n, 0) <> coalesce(d.n, 0)`},
		// Each settled call against its request's record: the call's cost in the record (its last
		// result, or the arbiter's), for the requests recorded.
		{"call in the journal against its record", `
WITH rec AS (
    SELECT w.job_id AS call_id, sum(w.cost_nanos) AS n FROM workflow.worker_results w JOIN workflow.executions e USING (request_id, received_at)
    WHERE e.received_at >= $1 AND w.job_id <> '' GROUP BY w.job_id
    UNION ALL
    SELECT a.request_id || '/arbiter', a.arbiter_cost_nanos FROM workflow.arbiter_decisions a JOIN workflow.executions e USING (request_id, received_at)
    WHERE e.received_at >= $1 AND a.arbiter_cost_nanos > 0
), j AS (
    SELECT j.call_id, j.cost_nanos AS n FROM books.journal j
    WHERE j.state <> 'open' AND j.opened_at >= $1 AND EXISTS (SELECT 1 FROM workflow.executions e WHERE e.request_id = j.request_id)
)
SELECT coalesce(j.call_id, rec.call_id), coalesce(j.n, 0)::bigint, coalesce(rec.n, 0)::bigint FROM j FULL JOIN rec USING (call_id)
WHERE coalesce(j.n, 0) <> coalesce(rec.n, 0)`},
		// Every settled call has its request recorded.
		{"request charged without a record", `
SELECT request_id, sum(cost_nanos)::bigint, 0::bigint FROM books.journal j WHERE state <> 'open' AND opened_at >= $1
    AND NOT EXISTS (SELECT 1 FROM workflow.executions e WHERE e.request_id = j.request_id)
GROUP BY request_id`},
		// A record's cost is its calls'.
		{"record cost against its calls", `
SELECT e.request_id, e.cost_nanos, (coalesce((SELECT sum(w.cost_nanos) FROM workflow.worker_results w
    WHERE w.request_id = e.request_id AND w.received_at = e.received_at), 0) + coalesce((SELECT a.arbiter_cost_nanos FROM workflow.arbiter_decisions a
    WHERE a.request_id = e.request_id AND a.received_at = e.received_at), 0))::bigint AS calls
FROM workflow.executions e WHERE e.received_at >= $1 AND e.cost_nanos <> (coalesce((SELECT sum(w.cost_nanos) FROM workflow.worker_results w
    WHERE w.request_id = e.request_id AND w.received_at = e.received_at), 0) + coalesce((SELECT a.arbiter_cost_nanos FROM workflow.arbiter_decisions a
    WHERE a.request_id = e.request_id AND a.received_at = e.received_at), 0))`},
		// An intent left open past its deadline: a call sent and never settled.
		{"call still open", `
SELECT call_id, reserved_nanos, 0::bigint FROM books.journal WHERE state = 'open' AND opened_at >= $1
    AND deadline < now() - ` + fmt.Sprintf("interval '%d seconds'", int(OpenAfter.Seconds()))},
	}
	for _, c := range checks {
		rows, err := s.pool.Query(ctx, c.sql, since)
		if err != nil {
			return r, fmt.Errorf("%s: %w", c.what, classify(err))
		}
		diffs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Difference, error) {
			d := Difference{What: c.what}
			err := row.Scan(&d.Who, &d.Left, &d.Right)
			return d, err
		})
		if err != nil {
			return r, fmt.Errorf("%s: %w", c.what, classify(err))
		}
		r.Differences = append(r.Differences, diffs...)
	}
	return r, nil
}
