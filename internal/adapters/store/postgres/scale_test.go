package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// BenchmarkRecordsAtScale fills a database with CONCLAVE_BENCH_RECORDS records (`make bench-records`
// asks for 10,000,000) over 35 days, with their calls, verdicts, phases, journal and rollups as the
// store writes them, and measures what the store promises at that size. The database is kept within
// CONCLAVE_BENCH_MAX_GB (30 when unset): the current week gets the density of the size asked, so the
// partitions being written are as large as at that size, and earlier weeks fewer records when the
// budget would not hold them all. It measures:
//
//   - the p95 of a key's spend over 30 days, by model and by day (GET /admin/keys/:id/spend);
//   - the cost of recording: batches of 128 records written as the recorder does (the calls' intents,
//     then their settlements with the records), wall time and the server backend's CPU (from /proc)
//     and WAL per record, against the same on an empty database;
//   - bytes per record: the tables' partitions, indexes and TOAST over the records.
//
// It is skipped without CONCLAVE_BENCH_RECORDS: at 10 million records it takes tens of minutes and
// the whole budget of disk. The databases are dropped at the end.
func BenchmarkRecordsAtScale(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("CONCLAVE_BENCH_RECORDS"))
	if n <= 0 {
		b.Skip("set CONCLAVE_BENCH_RECORDS to the number of records (make bench-records)")
	}
	maxBytes := int64(30e9)
	if gb, err := strconv.ParseFloat(os.Getenv("CONCLAVE_BENCH_MAX_GB"), 64); err == nil && gb > 0 {
		maxBytes = int64(gb * 1e9)
	}
	const days, batches, rounds = 35, 40, 5
	ctx := context.Background()

	emptyURL := pgtest.New(b, true)
	if raw, err := scaleRecord(uuid.NewString(), "key_0", time.Now()).MarshalVT(); err == nil {
		b.Logf("a record is %d bytes of protobuf", len(raw))
	}
	warm := recording(b, emptyURL, batches)
	b.Logf("recording into an empty database, to warm up: %s", warm)

	url := pgtest.New(b, true)
	start := time.Now()
	filled := fillRecords(b, url, n, days, maxBytes)
	b.Logf("filled %d records over %d days in %s", filled, days, time.Since(start).Round(time.Second))

	s, err := Open(ctx, url, Options{MaxConns: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	// (c) Bytes per record, by table.
	var total int64
	var sizes []string
	for _, table := range []string{"workflow.executions", "workflow.worker_results", "workflow.arbiter_decisions", "workflow.phases", "books.journal"} {
		var size int64
		if err := s.pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(relid))::bigint FROM pg_partition_tree($1)`, table).Scan(&size); err != nil {
			b.Fatal(err)
		}
		total += size
		sizes = append(sizes, fmt.Sprintf("%s %d B", table, size/filled))
	}
	var rollups int64
	if err := s.pool.QueryRow(ctx, `SELECT pg_total_relation_size('books.spend_daily') + pg_total_relation_size('books.requests_daily') +
    pg_total_relation_size('books.key_periods')`).Scan(&rollups); err != nil {
		b.Fatal(err)
	}
	b.Logf("bytes per record: %d (%s); the rollups: %d bytes in all", total/filled, strings.Join(sizes, ", "), rollups)

	// (a) A key's spend over 30 days, by model and by day.
	now := time.Now()
	q := store.SpendQuery{KeyID: "key_1", Since: now.Add(-30 * 24 * time.Hour), Until: now}
	var p95s [2]time.Duration
	for i, byDay := range []bool{false, true} {
		q.ByDay = byDay
		var took []time.Duration
		var groups []store.SpendGroup
		for range 210 {
			t0 := time.Now()
			if groups, err = s.Spend(ctx, q); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(t0))
		}
		took = took[10:] // warmed up
		slices.Sort(took)
		p95s[i] = took[len(took)*95/100]
		b.Logf("spend by %s over 30 days (%d groups): p50 %s, p95 %s, max %s", map[bool]string{false: "model", true: "day"}[byDay], len(groups),
			took[len(took)/2], p95s[i], took[len(took)-1])
	}
	explainInsert(b, s)

	// (b) Recording at this size, against an empty database: in turns, so that both see the same
	// checkpoints and neighbours, after a turn that brings the current week's pages back to the cache
	// (the fill went through older weeks since).
	b.Logf("recording into %d records, to warm up: %s", filled, recording(b, url, batches))
	var empties, fulls []cost
	for range rounds {
		empties = append(empties, recording(b, emptyURL, batches))
		fulls = append(fulls, recording(b, url, batches))
		b.Logf("recording: into an empty database %s; into %d records %s", empties[len(empties)-1], filled, fulls[len(fulls)-1])
	}
	// The query the rollups replaced, which read the records, once, for comparison (last: it fills the
	// cache with what recording does not touch).
	t0 := time.Now()
	var calls int64
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM workflow.worker_results w JOIN workflow.executions e USING (request_id, received_at)
WHERE e.key_id = $1 AND e.received_at >= $2 AND e.received_at < $3`, q.KeyID, q.Since, q.Until).Scan(&calls)
	b.Logf("the same spend read from the records (%d calls): %s, %v", calls, time.Since(t0).Round(time.Millisecond), err)

	empty, full := typical(empties), typical(fulls)
	b.Logf("recording cost at %d records over an empty database (the median of %d turns of %d records each): wall %+.1f%%, "+
		"server CPU %+.1f%%, WAL %+.1f%%", filled, rounds, batches*128, 100*(float64(full.wall)/float64(empty.wall)-1), 100*(full.cpu/empty.cpu-1),
		100*(full.wal/empty.wal-1))
	b.ReportMetric(float64(p95s[0].Microseconds())/1000, "spend-by-model-p95-ms")
	b.ReportMetric(float64(p95s[1].Microseconds())/1000, "spend-by-day-p95-ms")
	b.ReportMetric(float64(total)/float64(filled), "bytes/record")
	b.ReportMetric(float64(full.wall.Microseconds())/float64(empty.wall.Microseconds()), "record-wall-ratio")
	b.ReportMetric(full.cpu/empty.cpu, "record-cpu-ratio")
}

