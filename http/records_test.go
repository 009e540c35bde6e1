package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// database is a test's own PostgreSQL database and a connection for looking into it.
type database struct {
	url  secret.String
	conn *pgx.Conn
}

func newDatabase(t *testing.T) *database {
	t.Helper()
	url := pgtest.New(t, true)
	conn, err := pgx.Connect(context.Background(), url.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &database{url: url, conn: conn}
}

func (d *database) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// withDatabase points a testbed at a database, with a spool of the test's own.
func withDatabase(url secret.String, spool string) func(*config.Config) {
	return func(c *config.Config) {
		c.DatabaseURL, c.SpoolPath = url, spool
	}
}

func TestARequestLeavesItsRowsInEveryTable(t *testing.T) {
	db := newDatabase(t)
	tb := newTestbed(t, withDatabase(db.url, filepath.Join(t.TempDir(), "spool")))
	status, ok, e := tb.route(map[string]any{"task": mcq, "category": "general", "workers": 3, "min_responses": 2})
	if status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, e)
	}
	waitFor(t, func() bool { return db.count(t, `SELECT count(*) FROM workflow.executions`) == 1 })
	id := ok.RequestID
	for table, want := range map[string]int{"workflow.worker_results": len(ok.Responses), "workflow.arbiter_decisions": 1, "workflow.phases": 9} {
		if got := db.count(t, "SELECT count(*) FROM "+table+" WHERE request_id = $1", id); got != want {
			t.Errorf("%s: %d rows, want %d", table, got, want)
		}
	}
	if got := db.count(t, `SELECT count(*) FROM learning.strategy_performance_history WHERE request_id = $1`, id); got != len(ok.Responses) {
		t.Errorf("%d rewards recorded, want %d", got, len(ok.Responses))
	}
	if db.count(t, `SELECT count(*) FROM workflow.executions WHERE request_id = $1 AND category = 'general' AND outcome = 'ok' AND answer = $2 AND cost_nanos = $3`,
		id, ok.Answer, ok.Cost) != 1 {
		t.Error("the execution's columns do not say what the answer said")
	}
	// Read back from the database, listed, traced and analysed.
	if rec := tb.record(id); rec["request_id"] != id || rec["answer"] != ok.Answer {
		t.Fatalf("record %v", rec)
	}
	var page struct {
		Records []struct {
			RequestID string   `json:"request_id"`
			Models    []string `json:"models"`
		} `json:"records"`
	}
	resp, raw := tb.do(http.MethodGet, "/executions?category=general&model="+ok.Responses[0].Model+"&outcome=ok", nil, &page)
	if resp.StatusCode != http.StatusOK || len(page.Records) != 1 || page.Records[0].RequestID != id || len(page.Records[0].Models) != len(ok.Responses) {
		t.Fatalf("list %d: %s", resp.StatusCode, raw)
	}
	var trace struct {
		Responses []struct {
			Model  string `json:"model"`
			Chosen bool   `json:"chosen"`
		} `json:"responses"`
	}
	tb.do(http.MethodGet, "/executions/"+id+"/trace", nil, &trace)
	chosen := 0
	for _, r := range trace.Responses {
		if r.Chosen {
			chosen++
		}
	}
	if len(trace.Responses) != len(ok.Responses) || chosen == 0 {
		t.Fatalf("trace %+v", trace)
	}
	for _, path := range []string{"/analysis/models?category=general", "/analysis/cost", "/analysis/latency"} {
		resp, raw := tb.do(http.MethodGet, path, nil, nil)
		if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), "null]") || len(raw) < 50 {
			t.Errorf("%s: %d %s", path, resp.StatusCode, raw)
		}
	}
	if resp, _ := tb.do(http.MethodGet, "/executions/"+strings.Repeat("0", 36)+"/trace", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the trace of no request: %d", resp.StatusCode)
	}
}

