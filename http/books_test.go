// The fuzzing build (make fuzz, -tags fuzz) leaves this file out: it shares the key tests' helpers.

//go:build !fuzz

package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/adapters/store/postgres"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/platform/tokens"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"go.uber.org/zap"
)

// door is a way in that streams a direct call: its path and a body asking for model with prompt.
type door struct {
	name, path string
	body       func(model, prompt string) map[string]any
}

var streamingDoors = []door{
	{"chat completions", "/v1/chat/completions", func(model, prompt string) map[string]any {
		return map[string]any{"model": model, "stream": true, "messages": []map[string]any{{"role": "user", "content": prompt}}}
	}},
	{"messages", "/v1/messages", func(model, prompt string) map[string]any {
		return map[string]any{"model": model, "stream": true, "max_tokens": 300, "messages": []map[string]any{{"role": "user", "content": prompt}}}
	}},
	{"responses", "/v1/responses", func(model, prompt string) map[string]any {
		return map[string]any{"model": model, "stream": true, "input": prompt}
	}},
}

// TestCutStreamsPayOnEveryDoor hangs up on a streamed answer before its last event (the one with the
// usage), on every door: the call is charged for its prompt and for what the provider had sent,
// counted by the tokenizer, and its record says the usage was estimated; the key's spend is the
// record's cost.
func TestCutStreamsPayOnEveryDoor(t *testing.T) {
	u := newUpstreams(t, withAdmin)
	k := u.createKey(map[string]any{"name": "hangs-up", "budget_usd": 1})
	var charged money.USD
	for _, d := range streamingDoors {
		t.Run(d.name, func(t *testing.T) {
			const answer = "Nitrogen makes up most of the air we breathe, about seventy eight percent of it by volume."
			pace := make(chan struct{}, 16)
			for range 6 { // the role (or the message's start) and a few words go; the rest waits
				pace <- struct{}{}
			}
			defer close(pace)
			u.local.Queue(providertest.Response{Text: answer, Pace: pace})
			prompt := mcq + " (" + d.name + ")"
			ctx, hangUp := context.WithCancel(context.Background())
			defer hangUp()
			raw, _ := json.Marshal(d.body("qwen-a", prompt))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.srv.URL+d.path, strings.NewReader(string(raw)))
			req.Header.Set("Authorization", "Bearer "+k.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			id := resp.Header.Get("X-Request-Id")
			received := readUntil(t, resp, "Nitrogen")
			hangUp() // before the usage: the caller has gone
			resp.Body.Close()
			// The record waits for its call's settlement (a moment after the hang-up): until then a read
			// finds it without the call's cost.
			var rec map[string]any
			waitFor(t, func() bool {
				r, _ := u.do(http.MethodGet, "/executions/"+id, nil, &rec)
				return r.StatusCode == http.StatusOK && rec["cost_nanos"] != nil && rec["cost_nanos"] != "0"
			})
			results, _ := rec["results"].([]any)
			if len(results) != 1 {
				t.Fatalf("the record's calls: %v", rec["results"])
			}
			call := results[0].(map[string]any)
			usage, _ := call["usage"].(map[string]any)
			in, _ := usage["input_tokens"].(float64)
			out, _ := usage["output_tokens"].(float64)
			cost := nanos(t, call, "cost_nanos")
			scheme := tokens.For("qwen-a", "qwen")
			rates := money.Rates{In: money.PerMillionDollar, Out: 2 * money.PerMillionDollar}
			if usage["estimated"] != true || int(in) < scheme.Count(prompt) || int(out) < scheme.Count(received) || out == 0 ||
				cost != rates.Cost(int64(in), int64(out)) || cost < rates.Cost(int64(scheme.Count(prompt)), int64(scheme.Count(received))) {
				t.Fatalf("the cut call: usage %v, cost %s; it sent %d prompt tokens and got %q", usage, cost, scheme.Count(prompt), received)
			}
			if rec["status_code"] != float64(499) || nanos(t, rec, "cost_nanos") != cost {
				t.Fatalf("the record: status %v, cost %v", rec["status_code"], rec["cost_nanos"])
			}
			charged += cost
			t.Logf("cut after %q: %v prompt and %v output tokens estimated, charged $%s", received, in, out, cost)
		})
	}
	var shown createdKey
	u.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown)
	if shown.Spend.SpendUSD != charged || charged == 0 {
		t.Fatalf("the key spent %s, its cut calls cost %s", shown.Spend.SpendUSD, charged)
	}
}

