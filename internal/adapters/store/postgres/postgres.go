// Package postgres is the PostgreSQL record store (jackc/pgx): execution records and their queryable
// projection in schema workflow, the journal of calls and the keys' spend in schema books, what the
// bandit learned in schema learning (see migrations/), the analysis views over them, and the weekly
// partitions of the records and the journal (partitions.go). Failures to reach the database wrap
// store.ErrUnavailable.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool  *pgxpool.Pool
	now   func() time.Time
	where string
}

// Options tune the store.
type Options struct {
	// MaxConns bounds the pool (pgxpool's default when zero).
	MaxConns int32
	// ConnectTimeout bounds each new connection (5 s when zero): a database that is down is found out
	// quickly, and the recorder spools.
	ConnectTimeout time.Duration
	// Now tells time for records without one; nil means time.Now.
	Now func() time.Time
}

// Open connects to the database at url, checks that its schema is this build's (run `conclave
// migrate up` otherwise), and makes the partitions of the weeks ahead that are missing. The URL, which
// may carry a password, never appears in an error.
func Open(ctx context.Context, url secret.String, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url.Reveal())
	if err != nil {
		return nil, errors.New("database_url is not a PostgreSQL URL or connection string")
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	s := &Store{pool: pool, now: o.Now, where: where(cfg.ConnConfig)}
	if s.now == nil {
		s.now = time.Now
	}
	err = pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return migrations.Check(ctx, c.Conn()) })
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s: %w", s.where, err)
	}
	// Best effort: should the partitions not be made now (another controller holding the locks, a role
	// that may not create tables), rows go to the DEFAULT partitions meanwhile, and the upkeep, which
	// the engine runs at once and then hourly, tries again and says why.
	now := s.now()
	_, _ = s.makeWeeks(ctx, now, now.Add(WeeksAhead*Week))
	return s, nil
}

// Where names the database without its password: host, port and name.
func (s *Store) Where() string { return s.where }

func where(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// classify wraps the failures that mean the database cannot be reached, or cannot take the work
// now, in store.ErrUnavailable; what the database refused for its content is returned as it is.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code[:2] {
		case "08", "53", "57", "58", "40", "55": // connection, resources, operator intervention, system, rollback, lock
			return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
		return err
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "unexpected EOF") || strings.Contains(err.Error(), "closed pool") {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return err
}

// Insert implements store.Store: the whole batch in one transaction, the executions first, then the
// rows of the executions that were new. When the database refuses the batch for what a record holds,
// each record is written in a transaction of its own and the refused ones are reported.
func (s *Store) Insert(ctx context.Context, records []*messages.Execution) error {
	if len(records) == 0 {
		return nil
	}
	err := s.insert(ctx, records)
	if err == nil || errors.Is(err, store.ErrUnavailable) || len(records) == 1 {
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			return &store.RejectedError{IDs: []string{records[0].RequestId}, Err: err}
		}
		return err
	}
	rejected := &store.RejectedError{Err: err}
	for _, r := range records {
		if err := s.insert(ctx, []*messages.Execution{r}); err != nil {
			if errors.Is(err, store.ErrUnavailable) {
				return err
			}
			rejected.IDs = append(rejected.IDs, r.RequestId)
		}
	}
	if len(rejected.IDs) == 0 {
		return nil
	}
	return rejected
}

func (s *Store) insert(ctx context.Context, records []*messages.Execution) error {
	now := s.now()
	return classify(pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return insertRecords(ctx, tx, records, now, nil) }))
}

// insertExecutionsSQL inserts the executions of a batch and returns the request ids of those that
// were new: not there under the same receipt time. The primary key's index, the conflict's arbiter,
// finds that in the current week's partition: the cost of a record does not grow with the table.
const insertExecutionsSQL = `
INSERT INTO workflow.executions (request_id, client_request_id, node_id, received_at, completed_at, task, category, confidence,
    blueprint, workers, min_responses, timeout_seconds, overrides, strategy, outcome, status_code, error_code, degraded, answer,
    total_ms, input_tokens, output_tokens, cost_nanos, record, key_id, trace_id)
SELECT id, client_id, node, received, completed, task, category, confidence, blueprint, workers, min_responses, timeout,
    ARRAY(SELECT jsonb_array_elements_text(overrides::jsonb)), strategy, outcome, status, error_code, degraded, answer,
    total_ms, input_tokens, output_tokens, cost, record, key_id, trace_id
FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[], $8::float8[],
    $9::text[], $10::int4[], $11::int4[], $12::float8[], $13::text[], $14::text[], $15::text[], $16::int4[], $17::text[],
    $18::bool[], $19::text[], $20::float8[], $21::int8[], $22::int8[], $23::int8[], $24::bytea[], $25::text[], $26::text[])
    AS u(id, client_id, node, received, completed, task, category, confidence, blueprint, workers, min_responses, timeout,
    overrides, strategy, outcome, status, error_code, degraded, answer, total_ms, input_tokens, output_tokens, cost, record, key_id, trace_id)
ON CONFLICT (request_id, received_at) DO NOTHING
RETURNING request_id`

