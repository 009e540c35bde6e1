package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The info lines of one request stay within a bound that does not grow with the models it asks, and
// no single line grows with them either.
func TestARequestsLogsAreBounded(t *testing.T) {
	const maxRequestBytes, maxLineBytes = 48 << 10, 8 << 10
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var models []string
	for _, m := range cat.All()[:64] {
		models = append(models, m.ID)
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	for _, tc := range []struct {
		desc string
		body map[string]any
	}{
		{"six models by Thompson Sampling", map[string]any{"task": mcq, "category": "general", "workers": 6}},
		{"sixty-four named models", map[string]any{"task": mcq, "category": "general", "models": models, "workers": 64, "min_responses": 1}},
		{"sixty-four by a pairwise arbiter", map[string]any{"task": mcq, "category": "general", "models": models, "workers": 64,
			"min_responses": 1, "strategy": "pairwise"}},
	} {
		tb := newTestbed(t, nil)
		status, resp, bad := tb.route(tc.body)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d %+v", tc.desc, status, bad)
		}
		total, longest := 0, 0
		for _, e := range tb.logs.FilterField(zap.String("request_id", resp.RequestID)).All() {
			if e.Level < zapcore.InfoLevel {
				continue
			}
			buf, err := enc.EncodeEntry(e.Entry, e.Context)
			if err != nil {
				t.Fatal(err)
			}
			total, longest = total+buf.Len(), max(longest, buf.Len())
			buf.Free()
		}
		t.Logf("%s: %d bytes of info lines, the longest %d", tc.desc, total, longest)
		if total == 0 || total > maxRequestBytes || longest > maxLineBytes {
			t.Errorf("%s: %d bytes of info lines (at most %d), the longest %d (at most %d)", tc.desc, total, maxRequestBytes, longest, maxLineBytes)
		}
	}
}

// TestRequestsShedAreLoggedOnceAnInterval: under overload nearly every request is refused for load,
// and a warning each made most of the log. Groq takes one request a minute by the test's clock, so the
// routed requests naming only its models are refused 503 rate_limited at once after the first; chat
// completions whose task and conversation hold more than max_inflight_bytes are refused 503
// overloaded. Over three intervals of the clock the refusals write one requests_shed line at the
// first, then one as each interval ends and one at shutdown, and no line of their own at info; the
// lines' counts by code add up to the refusals, and the refused requests keep their records.
func TestRequestsShedAreLoggedOnceAnInterval(t *testing.T) {
	clk := clock.NewFake(time.Now())
	tb := newTestbed(t, func(c *config.Config) {
		c.RateLimits.Providers["groq"] = ratelimit.Limits{RequestsPerMinute: 1, Concurrency: 1}
		c.MaxBodyBytes, c.MaxInflightBytes = 8<<10, 8<<10
	}, withClock(clk))
	routed := map[string]any{"task": mcq, "category": "general", "models": groqModels, "workers": 1, "min_responses": 1}
	large := map[string]any{"model": groqModels[0], "messages": []map[string]any{{"role": "user", "content": strings.Repeat("Which aisle? ", 400)}}}
	const intervals, routedEach, largeEach = 3, 20, 5
	refused := map[string]int64{}
	var shedID string
	for range intervals {
		for i := range routedEach + largeEach {
			path, body := "/route-thompson", routed
			if i%5 == 4 {
				path, body = "/v1/chat/completions", large
			}
			var bad errorResponse
			resp, raw := tb.do(http.MethodPost, path, body, &bad)
			switch {
			case resp.StatusCode == http.StatusOK:
			case resp.StatusCode == http.StatusServiceUnavailable && (bad.Error.Code == "rate_limited" || bad.Error.Code == "overloaded"):
				refused[bad.Error.Code]++
				if bad.Error.Code == "rate_limited" {
					shedID = resp.Header.Get("X-Request-ID")
				}
			default:
				t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
			}
		}
		clk.Advance(actors.ShedLogEvery)
	}
	if refused["rate_limited"] < intervals*(routedEach-1) || refused["overloaded"] != intervals*largeEach {
		t.Fatalf("refused %v: want every routed request but the first rate_limited and every large one overloaded", refused)
	}
	// The record of a request refused for load is kept as before.
	if rec := tb.record(shedID); rec["status_code"] != 503.0 {
		t.Fatalf("record of %s: status %v", shedID, rec["status_code"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tb.engine.Shutdown(ctx); err != nil { // what the last interval counted is written at shutdown
		t.Fatal(err)
	}

	lines := tb.logs.FilterField(zap.String("event", "requests_shed")).All()
	if len(lines) < 2 || len(lines) > intervals+1 {
		t.Fatalf("%d requests_shed lines for %v refusals over %d intervals: want the first, then one an interval", len(lines), refused, intervals)
	}
	logged := map[string]int64{}
	var total int64
	for i, l := range lines {
		f := l.ContextMap()
		if l.Level != zapcore.WarnLevel {
			t.Errorf("line %d at %s", i, l.Level)
		}
		counts, _ := f["counts"].(map[string]any)
		var sum int64
		for code, n := range counts {
			logged[code] += n.(int64)
			sum += n.(int64)
		}
		total += sum
		if f["since_last_line"] != sum || f["total"] != total {
			t.Errorf("line %d: %v", i, f)
		}
	}
	t.Logf("%d requests_shed lines for %v refusals over %d intervals", len(lines), refused, intervals)
	if len(logged) != len(refused) || logged["rate_limited"] != refused["rate_limited"] || logged["overloaded"] != refused["overloaded"] {
		t.Fatalf("the lines count %v, the answers %v", logged, refused)
	}
	for _, l := range tb.logs.FilterMessage("request finished").All() {
		if code := l.ContextMap()["error_code"]; (code == "rate_limited" || code == "overloaded") && l.Level >= zapcore.InfoLevel {
			t.Fatalf("a request refused for load has a line of its own at %s: %v", l.Level, l.ContextMap())
		}
	}
}
