package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/messages"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Write implements store.Store: the calls and the records of a batch in one transaction. A batch the
// database refuses for its content is written again in parts, the calls first (they carry money), then
// each record on its own, and the parts refused are reported.
func (s *Store) Write(ctx context.Context, b store.Batch) error {
	if len(b.Calls) == 0 && len(b.Records) == 0 {
		return nil
	}
	err := s.write(ctx, b.Calls, b.Records)
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	if len(b.Calls) > 0 {
		if err := s.write(ctx, b.Calls, nil); err != nil {
			if errors.Is(err, store.ErrUnavailable) {
				return err
			}
			ids := make([]string, len(b.Calls))
			for i, c := range b.Calls {
				ids[i] = c.CallId
			}
			return &store.RejectedError{IDs: ids, Err: err}
		}
	}
	return s.Insert(ctx, b.Records)
}

// write writes calls and records in one transaction. The records of requests whose calls settle as
// interrupted are a recovering controller's, made when it may not know of one written already.
func (s *Store) write(ctx context.Context, calls []*messages.Call, records []*messages.Execution) error {
	now := s.now()
	j := journalColumns(calls)
	interrupted := map[string]bool{}
	for _, c := range calls {
		if c.State == store.CallInterrupted {
			interrupted[c.RequestId] = true
		}
	}
	return classify(pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(j.id) > 0 {
			if _, err := tx.Exec(ctx, settleSQL, j.args()...); err != nil {
				return err
			}
		}
		if len(records) == 0 {
			return nil
		}
		return insertRecords(ctx, tx, records, now, interrupted)
	}))
}

// settleSQL writes calls of the journal: an intent is inserted unless its call is there already; a
// settlement inserts its call, or turns its open intent settled. A call is found by (opened_at,
// call_id), the journal's key: its intent and its settlement carry the same opening time, which
// finds the call in its week's partition. The rows that turned settled (or
// interrupted) in this statement, and only they, are charged to their keys and their keys' teams: their
// spend in their budget period and their spend per day and model, taken in key (and team) order so
// that concurrent writers do not deadlock.
const settleSQL = `
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[],
        $9::timestamptz[], $10::timestamptz[], $11::int8[], $12::int8[], $13::text[], $14::timestamptz[], $15::int8[], $16::int8[],
        $17::bool[], $18::int8[], $19::text[], $20::timestamptz[])
    AS u(call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline, reserved_nanos,
        reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos, team_id, team_period_start)
), j AS (
    INSERT INTO books.journal AS j (call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline,
        reserved_nanos, reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos, team_id, team_period_start)
    SELECT * FROM u
    ON CONFLICT (opened_at, call_id) DO UPDATE SET state = excluded.state, settled_at = excluded.settled_at, input_tokens = excluded.input_tokens,
        output_tokens = excluded.output_tokens, estimated = excluded.estimated, cost_nanos = excluded.cost_nanos
    WHERE j.state = 'open' AND excluded.state <> 'open'
    RETURNING j.key_id, j.period_start, j.model, j.opened_at, j.settled_at, j.state, j.input_tokens, j.output_tokens, j.cost_nanos, j.team_id,
        j.team_period_start
), charged AS (
    SELECT * FROM j WHERE state <> 'open' AND key_id <> ''
), days AS (
    INSERT INTO books.spend_daily AS d (key_id, day, model, calls, input_tokens, output_tokens, cost_nanos)
    SELECT key_id, (opened_at AT TIME ZONE 'UTC')::date, model, count(*), sum(input_tokens), sum(output_tokens), sum(cost_nanos)
    FROM charged GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (key_id, day, model) DO UPDATE SET calls = d.calls + excluded.calls, input_tokens = d.input_tokens + excluded.input_tokens,
        output_tokens = d.output_tokens + excluded.output_tokens, cost_nanos = d.cost_nanos + excluded.cost_nanos
), team_days AS (
    INSERT INTO books.team_spend_daily AS d (team_id, day, model, calls, input_tokens, output_tokens, cost_nanos)
    SELECT team_id, (opened_at AT TIME ZONE 'UTC')::date, model, count(*), sum(input_tokens), sum(output_tokens), sum(cost_nanos)
    FROM charged WHERE team_id <> '' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (team_id, day, model) DO UPDATE SET calls = d.calls + excluded.calls, input_tokens = d.input_tokens + excluded.input_tokens,
        output_tokens = d.output_tokens + excluded.output_tokens, cost_nanos = d.cost_nanos + excluded.cost_nanos
), teams AS (
    INSERT INTO books.team_periods AS p (team_id, period_start, spent_nanos, calls, last_at)
    SELECT team_id, coalesce(team_period_start, '-infinity'), sum(cost_nanos), count(*), max(settled_at) FROM charged WHERE team_id <> ''
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (team_id, period_start) DO UPDATE SET spent_nanos = p.spent_nanos + excluded.spent_nanos, calls = p.calls + excluded.calls,
        last_at = greatest(p.last_at, excluded.last_at)
)
INSERT INTO books.key_periods AS p (key_id, period_start, spent_nanos, calls, last_at)
SELECT key_id, coalesce(period_start, '-infinity'), sum(cost_nanos), count(*), max(settled_at) FROM charged GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (key_id, period_start) DO UPDATE SET spent_nanos = p.spent_nanos + excluded.spent_nanos, calls = p.calls + excluded.calls,
    last_at = greatest(p.last_at, excluded.last_at)`