// insertRecords inserts records within tx: the executions, then the calls, verdicts, phases and
// rewards of those that were new, and the keys' requests per day. A record is the same as another of
// its request id under the same receipt time (the key); a record without a receipt time of its own
// (written at now), or in interrupted (the record a recovering controller makes of a request whose
// calls it settled, received when its first call opened), is the same as any of its request id,
// and is left out when one is there already.
func insertRecords(ctx context.Context, tx pgx.Tx, records []*messages.Execution, now time.Time, interrupted map[string]bool) error {
	var unsure []string
	for _, r := range records {
		if r.ReceivedAt == nil || interrupted[r.RequestId] {
			unsure = append(unsure, r.RequestId)
		}
	}
	if len(unsure) > 0 {
		there, err := recorded(ctx, tx, unsure)
		if err != nil {
			return err
		}
		records = slices.DeleteFunc(slices.Clone(records), func(r *messages.Execution) bool { return there[r.RequestId] })
	}
	if len(records) == 0 {
		return nil
	}
	var c columns
	for _, r := range records {
		if err := c.add(r, now); err != nil {
			return fmt.Errorf("encode %s: %w", r.RequestId, err)
		}
	}
	x := c.exec
	rows, err := tx.Query(ctx, insertExecutionsSQL, x.args()...)
	if err != nil {
		return err
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(fresh) == 0 {
		return err
	}
	b := &pgx.Batch{}
	r := c.results
	b.Queue(`
INSERT INTO workflow.worker_results (request_id, received_at, position, job_id, model, provider, worker, attempt, status, latency_ms,
    provider_latency_ms, budget_ms, raw_response, weighted_score, contributed, input_tokens, output_tokens, cost_nanos, error_kind,
    error_scope, error_message, http_status, finish_reason, served_model, upstream_request_id, decider)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int4[], $9::text[],
    $10::float8[], $11::float8[], $12::float8[], $13::text[], $14::float8[], $15::bool[], $16::int8[], $17::int8[], $18::int8[],
    $19::text[], $20::text[], $21::text[], $22::int4[], $23::text[], $24::text[], $25::text[], $26::bool[]) AS u(id)
WHERE u.id = ANY($27)`,
		r.id, r.received, r.position, r.job, r.model, r.provider, r.worker, r.attempt, r.status, r.latency, r.providerLatency, r.budget,
		r.raw, r.score, r.contributed, r.inputTokens, r.outputTokens, r.cost, r.errKind, r.errScope, r.errMessage, r.httpStatus, r.finish,
		r.served, r.upstreamID, r.decider, fresh)
	v := c.verdict
	b.Queue(`
INSERT INTO workflow.arbiter_decisions (request_id, received_at, strategy, arbiter, fallback, arbiter_error, chosen_model, chosen,
    synthesis, scores, agreement, disagreement, arbiter_latency_ms, arbiter_input_tokens, arbiter_output_tokens, arbiter_cost_nanos)
SELECT id, received, strategy, arbiter, fallback, arbiter_error, chosen_model, chosen, synthesis,
    ARRAY(SELECT jsonb_array_elements_text(scores::jsonb)::float8), ARRAY(SELECT jsonb_array_elements_text(agreement::jsonb)),
    ARRAY(SELECT jsonb_array_elements_text(disagreement::jsonb)), latency, input_tokens, output_tokens, cost
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::bool[], $6::text[], $7::text[], $8::int4[], $9::bool[],
    $10::text[], $11::text[], $12::text[], $13::float8[], $14::int8[], $15::int8[], $16::int8[])
    AS u(id, received, strategy, arbiter, fallback, arbiter_error, chosen_model, chosen, synthesis, scores, agreement, disagreement,
    latency, input_tokens, output_tokens, cost)
WHERE u.id = ANY($17)`,
		v.id, v.received, v.strategy, v.arbiter, v.fallback, v.arbiterError, v.chosenModel, v.chosen, v.synthesis, v.scores, v.agreement,
		v.disagreement, v.latency, v.inputTokens, v.outputTokens, v.cost, fresh)
	b.Queue(`
INSERT INTO workflow.phases (request_id, received_at, phase, duration_ms)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::float8[]) AS u(id) WHERE u.id = ANY($5)`,
		c.phases.id, c.phases.received, c.phases.phase, c.phases.ms, fresh)
	queueRewards(b, c.rewards, fresh)
	b.Queue(`
INSERT INTO books.requests_daily AS d (key_id, day, requests)
SELECT key, (received AT TIME ZONE 'UTC')::date, count(*) FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(id, key, received)
WHERE u.id = ANY($4) AND key <> '' GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (key_id, day) DO UPDATE SET requests = d.requests + excluded.requests`, x.id, x.keyID, x.received, fresh)
	b.Queue(`
INSERT INTO books.team_requests_daily AS d (team_id, day, requests)
SELECT team, (received AT TIME ZONE 'UTC')::date, count(*) FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(id, team, received)
WHERE u.id = ANY($4) AND team <> '' GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (team_id, day) DO UPDATE SET requests = d.requests + excluded.requests`, x.id, x.teamID, x.received, fresh)
	return tx.SendBatch(ctx, b).Close()
}

// recorded says which of the request ids have a record, under any receipt time: an index probe in
// every partition. Sequential scans are off for it: a cached plan made while a week's partition was
// empty would otherwise read that partition whole once it fills.
func recorded(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error) {
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT request_id FROM workflow.executions WHERE request_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	there := map[string]bool{}
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		there[id] = true
		return nil
	})
	return there, err
}

