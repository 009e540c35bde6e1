package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/migrations"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// record is an execution of three calls (two answers, a timeout) on the weighted strategy.
func record(id, category string, at time.Time) *messages.Execution {
	return &messages.Execution{
		RequestId: id, ReceivedAt: timestamppb.New(at), CompletedAt: timestamppb.New(at.Add(800 * time.Millisecond)),
		Task: "Which gas? A) O2 B) N2", NodeId: "node-a",
		Classification: &messages.Classification{Category: category, Confidence: 0.9},
		Blueprint:      &messages.Blueprint{Name: category, Workers: 3, TimeoutSeconds: 30, Strategy: "weighted", MinResponses: 2},
		Overrides:      []string{"workers"},
		Results: []*messages.WorkerResult{
			{Model: "m-a", Provider: "groq", Worker: "w1", Status: "ok", Text: "B", LatencyMs: 120, Contributed: true, WeightedScore: 0.8,
				Usage: &messages.Usage{InputTokens: 10, OutputTokens: 2}, CostNanos: int64(money.Dollar / 1000)},
			{Model: "m-b", Provider: "gemini", Worker: "w2", Status: "ok", Text: "B\x00 with a NUL", LatencyMs: 300, Contributed: true, WeightedScore: 0.7,
				Usage: &messages.Usage{InputTokens: 10, OutputTokens: 3}, CostNanos: int64(2 * money.Dollar / 1000)},
			{Model: "m-c", Provider: "groq", Worker: "w3", Status: "timeout", ErrorKind: "upstream_timeout", LatencyMs: 30000},
		},
		Decision: &messages.ArbiterDecision{Strategy: "weighted", Arbiter: "local", ArbiterError: "late", ChosenModel: "m-a",
			Scores: []float64{0.6, 0.4}, Agreement: []string{"B"}, Disagreement: []string{}},
		Answer: "B", StatusCode: 200,
		Phases: &messages.Phases{ClassifyMs: 0.1, SelectMs: 0.05, CollectMs: 700, ConsensusMs: 1, TotalMs: 800},
		BanditUpdates: []*messages.BanditUpdate{
			{Model: "m-a", Category: category, Reward: 1, Reason: "contributed"},
			{Model: "m-b", Category: category, Reward: 1, Reason: "contributed"},
			{Model: "m-c", Category: category, Reward: 0, Reason: "timeout"},
		},
		Usage: &messages.Usage{InputTokens: 20, OutputTokens: 5}, CostNanos: int64(3 * money.Dollar / 1000),
	}
}