// calls is a batch of journaled calls laid out as one array per column.
type calls struct {
	id, request, key, model, provider, node, run, state, team []string
	periodStart, settledAt, teamPeriodStart                   []*time.Time
	opened, deadline                                          []time.Time
	reserved, reservedTokens, input, output, cost             []int64
	estimated                                                 []bool
}

// journalColumns lays out calls, the latest word on each call only: a statement may not touch a row
// twice, and a settlement is later than its intent.
func journalColumns(cs []*messages.Call) calls {
	last := make(map[string]int, len(cs))
	for i, c := range cs {
		if j, ok := last[c.CallId]; !ok || !store.Settled(cs[j]) {
			last[c.CallId] = i
		}
	}
	var j calls
	for i, c := range cs {
		if last[c.CallId] != i {
			continue
		}
		j.id = append(j.id, text(c.CallId))
		j.request = append(j.request, text(c.RequestId))
		j.key = append(j.key, text(c.KeyId))
		j.model = append(j.model, text(c.Model))
		j.provider = append(j.provider, text(c.Provider))
		j.node = append(j.node, text(c.NodeId))
		j.run = append(j.run, text(c.RunId))
		j.state = append(j.state, c.State)
		var settled *time.Time
		period, teamPeriod := microTime(c.PeriodStart), microTime(c.TeamPeriodStart)
		if c.SettledAt != nil {
			t := c.SettledAt.AsTime()
			settled = &t
		}
		j.periodStart = append(j.periodStart, period)
		j.team = append(j.team, text(c.TeamId))
		j.teamPeriodStart = append(j.teamPeriodStart, teamPeriod)
		j.settledAt = append(j.settledAt, settled)
		j.opened = append(j.opened, c.GetOpenedAt().AsTime())
		j.deadline = append(j.deadline, c.GetDeadline().AsTime())
		j.reserved = append(j.reserved, c.ReservedNanos)
		j.reservedTokens = append(j.reservedTokens, c.ReservedTokens)
		j.input = append(j.input, int64(c.GetUsage().GetInputTokens()))
		j.output = append(j.output, int64(c.GetUsage().GetOutputTokens()))
		j.estimated = append(j.estimated, c.GetUsage().GetEstimated())
		j.cost = append(j.cost, c.CostNanos)
	}
	return j
}

func (j calls) args() []any {
	return []any{j.id, j.request, j.key, j.periodStart, j.model, j.provider, j.node, j.run, j.opened, j.deadline, j.reserved,
		j.reservedTokens, j.state, j.settledAt, j.input, j.output, j.estimated, j.cost, j.team, j.teamPeriodStart}
}

// microTime is a time in unix microseconds, nil for 0 (none).
func microTime(us int64) *time.Time {
	if us == 0 {
		return nil
	}
	t := time.UnixMicro(us).UTC()
	return &t
}

// Lease implements store.Journal: this run of node holds its lease until the database's clock passes
// lease from now. Runs whose lease ended a day ago and that left no call open are forgotten.
func (s *Store) Lease(ctx context.Context, node, run string, lease time.Duration) error {
	_, err := s.pool.Exec(ctx, `
WITH gone AS (
    DELETE FROM books.runs r WHERE lease_until < now() - interval '1 day'
        AND NOT EXISTS (SELECT 1 FROM books.journal j WHERE j.state = 'open' AND j.node_id = r.node_id AND j.run_id = r.run_id)
)
INSERT INTO books.runs (node_id, run_id, started_at, lease_until) VALUES ($1, $2, now(), now() + $3 * interval '1 microsecond')
ON CONFLICT (node_id, run_id) DO UPDATE SET lease_until = excluded.lease_until`, node, run, lease.Microseconds())
	return classify(err)
}

// Unsettled implements store.Journal.
func (s *Store) Unsettled(ctx context.Context, run string, limit int) ([]*messages.Call, error) {
	rows, err := s.pool.Query(ctx, `
SELECT call_id, request_id, key_id, coalesce((extract(epoch FROM period_start) * 1000000)::bigint, 0), model, provider, node_id, run_id, opened_at, deadline, reserved_nanos,
    reserved_tokens, team_id, coalesce((extract(epoch FROM team_period_start) * 1000000)::bigint, 0)
FROM books.journal j
LEFT JOIN books.runs r USING (node_id, run_id)
WHERE j.state = 'open' AND j.run_id <> $1 AND (r.lease_until < now() OR (r.run_id IS NULL AND j.deadline < now() - interval '30 seconds'))
ORDER BY j.opened_at LIMIT $2`, run, limit)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*messages.Call, error) {
		var c messages.Call
		var opened, deadline time.Time
		err := row.Scan(&c.CallId, &c.RequestId, &c.KeyId, &c.PeriodStart, &c.Model, &c.Provider, &c.NodeId, &c.RunId, &opened, &deadline,
			&c.ReservedNanos, &c.ReservedTokens, &c.TeamId, &c.TeamPeriodStart)
		c.OpenedAt, c.Deadline, c.State = timestamppb.New(opened), timestamppb.New(deadline), store.CallOpen
		return &c, err
	})
	return out, classify(err)
}