// queueRewards adds rewards to the history and to their arms and the models' all-categories arms,
// for the requests in only. Arms are locked in one order, so concurrent writers cannot deadlock.
func queueRewards(b *pgx.Batch, r rewardColumns, only []string) {
	if len(r.model) == 0 {
		return
	}
	b.Queue(`
INSERT INTO learning.strategy_performance_history (model, category, reward, reason, request_id, node_id, at)
SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
    AS u(model, category, reward, reason, id)
WHERE u.id = ANY($8)`,
		r.model, r.category, r.reward, r.reason, r.id, r.node, r.at, only)
	b.Queue(`
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[]) AS u(model, category, reward, id) WHERE u.id = ANY($5)
), arms AS (
    SELECT model, category, reward FROM u
    UNION ALL
    SELECT model, '*', reward FROM u WHERE category <> '*'
)
INSERT INTO learning.strategy_performance AS s (model, category, alpha, beta, pulls, updated_at)
SELECT model, category, sum(reward), sum(1 - reward), count(*), now() FROM arms GROUP BY model, category ORDER BY model, category
ON CONFLICT (model, category) DO UPDATE
SET alpha = s.alpha + excluded.alpha, beta = s.beta + excluded.beta, pulls = s.pulls + excluded.pulls, updated_at = now()`,
		r.model, r.category, r.reward, r.id, only)
}

// feedbackJSON is how feedback is kept in executions.feedback.
type feedbackJSON struct {
	Model       string  `json:"model"`
	Category    string  `json:"category"`
	Reward      float64 `json:"reward"`
	Reason      string  `json:"reason"`
	AlphaBefore float64 `json:"alpha_before"`
	BetaBefore  float64 `json:"beta_before"`
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id string) (*messages.Execution, error) {
	var raw, fb []byte
	var at *time.Time
	err := s.pool.QueryRow(ctx, `SELECT record, feedback, feedback_at FROM workflow.executions WHERE request_id = $1`, id).Scan(&raw, &fb, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, store.ErrNotFound
	case err != nil:
		return nil, classify(err)
	}
	rec := &messages.Execution{}
	if err := rec.UnmarshalVT(raw); err != nil {
		return nil, fmt.Errorf("record %s: %w", id, err)
	}
	if fb != nil {
		var ups []feedbackJSON
		if err := json.Unmarshal(fb, &ups); err != nil {
			return nil, fmt.Errorf("feedback of %s: %w", id, err)
		}
		f := store.Feedback{}
		if at != nil {
			f.At = *at
		}
		for _, u := range ups {
			f.Updates = append(f.Updates, &messages.BanditUpdate{Model: u.Model, Category: u.Category, Reward: u.Reward, Reason: u.Reason,
				AlphaBefore: u.AlphaBefore, BetaBefore: u.BetaBefore})
		}
		rec = store.WithFeedback(rec, &f)
	}
	return rec, nil
}