func TestTheDatabaseGoingAwayLosesNoRecord(t *testing.T) {
	db := newDatabase(t)
	proxy, through := pgtest.NewProxy(t, db.url)
	spool := filepath.Join(t.TempDir(), "spool")
	tb := newTestbed(t, withDatabase(through, spool))
	var mu sync.Mutex
	var ids []string
	send := func(n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				status, ok, e := tb.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": "general"})
				if status != http.StatusOK {
					t.Errorf("status %d while the database is away: %+v", status, e)
					return
				}
				mu.Lock()
				ids = append(ids, ok.RequestID)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	send(10)
	waitFor(t, func() bool { return db.count(t, `SELECT count(*) FROM workflow.executions`) == 10 })
	proxy.Cut()
	send(30)
	waitFor(t, func() bool { return tb.logs.FilterField(zap.String("event", "store_unavailable")).Len() == 1 })
	// Readers hear that the store is away, not that the record does not exist.
	waitFor(t, func() bool {
		resp, _ := tb.do(http.MethodGet, "/executions/"+ids[len(ids)-1], nil, nil)
		return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
	})
	if resp, _ := tb.do(http.MethodGet, "/executions", nil, nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("listing while the database is away: %d", resp.StatusCode)
	}
	proxy.Restore()
	send(10)
	// The spool is written back at the first replay after the database returns (one a second); on a
	// loaded machine that can take a while. On failure the recorder's events say why.
	deadline := time.Now().Add(30 * time.Second)
	for tb.logs.FilterField(zap.String("event", "store_available")).Len() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if tb.logs.FilterField(zap.String("event", "store_available")).Len() != 1 {
		for _, e := range tb.logs.All() {
			if ev, _ := e.ContextMap()["event"].(string); ev != "" && (strings.Contains(ev, "store") || strings.Contains(ev, "spool") || strings.Contains(ev, "record")) {
				t.Logf("%s %s %v", e.Time.Format("15:04:05.000"), ev, e.ContextMap())
			}
		}
		t.Fatal("no store_available")
	}
	waitFor(t, func() bool { return db.count(t, `SELECT count(*) FROM workflow.executions`) == 50 })
	if n := db.count(t, `SELECT count(DISTINCT request_id) FROM workflow.executions WHERE request_id = ANY($1)`, ids); n != 50 {
		t.Fatalf("%d of the 50 requests recorded", n)
	}
	if n := db.count(t, `SELECT count(*) FROM learning.strategy_performance_history`); n != db.count(t, `SELECT count(*) FROM workflow.worker_results`) {
		t.Fatalf("%d rewards for the calls: some counted twice or not at all", n)
	}
}

func TestRecordsSpooledAtShutdownAreWrittenAtTheNextStart(t *testing.T) {
	db := newDatabase(t)
	proxy, through := pgtest.NewProxy(t, db.url)
	spool := filepath.Join(t.TempDir(), "spool")
	first := newTestbed(t, withDatabase(through, spool))
	proxy.Cut()
	var ids []string
	for i := range 5 {
		status, ok, e := first.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": "general"})
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, e)
		}
		ids = append(ids, ok.RequestID)
	}
	if err := first.engine.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	second := newTestbed(t, withDatabase(through, spool))
	waitFor(t, func() bool {
		return db.count(t, `SELECT count(*) FROM workflow.executions WHERE request_id = ANY($1)`, ids) == 5
	})
	if second.logs.FilterField(zap.String("event", "spool_replay")).Len() != 1 {
		t.Fatal("the replay at start was not logged")
	}
}

func TestARestartedControllerContinuesFromWhatItLearned(t *testing.T) {
	db := newDatabase(t)
	spool := filepath.Join(t.TempDir(), "spool")
	first := newTestbed(t, withDatabase(db.url, spool))
	for i := range 12 {
		category := []string{"general", "debugging", "code_review"}[i%3]
		if status, _, e := first.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": category}); status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, e)
		}
	}
	waitFor(t, func() bool { return db.count(t, `SELECT count(*) FROM workflow.executions`) == 12 })
	waitFor(t, func() bool {
		n := int64(0)
		for _, a := range first.engine.Arms().Published() {
			if a.Category == "*" {
				n += a.Pulls
			}
		}
		return n == int64(db.count(t, `SELECT count(*) FROM learning.strategy_performance_history`))
	})
	learned := first.engine.Arms().Published()
	if err := first.engine.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := newTestbed(t, withDatabase(db.url, spool))
	got := map[string]string{}
	for _, a := range second.engine.Arms().Published() {
		got[a.Model+"/"+a.Category] = fmt.Sprintf("%.9f %.9f %d %.6f", a.Alpha, a.Beta, a.Pulls, a.Recency)
	}
	if len(learned) == 0 || len(got) != len(learned) {
		t.Fatalf("%d arms after the restart, %d before", len(got), len(learned))
	}
	for _, a := range learned {
		if want := fmt.Sprintf("%.9f %.9f %d %.6f", a.Alpha, a.Beta, a.Pulls, a.Recency); got[a.Model+"/"+a.Category] != want {
			t.Errorf("%s/%s: %s after the restart, %s before", a.Model, a.Category, got[a.Model+"/"+a.Category], want)
		}
	}
}

