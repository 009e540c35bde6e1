package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/platform/config"
)

// Tests of the bounds of a request: the caller's timeout, its id, its body.

// elapsed routes a body and returns the status and the wall time the answer took.
func (tb *testbed) timed(body map[string]any) (int, time.Duration) {
	tb.t.Helper()
	began := time.Now()
	resp, _ := tb.do(http.MethodPost, "/route-thompson", body, nil)
	return resp.StatusCode, time.Since(began)
}

// The answer arrives within the caller's timeout plus a small margin, whatever the faults. The slack
// below is a liveness bound for a loaded test machine, far from the 14 s such requests used to take.
func TestAnswerArrivesWithinTheCallersTimeout(t *testing.T) {
	const slack = 1500 * time.Millisecond
	tb := newTestbed(t, func(c *config.Config) {
		c.Sim.LatencyScale = 0.05
		c.Retry = config.Default().Retry // the retry table's real backoffs: 1 s, 2 s, 4 s
	})
	for _, p := range allProviders {
		tb.engine.Sim.SetFault(p, providers.Fault{ServerErrorRate: 0.5, TimeoutRate: 0.3})
	}
	for _, strategy := range []string{"majority", "rotating"} {
		for _, timeout := range []float64{2, 0.5, 1e-7} {
			status, took := tb.timed(map[string]any{"task": mcq, "timeout": timeout, "strategy": strategy, "workers": 6, "min_responses": 4})
			limit := time.Duration(timeout*float64(time.Second)) + slack
			if took > limit {
				t.Errorf("%s, timeout %g: answered %d after %s, beyond %s", strategy, timeout, status, took, limit)
			}
		}
	}
}

// Without a caller's timeout the blueprint bounds the wait: timeout_seconds × (1 + retry.rounds).
func TestTheBlueprintBoundsARequestWithoutTimeout(t *testing.T) {
	slow := &slowModels{Backend: simBackend(t), delay: time.Minute, models: allModels(t)}
	tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 1, Rounds: 2} }, quickBlueprints(t, 0.3), withBackend(slow))
	status, took := tb.timed(map[string]any{"task": mcq, "category": "quick", "workers": 3, "min_responses": 3})
	if limit := 900*time.Millisecond + 1500*time.Millisecond; status != http.StatusServiceUnavailable || took > limit {
		t.Fatalf("status %d after %s: want 503 within %s", status, took, limit)
	}
}

func TestCallersRequestIDNeverReplacesARecord(t *testing.T) {
	tb := newTestbed(t, nil)
	const mine = "0b7e2a4c-4cf3-4f36-9a55-6a1d2f3c4b5a"
	post := func(task string) (string, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/route-thompson", strings.NewReader(fmt.Sprintf(`{"task": %q}`, task)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-ID", mine)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %v %v", resp.StatusCode, body, err)
		}
		if resp.Header.Get("X-Request-ID") != body["request_id"] {
			t.Fatalf("X-Request-ID %q is not the request_id %v", resp.Header.Get("X-Request-ID"), body["request_id"])
		}
		return resp.Header.Get("X-Request-ID"), body
	}
	first, body1 := post(mcq)
	second, body2 := post("Summarize this incident: the cache ran out of memory.")
	if first == mine || second == mine || first == second {
		t.Fatalf("request ids %s and %s for a caller id %s: the server's id must be its own", first, second, mine)
	}
	for _, b := range []map[string]any{body1, body2} {
		if b["client_request_id"] != mine {
			t.Fatalf("client_request_id %v, want the caller's %s", b["client_request_id"], mine)
		}
	}
	rec := tb.record(first)
	if rec["task"] != mcq || rec["client_request_id"] != mine {
		t.Fatalf("the first record changed: task %q, client id %v", rec["task"], rec["client_request_id"])
	}
}