// SetFeedback implements store.Store: a conditional update (feedback IS NULL), and the rewards with it
// in the same transaction, so of two controllers only one rewards an execution.
func (s *Store) SetFeedback(ctx context.Context, id string, fb store.Feedback) (bool, error) {
	ups := make([]feedbackJSON, len(fb.Updates))
	var r rewardColumns
	for i, u := range fb.Updates {
		ups[i] = feedbackJSON{Model: u.Model, Category: u.Category, Reward: u.Reward, Reason: u.Reason, AlphaBefore: u.AlphaBefore, BetaBefore: u.BetaBefore}
	}
	r.add(id, fb.NodeID, fb.At, fb.Updates)
	raw, err := json.Marshal(ups)
	if err != nil {
		return false, err
	}
	applied := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE workflow.executions SET feedback = $2, feedback_at = $3 WHERE request_id = $1 AND feedback IS NULL`, id, raw, fb.At)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT true FROM workflow.executions WHERE request_id = $1`, id).Scan(&exists); errors.Is(err, pgx.ErrNoRows) {
				return store.ErrNotFound
			} else if err != nil {
				return err
			}
			return nil
		}
		applied = true
		b := &pgx.Batch{}
		queueRewards(b, r, []string{id})
		return tx.SendBatch(ctx, b).Close()
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	return applied && err == nil, classify(err)
}

// List implements store.Store: newest first, by keyset on (received_at, request_id), in either
// direction from a cursor.
func (s *Store) List(ctx context.Context, f store.Filter) (store.Page, error) {
	pos, err := f.Position()
	if err != nil {
		return store.Page{}, err
	}
	n := f.PageSize()
	q, args := listQuery(f, pos, n+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return store.Page{}, classify(err)
	}
	sums, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Summary, error) {
		var m store.Summary
		var status int32
		var task string
		err := row.Scan(&m.RequestID, &m.ClientRequestID, &m.NodeID, &m.ReceivedAt, &m.Category, &m.Blueprint, &m.Strategy, &m.Outcome,
			&status, &m.ErrorCode, &m.KeyID, &task, &m.TotalMs, &m.InputTokens, &m.OutputTokens, &m.Cost, &m.Feedback, &m.Models)
		m.StatusCode, m.ReceivedAt = int(status), m.ReceivedAt.UTC()
		m.Task, m.TaskClipped = store.ClipTask(task)
		return m, err
	})
	if err != nil {
		return store.Page{}, classify(err)
	}
	return store.PageOf(sums, n, pos), nil
}

// listQuery is the query of a listing's page of at most limit summaries, and its arguments.
func listQuery(f store.Filter, pos store.Position, limit int) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Category != "" {
		where = append(where, "e.category = "+arg(f.Category))
	}
	if f.Outcome != "" {
		where = append(where, "e.outcome = "+arg(f.Outcome))
	}
	if f.KeyID != "" {
		// executions_key holds keyed records only: the planner takes a partial index only when the
		// query's conditions imply its predicate, and key_id = $n does not in a generic plan.
		where = append(where, "e.key_id = "+arg(f.KeyID), "e.key_id <> ''")
	}
	if !f.Since.IsZero() {
		where = append(where, "e.received_at >= "+arg(f.Since))
	}
	if !f.Until.IsZero() {
		where = append(where, "e.received_at < "+arg(f.Until))
	}
	if f.Model != "" {
		where = append(where, "EXISTS (SELECT 1 FROM workflow.worker_results r WHERE r.request_id = e.request_id AND r.received_at = e.received_at AND r.model = "+arg(f.Model)+")")
	}
	order := "DESC"
	if pos.Set {
		cmp := "<"
		if pos.Newer {
			cmp, order = ">", "ASC" // the nearest newer records first; PageOf lists them newest first
		}
		where = append(where, fmt.Sprintf("(e.received_at, e.request_id) %s (%s, %s)", cmp, arg(pos.Cursor.ReceivedAt), arg(pos.Cursor.RequestID)))
	}
	// The task is read one character beyond what a summary shows, so that ClipTask can say it had more.
	q := `SELECT e.request_id, e.client_request_id, e.node_id, e.received_at, e.category, e.blueprint, e.strategy, e.outcome, e.status_code,
    e.error_code, e.key_id, left(e.task, ` + fmt.Sprint(store.TaskRunes+1) + `), e.total_ms, e.input_tokens, e.output_tokens, e.cost_nanos,
    e.feedback IS NOT NULL,
    coalesce((SELECT array_agg(r.model ORDER BY r.position) FROM workflow.worker_results r
        WHERE r.request_id = e.request_id AND r.received_at = e.received_at), '{}')
FROM workflow.executions e`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY e.received_at %s, e.request_id %s LIMIT %s", order, order, arg(limit))
	return q, args
}