func TestTwoControllersRewardAnExecutionOnce(t *testing.T) {
	db := newDatabase(t)
	a := newTestbed(t, withDatabase(db.url, filepath.Join(t.TempDir(), "a")))
	b := newTestbed(t, withDatabase(db.url, filepath.Join(t.TempDir(), "b")))
	status, ok, e := a.route(map[string]any{"task": mcq, "category": "general"})
	if status != http.StatusOK {
		t.Fatalf("status %d: %+v", status, e)
	}
	waitFor(t, func() bool { return db.count(t, `SELECT count(*) FROM workflow.executions`) == 1 })
	rewardsBefore := db.count(t, `SELECT count(*) FROM learning.strategy_performance_history`)
	statuses := make([]int, 6)
	var wg sync.WaitGroup
	for i := range statuses {
		tb := []*testbed{a, b}[i%2]
		wg.Go(func() {
			resp, raw := tb.do(http.MethodPost, "/executions/"+ok.RequestID+"/feedback", map[string]any{"answer": "B"}, nil)
			if resp.StatusCode == 400 {
				t.Logf("400: %s", raw)
			}
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	applied := 0
	for _, s := range statuses {
		switch s {
		case http.StatusOK:
			applied++
		case http.StatusConflict:
		default:
			t.Fatalf("feedback answered %v", statuses)
		}
	}
	if applied != 1 {
		t.Fatalf("feedback applied %d times: %v", applied, statuses)
	}
	if got := db.count(t, `SELECT count(*) FROM learning.strategy_performance_history`) - rewardsBefore; got != len(ok.Responses) {
		t.Fatalf("%d feedback rewards stored, want %d", got, len(ok.Responses))
	}
	var rec map[string]any
	b.do(http.MethodGet, "/executions/"+ok.RequestID, nil, &rec)
	if fb, _ := rec["feedback"].([]any); len(fb) != len(ok.Responses) {
		t.Fatalf("the record's feedback %v", rec["feedback"])
	}
}

func TestListingTheMemoryStore(t *testing.T) {
	tb := newTestbed(t, nil)
	for i := range 5 {
		category := []string{"general", "debugging"}[i%2]
		tb.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": category})
	}
	var page struct {
		Records []json.RawMessage `json:"records"`
		Next    string            `json:"next"`
	}
	// Listings read the store, which the recorder writes within its flush interval.
	waitFor(t, func() bool {
		tb.do(http.MethodGet, "/executions", nil, &page)
		return len(page.Records) == 5
	})
	tb.do(http.MethodGet, "/executions?category=general&limit=2", nil, &page)
	if len(page.Records) != 2 || page.Next == "" {
		t.Fatalf("first page %+v", page)
	}
	next := page.Next
	page.Records, page.Next = nil, ""
	tb.do(http.MethodGet, "/executions?category=general&limit=2&after="+next, nil, &page)
	if len(page.Records) != 1 || page.Next != "" {
		t.Fatalf("second page %+v", page)
	}
	var bad errorResponse
	resp, raw := tb.do(http.MethodGet, "/executions?outcome=meh&limit=0&since=yesterday&after=%21&colour=red", nil, &bad)
	if resp.StatusCode != http.StatusBadRequest || len(bad.Error.Details) != 5 {
		t.Fatalf("a bad query: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := tb.do(http.MethodGet, "/analysis/models", nil, nil); resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("analysis without a database: %d", resp.StatusCode)
	}
}

func TestAFullSpoolKeepsAnsweringAndSaysSo(t *testing.T) {
	db := newDatabase(t)
	proxy, through := pgtest.NewProxy(t, db.url)
	tb := newTestbed(t, func(c *config.Config) {
		withDatabase(through, filepath.Join(t.TempDir(), "spool"))(c)
		c.SpoolMaxBytes = 1 << 20
	})
	proxy.Cut()
	var ids []string
	for i := range 8 { // 8 tasks of 200 kB: the spool takes four or five of them
		task := fmt.Sprintf("%s\n(%d) %s", mcq, i, strings.Repeat("context ", 25000))
		status, ok, e := tb.route(map[string]any{"task": task, "category": "general", "workers": 1, "min_responses": 1})
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, e)
		}
		ids = append(ids, ok.RequestID)
	}
	waitFor(t, func() bool { return tb.logs.FilterField(zap.String("event", "spool_full")).Len() > 0 })
	// An answer whose record neither the database nor the spool took waited its bound, then went out and
	// said so.
	if tb.logs.FilterField(zap.String("event", "record_not_durable")).Len() == 0 {
		t.Fatal("answers went out before their records were kept, unlogged")
	}
	// What the spool could not take waited in the recorder's queue: every record arrives.
	proxy.Restore()
	waitFor(t, func() bool {
		return db.count(t, `SELECT count(*) FROM workflow.executions WHERE request_id = ANY($1)`, ids) == 8
	})
}