func TestBodiesAreStrictJSON(t *testing.T) {
	tb := newTestbed(t, nil)
	var many strings.Builder
	many.WriteString(`{"task": "x"`)
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&many, `, "field%d": 1`, i)
	}
	many.WriteString("}")
	tests := []struct {
		desc        string
		contentType string
		body        string
		status      int
		field       string
	}{
		{"trailing data", "application/json", `{"task": "x"} trailing`, 400, "body"},
		{"a second value", "application/json", `{"task": "x"} 1`, 400, "body"},
		{"a duplicate key", "application/json", `{"task": "x", "task": "y"}`, 400, "task"},
		{"a duplicate key in metadata", "application/json", `{"task": "x", "metadata": {"a": 1, "a": 2}}`, 400, "metadata.a"},
		{"an invisible task", "application/json", `{"task": "\u200b\u2060 \t\u00a0"}`, 400, "task"},
		{"plain text", "text/plain", `{"task": "x"}`, 415, ""},
		{"a form", "application/x-www-form-urlencoded", `{"task": "x"}`, 415, ""},
		{"no content type", "", `{"task": "x"}`, 415, ""},
		{"JSON with a charset", "application/json; charset=utf-8", `{"task": "x", "workers": 0}`, 400, "workers"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			status, bad := tb.post(tt.contentType, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %+v", status, tt.status, bad)
			}
			if tt.field != "" && (len(bad.Error.Details) == 0 || bad.Error.Details[0].Field != tt.field) {
				t.Fatalf("details %+v, want a problem with %s", bad.Error.Details, tt.field)
			}
			if bad.Error.Message == "" {
				t.Fatal("an error without a message")
			}
		})
	}
	t.Run("at most 50 problems", func(t *testing.T) {
		status, bad := tb.post("application/json", many.String())
		if status != 400 || len(bad.Error.Details) != 51 || !strings.Contains(bad.Error.Details[50].Message, "150 more") {
			t.Fatalf("status %d, %d details, last %+v", status, len(bad.Error.Details), bad.Error.Details[len(bad.Error.Details)-1])
		}
	})
}

// post sends a raw body with a content type.
func (tb *testbed) post(contentType, body string) (int, errorResponse) {
	tb.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/route-thompson", strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var bad errorResponse
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(raw, &bad); err != nil {
			tb.t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
		}
	}
	if len(raw) > 64<<10 {
		tb.t.Fatalf("an error body of %d bytes", len(raw))
	}
	return resp.StatusCode, bad
}

func TestOneMegabyteOfUnknownFieldsGetsABoundedAnswer(t *testing.T) {
	tb := newTestbed(t, nil)
	var b bytes.Buffer
	b.WriteString(`{"task": "x"`)
	for i := 0; b.Len() < 1<<20-512; i++ {
		fmt.Fprintf(&b, `, "%s%d": 1`, strings.Repeat("k", 200), i)
	}
	b.WriteString("}")
	status, bad := tb.post("application/json", b.String())
	if status != 400 || len(bad.Error.Details) > 51 {
		t.Fatalf("status %d with %d details", status, len(bad.Error.Details))
	}
	for _, d := range bad.Error.Details {
		if len(d.Field) > 128 {
			t.Fatalf("a field name of %d bytes echoed back", len(d.Field))
		}
	}
}

func TestAClientThatLeavesCancelsItsRequest(t *testing.T) {
	slow := &slowModels{Backend: simBackend(t), delay: time.Minute, models: allModels(t)}
	tb := newTestbed(t, nil, withBackend(slow))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tb.srv.URL+"/route-thompson", strings.NewReader(`{"task": "`+strings.ReplaceAll(mcq, "\n", `\n`)+`", "timeout": 60}`))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return busy(tb.engine) })
	cancel()
	<-done
	// The request stops: every call it made is cancelled, long before its 60 s.
	waitFor(t, func() bool { return !busy(tb.engine) })
	for _, p := range allProviders {
		tb.waitIdle(p)
	}
}

func TestErrorsQuotingTheInputStayBounded(t *testing.T) {
	tb := newTestbed(t, nil)
	long := strings.Repeat("v", 500<<10)
	for _, body := range []string{
		`{"task": "x", "metadata": {"answer_kind": "` + long + `"}}`,
		`{"task": "x", "category": "` + long + `"}`,
		`{"task": "x", "models": ["` + long + `"]}`,
	} {
		status, bad := tb.post("application/json", body) // post fails the test on an error body above 64 KiB
		if status/100 != 4 || len(bad.Error.Details) == 0 {
			t.Fatalf("status %d: %+v", status, bad.Error.Code)
		}
	}
	// The feedback endpoint too.
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/executions/x/feedback", strings.NewReader(`{"`+long+`": 1}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(raw) > 4096 {
		t.Fatalf("feedback: %d with %d bytes", resp.StatusCode, len(raw))
	}
}