// cost is what recording cost per record.
type cost struct {
	wall time.Duration // the median batch's, per record
	p95  time.Duration // the p95 batch's, per record
	cpu  float64       // the server backend's CPU, µs per record
	wal  float64       // WAL bytes per record
}

func (c cost) String() string {
	return fmt.Sprintf("%.0f µs per record (median batch; p95 batch %.0f µs), server CPU %.0f µs, WAL %.0f B",
		float64(c.wall.Nanoseconds())/1000, float64(c.p95.Nanoseconds())/1000, c.cpu, c.wal)
}

// typical is the median of each measure of costs.
func typical(costs []cost) cost {
	median := func(f func(cost) float64) float64 {
		v := make([]float64, len(costs))
		for i, c := range costs {
			v[i] = f(c)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return cost{wall: time.Duration(median(func(c cost) float64 { return float64(c.wall) })),
		p95: time.Duration(median(func(c cost) float64 { return float64(c.p95) })),
		cpu: median(func(c cost) float64 { return c.cpu }), wal: median(func(c cost) float64 { return c.wal })}
}

// recording writes batches of 128 new records as the recorder does, through one connection, after a
// few to warm up, and returns their cost per record.
func recording(b *testing.B, url secret.String, batches int) cost {
	ctx := context.Background()
	s, err := Open(ctx, url, Options{MaxConns: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var pid int
	if err := s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	template := scaleRecord("template", "key_0", time.Now())
	const size, warm = 128, 10
	var took []time.Duration
	var cpu0, wal0 int64
	for i := range warm + batches {
		if i == warm {
			cpu0, wal0 = backendCPU(b, pid), walLSN(b, s)
		}
		var records []*messages.Execution
		var intents, settled []*messages.Call
		for j := range size {
			r := scaleRecord(uuid.NewString(), fmt.Sprintf("key_%d", j%3), time.Now())
			r.Results, r.Decision, r.Phases, r.Selection = template.Results, template.Decision, template.Phases, template.Selection
			records = append(records, r)
			for _, c := range settledCalls(r) {
				o := proto.Clone(c).(*messages.Call)
				o.State, o.SettledAt, o.CostNanos, o.Usage = store.CallOpen, nil, 0, nil
				intents, settled = append(intents, o), append(settled, c)
			}
		}
		t0 := time.Now()
		if err := s.Write(ctx, store.Batch{Calls: intents}); err != nil {
			b.Fatal(err)
		}
		if err := s.Write(ctx, store.Batch{Calls: settled, Records: records}); err != nil {
			b.Fatal(err)
		}
		if i >= warm {
			took = append(took, time.Since(t0))
		}
	}
	cpu, wal := backendCPU(b, pid)-cpu0, walLSN(b, s)-wal0
	slices.Sort(took)
	records := float64(batches * size)
	return cost{wall: took[len(took)/2] / size, p95: took[len(took)*95/100] / size,
		cpu: float64(cpu) * 1e6 / 100 / records, wal: float64(wal) / records}
}

// backendCPU is a server process's user and system CPU, in clock ticks (100 a second).
func backendCPU(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("the server's CPU is read from /proc: %v", err)
	}
	// The command name, in parentheses, may hold spaces: the fields are counted after it.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

func walLSN(b *testing.B, s *Store) int64 {
	var lsn int64
	if err := s.pool.QueryRow(context.Background(), `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// explainInsert shows how the database inserts a batch of records and settles their calls, with the
// pages each touched: index probes in the current week's partitions, no scan.
func explainInsert(b *testing.B, s *Store) {
	ctx := context.Background()
	var c columns
	var calls []*messages.Call
	for j := range 128 {
		r := scaleRecord(uuid.NewString(), fmt.Sprintf("key_%d", j%3), time.Now())
		if err := c.add(r, time.Now()); err != nil {
			b.Fatal(err)
		}
		calls = append(calls, settledCalls(r)...)
	}
	j := journalColumns(calls)
	for _, step := range []struct {
		what, sql string
		args      []any
	}{{"the executions", insertExecutionsSQL, c.exec.args()}, {"the calls' settlements", settleSQL, j.args()}} {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+step.sql, step.args...)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			b.Logf("inserting %s of 128 records:\n%s", step.what, plan)
			if strings.Contains(plan, "Seq Scan") {
				b.Errorf("inserting %s scans a table", step.what)
			}
			return errRollback
		})
		if err != nil && err != errRollback {
			b.Fatal(err)
		}
	}
}

var errRollback = fmt.Errorf("rolled back")

// scaleRecord is a record as the benchmark writes it: four answers of about 140 characters, a task of
// about 200, a selection of four picks and twelve skipped models, and the verdict, phases and rewards
// that go with them (about 2 KB of protobuf).
func scaleRecord(id, key string, at time.Time) *messages.Execution {
	answer := strings.Repeat("The answer is (B): nitrogen makes up about 78% of dry air, oxygen 21%. ", 2)
	r := &messages.Execution{RequestId: id, KeyId: key, NodeId: "node-1", ReceivedAt: timestamppb.New(at),
		CompletedAt:    timestamppb.New(at.Add(2100 * time.Millisecond)),
		Task:           strings.Repeat("Which gas makes up most of the air we breathe? A) oxygen B) nitrogen C) argon D) carbon dioxide. ", 4),
		Classification: &messages.Classification{Category: "science", Confidence: 0.8},
		Blueprint:      &messages.Blueprint{Name: "science", Workers: 4, TimeoutSeconds: 30, Strategy: "weighted", MinResponses: 2},
		Selection:      &messages.Selection{Policy: "thompson", Eligible: 16},
		Decision: &messages.ArbiterDecision{Strategy: "weighted", Arbiter: "local", ChosenModel: "model-0", Scores: []float64{0.6, 0.2, 0.1, 0.1},
			Agreement: []string{"B"}},
		Answer: answer, StatusCode: 200,
		Phases: &messages.Phases{ClassifyMs: 0.2, BlueprintMs: 0.05, SelectMs: 0.1, AssignMs: 0.05, DispatchMs: 1, CollectMs: 2000, ConsensusMs: 2,
			FeedbackMs: 0.3, TotalMs: 2100},
		Usage: &messages.Usage{InputTokens: 1280, OutputTokens: 320}}
	for p := range 4 {
		model := fmt.Sprintf("model-%d", p)
		r.Selection.Picks = append(r.Selection.Picks, &messages.Pick{Model: model, Provider: "groq", Sampled: 0.5, Score: 0.5, Alpha: 40, Beta: 10})
		r.Results = append(r.Results, &messages.WorkerResult{JobId: fmt.Sprintf("%s/%d", id, p), Model: model, Provider: "groq", Worker: fmt.Sprint("worker-", p),
			Status: "ok", Text: answer, LatencyMs: 1900, ProviderLatencyMs: 1850, BudgetMs: 30000, WeightedScore: 0.6, Contributed: true,
			Usage: &messages.Usage{InputTokens: 320, OutputTokens: 80}, CostNanos: int64(1_000_000 + p*100_000), FinishReason: "stop", ServedModel: model})
		r.BanditUpdates = append(r.BanditUpdates, &messages.BanditUpdate{Model: model, Category: "science", Reward: 1, Reason: "contributed"})
		r.CostNanos += int64(1_000_000 + p*100_000)
	}
	for k := range 12 {
		r.Selection.Skipped = append(r.Selection.Skipped, &messages.Skip{Model: fmt.Sprintf("model-%d", 4+k), Provider: "gemini", Reason: "rate_limited"})
	}
	return r
}

// fillRecords writes records received over the days before now, with their rows in every table and
// the rollups of the books, newest week first: the current week at n records over days (the density
// of the size asked, so that the partitions being written are as large as at that size), the earlier
// weeks as densely too where the database stays within maxBytes, more thinly where it would not. Each
// week's partitions are filled apart, without indexes, then attached (which builds their indexes), as
// a bulk load is done. It returns how many records it wrote.
func fillRecords(b *testing.B, url secret.String, n, days int, maxBytes int64) int64 {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url.Reveal())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, set := range []string{"SET synchronous_commit = off", "SET maintenance_work_mem = '512MB'", "SET work_mem = '64MB'"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			b.Fatal(err)
		}
	}
	template := scaleRecord("template", "key_0", time.Now())
	raw, err := template.MarshalVT()
	if err != nil {
		b.Fatal(err)
	}
	size := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	empty := size()
	end := time.Now().Add(-time.Hour).Truncate(time.Second)
	start := end.Add(-time.Duration(days) * 24 * time.Hour)
	perDay := float64(n) / float64(days)
	var filled int64
	for week := WeekOf(end); week.Add(Week).After(start); week = week.Add(-Week) {
		from, until := week, week.Add(Week)
		if from.Before(start) {
			from = start
		}
		if until.After(end) {
			until = end
		}
		span := until.Sub(from).Hours() / 24
		count := int64(perDay * span)
		if filled > 0 {
			// What is left of the budget, shared among the days left.
			perRecord := float64(size()-empty) / float64(filled)
			left := until.Sub(start).Hours() / 24
			count = min(count, int64(float64(maxBytes-size())/perRecord*span/left))
		}
		if count <= 0 {
			b.Logf("the week of %s: no records (the budget of %d bytes is spent)", week.Format(time.DateOnly), maxBytes)
			continue
		}
		step := until.Sub(from).Microseconds() / count
		base := from.Add(-time.Duration(filled*step) * time.Microsecond) // record i is received at base + i * step µs
		t0 := time.Now()
		if err := fillWeek(ctx, conn, week, base, step, filled, filled+count, raw, template); err != nil {
			b.Fatalf("fill the week of %s: %v", week.Format(time.DateOnly), err)
		}
		filled += count
		b.Logf("the week of %s: %d records (%.0f a day) in %s; the database %.1f GB", week.Format(time.DateOnly), count, float64(count)/span,
			time.Since(t0).Round(time.Second), float64(size())/1e9)
	}
	for _, table := range allPartitioned {
		if _, err := conn.Exec(ctx, "ANALYZE "+table.table); err != nil {
			b.Fatal(err)
		}
	}
	return filled
}

// fillRows are the records numbered $3 to $4 - 1, record i received at $1 + i * $2 µs, with the
// record's bytes, task and answer ($5, $6, $7).
const fillRows = `SELECT i, md5('r' || i)::uuid::text AS id, $1::timestamptz + i * $2::bigint * interval '1 microsecond' AS at,
    $5::bytea AS record, $6::text AS task, $7::text AS answer FROM generate_series($3::bigint, $4::bigint - 1) i`

// fillSQL makes a week's rows of each table from fillRows: four calls each (one timed out in 25), the arbiter's fifth in ten requests, three
// keys, eight models.
var fillSQL = map[string]string{
	"workflow.executions": `
INSERT INTO {partition} (request_id, client_request_id, node_id, received_at, completed_at, task, category, confidence, blueprint, workers,
    min_responses, timeout_seconds, overrides, strategy, outcome, status_code, error_code, degraded, answer, total_ms, input_tokens,
    output_tokens, cost_nanos, record, key_id, trace_id)
SELECT id, '', 'node-' || i % 3, at, at + interval '2.1 seconds', 'Question ' || i || '. ' || task, 'science', 0.8, 'science', 4, 2, 30, '{}',
    'weighted', CASE WHEN i % 50 = 0 THEN 'degraded' ELSE 'ok' END, 200, '', i % 50 = 0, answer, 2100, 1280, 320,
    4600000 + CASE WHEN i % 10 = 0 THEN 600000 ELSE 0 END, record, 'key_' || i % 3, md5('t' || i)
FROM (` + fillRows + `) g`,
	"workflow.worker_results": `
INSERT INTO {partition} (request_id, received_at, position, job_id, model, provider, worker, attempt, status, latency_ms, provider_latency_ms,
    budget_ms, raw_response, weighted_score, contributed, input_tokens, output_tokens, cost_nanos, error_kind, error_scope, error_message,
    http_status, finish_reason, served_model, upstream_request_id, decider)
SELECT id, at, p, id || '/' || p, 'model-' || (i + p) % 8, (ARRAY['groq', 'gemini', 'openrouter', 'anthropic'])[1 + (i + p) % 4],
    'worker-' || p, 0, CASE WHEN (i + p) % 25 = 0 THEN 'timeout' ELSE 'ok' END, 400 + (i * 7 + p * 13) % 1600, 380 + (i * 7 + p * 13) % 1600,
    30000, CASE WHEN (i + p) % 25 = 0 THEN '' ELSE answer END, 0.5 + ((i + p) % 5) / 10.0, (i + p) % 3 <> 0, 320, 80, 1000000 + p * 100000,
    CASE WHEN (i + p) % 25 = 0 THEN 'upstream_timeout' ELSE '' END, '', '', CASE WHEN (i + p) % 25 = 0 THEN 0 ELSE 200 END, 'stop',
    'model-' || (i + p) % 8, md5('u' || i || '/' || p), p < 2
FROM (` + fillRows + `) g, generate_series(0, 3) p`,
	"workflow.arbiter_decisions": `
INSERT INTO {partition} (request_id, received_at, strategy, arbiter, fallback, arbiter_error, chosen_model, chosen, synthesis, scores, agreement,
    disagreement, arbiter_latency_ms, arbiter_input_tokens, arbiter_output_tokens, arbiter_cost_nanos)
SELECT id, at, 'weighted', CASE WHEN i % 10 = 0 THEN 'judge-model' ELSE 'local' END, false, '', 'model-' || i % 8, 0, false,
    '{0.6,0.2,0.1,0.1}', '{B}', '{}', CASE WHEN i % 10 = 0 THEN 900 ELSE 0.1 END, CASE WHEN i % 10 = 0 THEN 1500 ELSE 0 END,
    CASE WHEN i % 10 = 0 THEN 40 ELSE 0 END, CASE WHEN i % 10 = 0 THEN 600000 ELSE 0 END
FROM (` + fillRows + `) g`,
	"workflow.phases": `
INSERT INTO {partition} (request_id, received_at, phase, duration_ms)
SELECT id, at, ph, 0.05 + i % 100
FROM (` + fillRows + `) g,
    unnest(ARRAY['classify', 'blueprint', 'select', 'assign', 'dispatch', 'collect', 'consensus', 'feedback', 'total']) ph`,
	"books.journal": `
INSERT INTO {partition} (call_id, request_id, key_id, period_start, model, provider, node_id, run_id, opened_at, deadline, reserved_nanos,
    reserved_tokens, state, settled_at, input_tokens, output_tokens, estimated, cost_nanos)
SELECT id || '/' || p, id, 'key_' || i % 3, NULL::timestamptz, 'model-' || (i + p) % 8, (ARRAY['groq', 'gemini', 'openrouter', 'anthropic'])[1 + (i + p) % 4],
    'node-' || i % 3, 'run-1', at, at + interval '35 seconds', 2000000, 4096, 'settled', at + interval '2 seconds', 320, 80, false,
    1000000 + p * 100000
FROM (` + fillRows + `) g, generate_series(0, 3) p
UNION ALL
SELECT id || '/arbiter', id, 'key_' || i % 3, NULL, 'judge-model', 'anthropic', 'node-' || i % 3, 'run-1', at,
    at + interval '12 seconds', 1000000, 2048, 'settled', at + interval '3 seconds', 1500, 40, false, 600000
FROM (` + fillRows + `) g
WHERE i % 10 = 0`,
}

// fillWeek fills one week's partitions: made apart (replacing the empty ones the store made ahead),
// filled, added to the rollups, vacuumed and analysed, and attached, which builds their indexes.
func fillWeek(ctx context.Context, conn *pgx.Conn, week, base time.Time, step, i0, i1 int64, record []byte, template *messages.Execution) error {
	var stmts []string
	for _, p := range allPartitioned {
		stmts = append(stmts, "DROP TABLE IF EXISTS "+p.of(week),
			fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)", p.of(week), p.table),
			strings.ReplaceAll(fillSQL[p.table], "{partition}", p.of(week)))
	}
	stmts = append(stmts, `
INSERT INTO books.spend_daily AS d (key_id, day, model, calls, input_tokens, output_tokens, cost_nanos)
SELECT key_id, (opened_at AT TIME ZONE 'UTC')::date, model, count(*), sum(input_tokens), sum(output_tokens), sum(cost_nanos)
FROM `+journalTable.of(week)+` GROUP BY 1, 2, 3
ON CONFLICT (key_id, day, model) DO UPDATE SET calls = d.calls + excluded.calls, input_tokens = d.input_tokens + excluded.input_tokens,
    output_tokens = d.output_tokens + excluded.output_tokens, cost_nanos = d.cost_nanos + excluded.cost_nanos`, `
INSERT INTO books.key_periods AS k (key_id, period_start, spent_nanos, calls, last_at)
SELECT key_id, '-infinity', sum(cost_nanos), count(*), max(settled_at) FROM `+journalTable.of(week)+` GROUP BY 1
ON CONFLICT (key_id, period_start) DO UPDATE SET spent_nanos = k.spent_nanos + excluded.spent_nanos, calls = k.calls + excluded.calls,
    last_at = greatest(k.last_at, excluded.last_at)`, `
INSERT INTO books.requests_daily AS d (key_id, day, requests)
SELECT key_id, (received_at AT TIME ZONE 'UTC')::date, count(*) FROM `+recordTables[0].of(week)+` GROUP BY 1, 2
ON CONFLICT (key_id, day) DO UPDATE SET requests = d.requests + excluded.requests`)
	lo, hi := sqlTime(week), sqlTime(week.Add(Week))
	for _, p := range allPartitioned {
		stmts = append(stmts, "VACUUM (ANALYZE) "+p.of(week),
			fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)", p.table, p.of(week), lo, hi))
	}
	for _, stmt := range stmts {
		var err error
		if strings.Contains(stmt, "generate_series") {
			_, err = conn.Exec(ctx, stmt, base, step, i0, i1, record, template.Task, template.Answer)
		} else {
			_, err = conn.Exec(ctx, stmt)
		}
		if err != nil {
			return fmt.Errorf("%.60s...: %w", strings.TrimSpace(stmt), err)
		}
	}
	return nil
}