// readUntil reads a stream's data events until the text of the answer they carry holds want, and
// returns that text: the content of chat completion chunks, the text of text_delta blocks, the deltas of
// response.output_text.delta events.
func readUntil(t *testing.T, resp *http.Response, want string) string {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var text strings.Builder
	lines := bufio.NewScanner(resp.Body)
	deadline := time.Now().Add(10 * time.Second)
	for lines.Scan() && time.Now().Before(deadline) {
		data, ok := strings.CutPrefix(lines.Text(), "data:")
		if !ok {
			continue
		}
		text.WriteString(streamedText(t, strings.TrimSpace(data)))
		if strings.Contains(text.String(), want) {
			return text.String()
		}
	}
	t.Fatalf("the stream ended without %q (read %q): %v", want, text.String(), lines.Err())
	return ""
}

// streamedText is the text of the answer one data event carries, on any door; "" for an event that
// carries none.
func streamedText(t *testing.T, data string) string {
	t.Helper()
	if data == "[DONE]" {
		return ""
	}
	var ev struct {
		Type    string          `json:"type"`
		Delta   json.RawMessage `json:"delta"`
		Choices []struct {
			Delta struct {
				Content *string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("a data event that is not JSON: %q: %v", data, err)
	}
	var text string
	switch ev.Type {
	case "content_block_delta": // the Messages API
		var d struct{ Type, Text string }
		if json.Unmarshal(ev.Delta, &d) == nil && d.Type == "text_delta" {
			text = d.Text
		}
	case "response.output_text.delta": // the Responses API
		_ = json.Unmarshal(ev.Delta, &text)
	case "": // chat completions
		for _, c := range ev.Choices {
			if c.Delta.Content != nil {
				text += *c.Delta.Content
			}
		}
	}
	return text
}

// checkBooks runs the books check over a test's database and fails on any difference.
func checkBooks(t *testing.T, db *database) {
	t.Helper()
	s, err := postgres.Open(context.Background(), db.url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var r postgres.BooksReport
	waitFor(t, func() bool { // the last records and settlements reach the database in a moment
		r, err = s.CheckBooks(context.Background(), time.Now().Add(-time.Hour))
		return err == nil && len(r.Differences) == 0
	})
	t.Logf("the books balance: %d calls, %d requests, %d keys, $%s charged", r.Calls, r.Requests, r.Keys, r.Charged)
}

// TestConcurrentRequestsNeverPassTheBudget sends 240 requests at once with one key, half through each
// of two controllers sharing PostgreSQL and Redis: every call holds its worst case before it is sent,
// so the key spends at most its budget, whatever the concurrency, and the books balance.
func TestConcurrentRequestsNeverPassTheBudget(t *testing.T) {
	a, b, db := sharedControllers(t)
	budget := money.Dollar / 2000 // room for about 70 of the 240 calls' real costs
	k := a.createKey(map[string]any{"name": "crowd", "budget_usd": budget})
	const n = 240
	statuses := make([]int, n)
	costs := make([]money.USD, n)
	var wg sync.WaitGroup
	for i := range n {
		tb := []*testbed{a, b}[i%2]
		wg.Go(func() { statuses[i], _, costs[i], _ = directCall(tb, k.Key) })
	}
	wg.Wait()
	var answered, refused int
	var spent money.USD
	for i, s := range statuses {
		switch s {
		case http.StatusOK:
			answered++
			spent += costs[i]
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("request %d: %d", i, s)
		}
	}
	// Every answer waited for its record to be durable: in PostgreSQL, or, when a write there is slow,
	// in its controller's spool, from which it reaches PostgreSQL a moment later.
	var shown createdKey
	waitFor(t, func() bool {
		b.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown)
		if shown.Spend.SpendUSD > budget {
			t.Fatalf("the key spent %s of %s", shown.Spend.SpendUSD, budget)
		}
		return shown.Spend.SpendUSD == spent
	})
	t.Logf("%d answered, %d refused; spent %s of %s", answered, refused, shown.Spend.SpendUSD, budget)
	if answered == 0 || refused == 0 {
		t.Fatalf("%d answered (costing %s), %d refused; the key spent %s of %s", answered, spent, refused, shown.Spend.SpendUSD, budget)
	}
	checkBooks(t, db)
}

// outage is how long the outage tests keep a service away: short in make test, 15 s in make soak
// (CONCLAVE_TEST_OUTAGE).
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("CONCLAVE_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	return 3 * time.Second
}

// keyedLoad sends direct calls with a key from workers connections until stop closes; it returns how
// many were answered and the others' statuses.
func keyedLoad(tb *testbed, secret string, workers int, stop <-chan struct{}) (answered int, failed map[int]int, cost money.USD) {
	var mu sync.Mutex
	failed = map[int]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, _, c, _ := directCall(tb, secret)
				mu.Lock()
				if status == http.StatusOK {
					answered++
					cost += c
				} else {
					failed[status]++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return answered, failed, cost
}

// TestADatabaseOutageStopsNoKeyedTraffic blocks PostgreSQL under keyed load: the key is served from
// the controller's cache, its budget is held in Redis, intents and records go to the spool, and when
// the database is back every record and every charge reaches it: the books balance.
func TestADatabaseOutageStopsNoKeyedTraffic(t *testing.T) {
	db := newDatabase(t)
	proxy, through := pgtest.NewProxy(t, db.url)
	_, prefix := redistest.New(t)
	tb := newTestbed(t, func(c *config.Config) {
		withAdmin(c)
		sharing(prefix, "ctl-a")(c)
		withDatabase(through, filepath.Join(t.TempDir(), "spool"))(c)
	})
	k := tb.createKey(map[string]any{"name": "steady", "budget_usd": 100})
	if status, _, _, raw := directCall(tb, k.Key); status != http.StatusOK { // the key is seen before the outage
		t.Fatalf("before the outage: %d %s", status, raw)
	}
	stop := make(chan struct{})
	var answered int
	var failed map[int]int
	var cost money.USD
	done := make(chan struct{})
	go func() { answered, failed, cost = keyedLoad(tb, k.Key, 4, stop); close(done) }()
	time.Sleep(300 * time.Millisecond)
	proxy.Cut()
	time.Sleep(outage(t))
	proxy.Restore()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	total := answered
	for _, n := range failed {
		total += n
	}
	t.Logf("a %v database outage under keyed load: %d of %d answered, refused %v", outage(t), answered, total, failed)
	if answered*100 < total*99 || answered < 20 {
		t.Fatalf("%d of %d answered (refused %v)", answered, total, failed)
	}
	var shown createdKey
	waitFor(t, func() bool {
		tb.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown)
		return shown.Spend.TotalUSD >= cost
	})
	checkBooks(t, db)
}

// TestALostRedisStopsNoKeyedTraffic loses Redis under keyed load: budgets are held in the controller's
// memory meanwhile, and what they charged is added to Redis when it answers again; the books balance.
func TestALostRedisStopsNoKeyedTraffic(t *testing.T) {
	db := newDatabase(t)
	proxy, through := redistest.NewProxy(t)
	_, prefix := redistest.New(t)
	tb := newTestbed(t, func(c *config.Config) {
		withAdmin(c)
		c.RedisURL, c.RedisPrefix, c.NodeID = secret.String(through), prefix, "ctl-a"
		withDatabase(db.url, filepath.Join(t.TempDir(), "spool"))(c)
	})
	k := tb.createKey(map[string]any{"name": "steady", "budget_usd": 100})
	stop := make(chan struct{})
	var answered int
	var failed map[int]int
	done := make(chan struct{})
	go func() { answered, failed, _ = keyedLoad(tb, k.Key, 4, stop); close(done) }()
	time.Sleep(300 * time.Millisecond)
	proxy.Cut()
	time.Sleep(outage(t))
	proxy.Restore()
	time.Sleep(3 * time.Second) // Redis is tried again every 2 s
	close(stop)
	<-done
	t.Logf("a %v Redis outage under keyed load: %d answered, refused %v", outage(t), answered, failed)
	if len(failed) > 0 || answered < 20 {
		t.Fatalf("%d answered, refused %v", answered, failed)
	}
	if tb.logs.FilterField(zap.String("event", "budgets_local")).Len() == 0 || tb.logs.FilterField(zap.String("event", "budgets_shared")).Len() == 0 {
		t.Fatal("the budgets never went local and back")
	}
	checkBooks(t, db)
}

// TestUnpricedModelsAreNotFreeOnABudget configures a model without a price: a key with a budget may
// not call it (403 model_not_priced, naming the setting that prices it) and its panels leave it out; a
// key without a budget may; a default price prices it.
func TestUnpricedModelsAreNotFreeOnABudget(t *testing.T) {
	unpriced := func(c *config.Config) {
		withAdmin(c)
		p := c.Providers["local"]
		p.Models = append(p.Models, config.ProviderModel{ID: "qwen-u", Context: 32768})
		c.Providers["local"] = p
	}
	u := newUpstreams(t, unpriced)
	ask := func(secret, model string) (*http.Response, []byte) {
		return u.as(secret, http.MethodPost, "/v1/chat/completions", map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": mcq}}})
	}
	budgeted := u.createKey(map[string]any{"name": "budgeted", "budget_usd": 1})
	calls := u.modelCalls()
	resp, raw := ask(budgeted.Key, "qwen-u")
	if resp.StatusCode != http.StatusForbidden || errorCode(t, raw) != "model_not_priced" || !strings.Contains(string(raw), "providers.local.models[].price_in") {
		t.Fatalf("an unpriced model on a budget: %d %s", resp.StatusCode, raw)
	}
	if u.modelCalls() != calls {
		t.Fatal("the unpriced model was called")
	}
	for range 5 { // panels keep to priced models
		resp, raw := u.as(budgeted.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "category": "general", "workers": 4, "min_responses": 1})
		if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), "qwen-u") {
			t.Fatalf("a panel on a budget: %d %s", resp.StatusCode, raw)
		}
	}
	free := u.createKey(map[string]any{"name": "no-budget"})
	if resp, raw := ask(free.Key, "qwen-u"); resp.StatusCode != http.StatusOK {
		t.Fatalf("an unpriced model without a budget: %d %s", resp.StatusCode, raw)
	}

	d := newUpstreams(t, func(c *config.Config) {
		unpriced(c)
		in, out := money.PerMillionDollar, 3*money.PerMillionDollar
		c.Pricing = config.Pricing{DefaultPriceIn: &in, DefaultPriceOut: &out}
	})
	k := d.createKey(map[string]any{"name": "budgeted", "budget_usd": 1})
	resp, raw = d.as(k.Key, http.MethodPost, "/v1/chat/completions", map[string]any{"model": "qwen-u", "messages": []map[string]any{{"role": "user", "content": mcq}}})
	var answer struct {
		Conclave struct {
			CostUSD money.USD `json:"cost_usd"`
		} `json:"conclave"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &answer) != nil || answer.Conclave.CostUSD == 0 {
		t.Fatalf("a default price: %d %s", resp.StatusCode, raw)
	}
}

// TestAChangeReachesAControllerWithoutRedis revokes a key on one of two controllers that share only
// PostgreSQL: the other refuses it once it reads the keys again (every 30 s in production; 200 ms here).
func TestAChangeReachesAControllerWithoutRedis(t *testing.T) {
	db := newDatabase(t)
	refresh := func(_ *config.Config, o *engine.Options) { o.KeyRefresh = 200 * time.Millisecond }
	shared := func(node string) func(*config.Config) {
		return func(c *config.Config) {
			withAdmin(c)
			c.NodeID = node
			withDatabase(db.url, filepath.Join(t.TempDir(), "spool-"+node))(c)
		}
	}
	a, b := newTestbed(t, shared("ctl-a"), refresh), newTestbed(t, shared("ctl-b"), refresh)
	k := a.createKey(map[string]any{"name": "short-lived"})
	if status, _, _, raw := directCall(a, k.Key); status != http.StatusOK { // a keeps the key
		t.Fatalf("before: %d %s", status, raw)
	}
	if resp, raw := b.do(http.MethodDelete, "/admin/keys/"+k.ID, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke on b: %d %s", resp.StatusCode, raw)
	}
	revoked := time.Now()
	for {
		status, _, _, _ := directCall(a, k.Key)
		if status == http.StatusUnauthorized {
			t.Logf("the revocation reached a, without Redis, after %v", time.Since(revoked).Round(time.Millisecond))
			return
		}
		if time.Since(revoked) > 5*time.Second {
			t.Fatalf("a still serves the revoked key: %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