func open(t *testing.T, url secret.String) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func count(t *testing.T, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrationsGoUpDownAndUp(t *testing.T) {
	url := pgtest.New(t, false)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := Open(ctx, url, Options{}); !errors.Is(err, migrations.ErrBehind) || !strings.Contains(err.Error(), "conclave migrate up") {
		t.Fatalf("a store on an empty database: %v", err)
	}
	for _, step := range []func() error{
		func() error { return migrations.Up(ctx, conn) },
		func() error { return migrations.Down(ctx, conn, 0) },
		func() error { return migrations.Up(ctx, conn) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := migrations.Read(ctx, conn)
	if err != nil || st.Current != st.Latest || st.Latest < 3 {
		t.Fatalf("status %+v, %v", st, err)
	}
	s := open(t, url)
	if err := s.Insert(ctx, []*messages.Execution{record("r1", "general", t0)}); err != nil {
		t.Fatal(err)
	}
	// Going down drops what the migrations made, and only that.
	s.Close()
	if err := migrations.Down(ctx, conn, 0); err != nil {
		t.Fatal(err)
	}
	var schemas int
	conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname IN ('workflow', 'learning')`).Scan(&schemas)
	if schemas != 0 {
		t.Fatalf("%d schemas left after down", schemas)
	}
}

func TestMigratingTogetherDoesNotRace(t *testing.T) {
	url := pgtest.New(t, false)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, url.Reveal())
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(ctx)
			errs[i] = migrations.Up(ctx, conn)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestARecordLeavesItsRowsOnce(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	rec := record("r1", "code_review", t0)
	rec.Results[1].Decider = true
	for range 2 { // the second write, from a spool say, adds nothing
		if err := s.Insert(ctx, []*messages.Execution{rec}); err != nil {
			t.Fatal(err)
		}
	}
	for table, want := range map[string]int{"workflow.executions": 1, "workflow.worker_results": 3, "workflow.arbiter_decisions": 1,
		"workflow.phases": 9, "learning.strategy_performance_history": 3, "learning.strategy_performance": 6} {
		if got := count(t, s, table); got != want {
			t.Errorf("%s: %d rows, want %d", table, got, want)
		}
	}
	got, err := s.Get(ctx, "r1")
	if err != nil || !proto.Equal(got, rec) {
		t.Fatalf("read back %v, %v", got, err)
	}
	var raw, outcome string
	var fallback bool
	var scores []float64
	s.pool.QueryRow(ctx, `SELECT raw_response FROM workflow.worker_results WHERE request_id = 'r1' AND position = 1`).Scan(&raw)
	s.pool.QueryRow(ctx, `SELECT outcome FROM workflow.executions WHERE request_id = 'r1'`).Scan(&outcome)
	s.pool.QueryRow(ctx, `SELECT fallback, scores FROM workflow.arbiter_decisions WHERE request_id = 'r1'`).Scan(&fallback, &scores)
	if raw != "B with a NUL" || outcome != "ok" || !fallback || len(scores) != 2 {
		t.Fatalf("raw %q, outcome %s, fallback %v, scores %v", raw, outcome, fallback, scores)
	}
	var deciders []bool
	s.pool.QueryRow(ctx, `SELECT array_agg(decider ORDER BY position) FROM workflow.worker_results WHERE request_id = 'r1'`).Scan(&deciders)
	trace, err := s.Trace(ctx, "r1")
	if fmt.Sprint(deciders) != "[false true false]" || err != nil || len(trace) != 3 || trace[0].Decider || !trace[1].Decider {
		t.Fatalf("deciders %v, trace %+v, %v", deciders, trace, err)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown id: %v", err)
	}
}

func TestFeedbackIsGivenOnceAcrossControllers(t *testing.T) {
	url := pgtest.New(t, true)
	a, b := open(t, url), open(t, url)
	ctx := context.Background()
	if err := a.Insert(ctx, []*messages.Execution{record("r1", "general", t0)}); err != nil {
		t.Fatal(err)
	}
	fb := store.Feedback{Updates: []*messages.BanditUpdate{{Model: "m-a", Category: "general", Reward: 0, Reason: "feedback_wrong"}}, At: t0.Add(time.Hour)}
	var wg sync.WaitGroup
	applied := make([]bool, 8)
	for i := range applied {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			ok, err := s.SetFeedback(ctx, "r1", fb)
			if err != nil {
				t.Error(err)
			}
			applied[i] = ok
		})
	}
	wg.Wait()
	n := 0
	for _, ok := range applied {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("feedback applied %d times", n)
	}
	got, _ := b.Get(ctx, "r1")
	if len(got.Feedback) != 1 || got.FeedbackAt.AsTime() != fb.At {
		t.Fatalf("feedback read back %v at %v", got.Feedback, got.FeedbackAt)
	}
	var beta float64
	a.pool.QueryRow(ctx, `SELECT beta FROM learning.strategy_performance WHERE model = 'm-a' AND category = 'general'`).Scan(&beta)
	if beta != 1 { // the consensus's reward 1, then the feedback's 0: one more failure
		t.Fatalf("m-a's beta %g", beta)
	}
	if _, err := a.SetFeedback(ctx, "nope", fb); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("feedback on an unknown id: %v", err)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	var recs []*messages.Execution
	for i := range 25 {
		cat := "general"
		if i%5 == 0 {
			cat = "debugging"
		}
		r := record(fmt.Sprintf("r%02d", i), cat, t0.Add(time.Duration(i)*time.Minute))
		if i == 7 {
			r.StatusCode, r.Error = 503, &messages.Failure{Code: "rate_limited"}
		}
		if i == 8 {
			r.Results[0].Model = "m-special"
		}
		recs = append(recs, r)
	}
	if err := s.Insert(ctx, recs); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc string
		f    store.Filter
		want string // ids, pages split by |
	}{
		{"a category, two pages", store.Filter{Category: "debugging", Limit: 3}, "r20,r15,r10|r05,r00"},
		{"an outcome", store.Filter{Outcome: "failed"}, "r07"},
		{"a model", store.Filter{Model: "m-special"}, "r08"},
		{"a time window", store.Filter{Since: t0.Add(3 * time.Minute), Until: t0.Add(6 * time.Minute)}, "r05,r04,r03"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var pages []string
			f := tt.f
			for {
				p, err := s.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, r := range p.Records {
					ids = append(ids, r.RequestID)
				}
				pages = append(pages, strings.Join(ids, ","))
				if p.Next == "" {
					break
				}
				f.After = p.Next
			}
			if got := strings.Join(pages, "|"); got != tt.want {
				t.Fatalf("pages %s, want %s", got, tt.want)
			}
		})
	}
	// The memory store pages the same records the same way.
	m := store.NewMemory(0, 0)
	m.Insert(ctx, recs)
	for _, tt := range tests {
		p, _ := m.List(ctx, tt.f)
		q, _ := s.List(ctx, tt.f)
		if len(p.Records) != len(q.Records) || (len(p.Records) > 0 && p.Records[0].RequestID != q.Records[0].RequestID) {
			t.Errorf("%s: memory %v, postgres %v", tt.desc, p.Records, q.Records)
		}
	}
}

func TestArmsComeBackAfterARestart(t *testing.T) {
	url := pgtest.New(t, true)
	ctx := context.Background()
	s := open(t, url)
	var want = map[string]bandit.Arm{}
	for i := range 30 {
		rec := record(fmt.Sprintf("r%d", i), "general", t0.Add(time.Duration(i)*time.Second))
		rec.BanditUpdates[0].Reward = float64(i%3) / 2
		if err := s.Insert(ctx, []*messages.Execution{rec}); err != nil {
			t.Fatal(err)
		}
		for _, u := range rec.BanditUpdates {
			for _, c := range []string{u.Category, "*"} {
				k := u.Model + "/" + c
				a, ok := want[k]
				if !ok {
					a = bandit.NewArm(u.Model, c, bandit.DefaultPrior)
				}
				want[k] = a.Update(u.Reward, bandit.UpdateConfig{})
			}
		}
	}
	s.Close()
	learned, err := open(t, url).LoadArms(ctx, store.LoadOptions{Prior: bandit.DefaultPrior})
	if err != nil {
		t.Fatal(err)
	}
	arms := learned.Arms
	if len(arms) != len(want) {
		t.Fatalf("%d arms, want %d", len(arms), len(want))
	}
	for _, a := range arms {
		w := want[a.Model+"/"+a.Category]
		if d := a.Alpha - w.Alpha + a.Beta - w.Beta; d*d > 1e-18 || a.Pulls != w.Pulls || absDiff(a.Recency, w.Recency) > 1e-9 {
			t.Errorf("%s/%s: %+v, want %+v", a.Model, a.Category, a, w)
		}
	}
}

func absDiff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestPruneAndTheViews(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	var recs []*messages.Execution
	for i := range 12 {
		recs = append(recs, record(fmt.Sprintf("r%02d", i), "general", t0.Add(-time.Duration(i)*24*time.Hour)))
	}
	if err := s.Insert(ctx, recs); err != nil {
		t.Fatal(err)
	}
	models, err := s.Models(ctx, "general", 10)
	if err != nil || len(models) != 3 || models[0].AgreementRate == nil || *models[0].AgreementRate != 1 || models[0].Model != "m-a" {
		t.Fatalf("models %+v, %v", models, err)
	}
	providers, requests, err := s.Cost(ctx, t0.Add(-3*24*time.Hour), t0.Add(24*time.Hour))
	if err != nil || len(requests) != 4 || len(providers) != 8 || requests[0].CostPerRequest != 3*money.Dollar/1000 {
		t.Fatalf("cost %+v %+v, %v", providers, requests, err)
	}
	trace, err := s.Trace(ctx, "r00")
	if err != nil || len(trace) != 3 || !trace[0].Chosen || trace[1].Chosen || !trace[1].Contributed {
		t.Fatalf("trace %+v, %v", trace, err)
	}
	phases, timeouts, err := s.Latency(ctx)
	if err != nil || phases[0].Phase != "collect" || timeouts[0].Provider != "groq" || timeouts[0].TimeoutRate != 0.5 {
		t.Fatalf("latency %+v %+v, %v", phases, timeouts, err)
	}
	n, err := s.Prune(ctx, t0.Add(-5*24*time.Hour-time.Minute), 2)
	if err != nil || n != 6 || count(t, s, "workflow.executions") != 6 || count(t, s, "workflow.worker_results") != 18 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if count(t, s, "learning.strategy_performance_history") != 36 {
		t.Fatal("pruning records took what was learned from them")
	}
}

// walk lists a filter's pages from the newest on, by Next, then back from the oldest by Prev: each
// page's ids and its task's clipped length in characters.
func walk(t *testing.T, s store.Store, f store.Filter) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	visit := func(f store.Filter) store.Page {
		p, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		for _, r := range p.Records {
			rows = append(rows, fmt.Sprintf("%s/%s/%d/%v", r.RequestID, r.KeyID, utf8.RuneCountInString(r.Task), r.TaskClipped))
		}
		out = append(out, strings.Join(rows, ","))
		return p
	}
	p := visit(f)
	for p.Next != "" {
		f.After = p.Next
		p = visit(f)
	}
	f.After = ""
	for p.Prev != "" {
		f.Before = p.Prev
		p = visit(f)
	}
	return out
}

// A key's records are listed page by page in both directions, with their tasks clipped by
// characters, as the memory store lists them.
func TestListByKeyAgreesWithTheMemoryStore(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	mem := store.NewMemory(0, 0)
	ctx := context.Background()
	var recs []*messages.Execution
	for i := range 12 {
		r := record(fmt.Sprintf("r%02d", i), "general", t0.Add(time.Duration(i)*time.Minute))
		r.KeyId = []string{"key_a", "key_b", ""}[i%3]
		r.Task = strings.Repeat("ü", 190+i) + "\x00" // multi-byte, clipped from r10 on; the NUL is not kept
		recs = append(recs, r)
	}
	for _, st := range []store.Store{s, mem} {
		if err := st.Insert(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []store.Filter{{KeyID: "key_a", Limit: 3}, {KeyID: "key_b", Limit: 2, Since: t0.Add(2 * time.Minute)}, {Limit: 5}, {KeyID: "key_c"}} {
		fromPG, fromMemory := walk(t, s, f), walk(t, mem, f)
		if strings.Join(fromPG, "|") != strings.Join(fromMemory, "|") {
			t.Errorf("%+v: PostgreSQL pages %v, the memory store's %v", f, fromPG, fromMemory)
		}
	}
	got := walk(t, s, store.Filter{KeyID: "key_a", Limit: 3})
	want := []string{"r09/key_a/199/false,r06/key_a/196/false,r03/key_a/193/false", "r00/key_a/190/false",
		"r09/key_a/199/false,r06/key_a/196/false,r03/key_a/193/false"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("key_a's pages %v, want %v", got, want)
	}
	p, err := s.List(ctx, store.Filter{Limit: 1})
	if err != nil || len(p.Records) != 1 || p.Records[0].RequestID != "r11" || utf8.RuneCountInString(p.Records[0].Task) != store.TaskRunes ||
		!p.Records[0].TaskClipped || p.Records[0].Task != strings.Repeat("ü", store.TaskRunes) {
		t.Fatalf("the newest summary: %+v (%v)", p, err)
	}
}

// Listing by key can use executions_key, the partial index of keyed records (each partition's part of
// it), in a generic plan too (the plan a prepared statement settles on, which knows no key): the
// query asks for a key_id that is not empty, as the index's predicate does.
func TestListByKeyCanUseItsIndex(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	var recs []*messages.Execution
	for i := range 40 {
		r := record(fmt.Sprintf("r%02d", i), "general", t0.Add(time.Duration(i)*time.Second))
		if i%4 == 0 {
			r.KeyId = "key_a"
		}
		recs = append(recs, r)
	}
	if err := s.Insert(ctx, recs); err != nil {
		t.Fatal(err)
	}
	var parts []string
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'workflow.executions_key'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	if parts, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(parts) < 2 {
		t.Fatalf("the partitions of executions_key: %v, %v", parts, err)
	}
	after := store.Position{Set: true, Cursor: store.Cursor{ReceivedAt: t0.Add(30 * time.Second), RequestID: "r30"}}
	for i, pos := range []store.Position{{}, after} {
		q, args := listQuery(store.Filter{KeyID: "key_a"}, pos, 51)
		values := make([]string, len(args))
		for j, a := range args {
			values[j] = literal(a)
		}
		var plan string
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// A table this small is read whole by choice: what is asked is whether the index can serve.
			for _, stmt := range []string{"ANALYZE workflow.executions", "SET LOCAL plan_cache_mode = force_generic_plan",
				"SET LOCAL enable_seqscan = off", fmt.Sprintf("PREPARE list%d AS %s", i, q)} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			return tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE list%d(%s)", i, strings.Join(values, ", "))).Scan(&plan)
		})
		if err != nil {
			t.Fatal(err)
		}
		// The records are in one week's partition: its part of executions_key serves.
		week := "executions_p" + WeekOf(t0).Format("20060102")
		used := false
		for _, p := range parts {
			used = used || (strings.HasPrefix(p, week) && strings.Contains(plan, `"Index Name": "`+p+`"`))
		}
		if !used {
			t.Errorf("listing by key (%+v) does not use executions_key: %s", pos, plan)
		}
	}
}

// literal writes a query's argument as SQL, for EXECUTE.
func literal(v any) string {
	switch v := v.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'"
	}
	return fmt.Sprint(v)
}
