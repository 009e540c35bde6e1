package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	httpapi "github.com/conclave-ai/conclave/http"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle sleeps for its interval after a burst of dead letters.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// testbed is a real server over a real engine.
type testbed struct {
	t      *testing.T
	srv    *httptest.Server
	engine *engine.Engine
	logs   *observer.ObservedLogs
	token  string
}

type option func(*config.Config, *engine.Options)

func withClock(c clock.Clock) option {
	return func(_ *config.Config, o *engine.Options) { o.Clock = c }
}

func withBackend(b providers.Backend) option {
	return func(_ *config.Config, o *engine.Options) { o.Backend = b }
}

// testConfig is the default configuration with rate limits far above what the tests send: a test
// about rate limits sets its own.
func testConfig() config.Config {
	cfg := config.Default()
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	return cfg
}

func newTestbed(t *testing.T, mutate func(*config.Config), opts ...option) *testbed {
	t.Helper()
	cfg := testConfig()
	cfg.Sim.LatencyScale = 0
	cfg.Sim.Faults = providers.Fault{}
	cfg.Retry = config.Retry{Scale: 0.001, Rounds: 1}
	cfg.ArbiterTimeoutSeconds = 2
	if mutate != nil {
		mutate(&cfg)
	}
	core, logs := observer.New(zap.DebugLevel)
	eo := engine.Options{Config: cfg, Log: zap.New(core)}
	for _, o := range opts {
		o(&cfg, &eo)
	}
	eo.Config = cfg
	e, err := engine.New(eo)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(e, httpapi.Options{Token: cfg.APIToken, Keys: e.Keys(), MaxBodyBytes: cfg.MaxBodyBytes, Log: zap.New(core),
		StreamKeepAlive: 50 * time.Millisecond, Tracing: eo.Tracing}))
	tb := &testbed{t: t, srv: srv, engine: e, logs: logs, token: cfg.APIToken.Reveal()}
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return tb
}

// do sends a request and decodes the JSON answer into out (when not nil).
func (tb *testbed) do(method, path string, body any, out any) (*http.Response, []byte) {
	tb.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			tb.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	resp, raw := tb.send(method, path, rd, nil)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			tb.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp, raw
}

// send sends a request with the testbed's token, a JSON body when there is one, and header, and returns
// the answer read whole.
func (tb *testbed) send(method, path string, body io.Reader, header http.Header) (*http.Response, []byte) {
	tb.t.Helper()
	req, err := http.NewRequest(method, tb.srv.URL+path, body)
	if err != nil {
		tb.t.Fatal(err)
	}
	if tb.token != "" {
		req.Header.Set("Authorization", "Bearer "+tb.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.t.Fatal(err)
	}
	return resp, raw
}

// route posts a task and returns the status and the decoded body.
func (tb *testbed) route(body map[string]any) (int, routeResponse, errorResponse) {
	tb.t.Helper()
	resp, raw := tb.do(http.MethodPost, "/route-thompson", body, nil)
	var ok routeResponse
	var bad errorResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &ok); err != nil {
			tb.t.Fatalf("decode %s: %v", raw, err)
		}
		if resp.Header.Get("X-Request-ID") != ok.RequestID {
			tb.t.Fatalf("X-Request-ID %q differs from request_id %q", resp.Header.Get("X-Request-ID"), ok.RequestID)
		}
	} else if err := json.Unmarshal(raw, &bad); err != nil {
		tb.t.Fatalf("decode error body %s: %v", raw, err)
	}
	return resp.StatusCode, ok, bad
}

type routeResponse struct {
	Quorum *struct {
		Mode      string  `json:"mode"`
		Asked     int     `json:"asked"`
		Selected  int     `json:"selected"`
		Waves     int     `json:"waves"`
		Stopped   string  `json:"stopped"`
		Posterior float64 `json:"posterior"`
	} `json:"quorum"`
	RequestID  string  `json:"request_id"`
	Category   string  `json:"category"`
	Confidence float64 `json:"confidence"`
	Blueprint  struct {
		Name           string  `json:"name"`
		Workers        int     `json:"workers"`
		TimeoutSeconds float64 `json:"timeout_seconds"`
		Strategy       string  `json:"strategy"`
		MinResponses   int     `json:"min_responses"`
	} `json:"blueprint"`
	Answer    string `json:"answer"`
	Consensus struct {
		Strategy     string   `json:"strategy"`
		Arbiter      string   `json:"arbiter"`
		ChosenModel  string   `json:"chosen_model"`
		Agreement    []string `json:"agreement"`
		Disagreement []string `json:"disagreement"`
		ArbiterError string   `json:"arbiter_error"`
	} `json:"consensus"`
	Responses []struct {
		Model         string    `json:"model"`
		Provider      string    `json:"provider"`
		Worker        string    `json:"worker"`
		Status        string    `json:"status"`
		LatencyMs     float64   `json:"latency_ms"`
		WeightedScore float64   `json:"weighted_score"`
		Contributed   bool      `json:"contributed"`
		Decider       bool      `json:"decider"`
		ErrorKind     string    `json:"error_kind"`
		Usage         usage     `json:"usage"`
		Cost          money.USD `json:"cost"`
	} `json:"responses"`
	Usage    usage              `json:"usage"`
	Cost     money.USD          `json:"cost"`
	Phases   map[string]float64 `json:"phases"`
	Retries  []retry            `json:"retries"`
	Degraded bool               `json:"degraded"`
}

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type retry struct {
	Model   string  `json:"model"`
	Kind    string  `json:"kind"`
	Outcome string  `json:"outcome"`
	DelayMs float64 `json:"delay_ms"`
}

type errorResponse struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"details"`
		Retries []retry `json:"retries"`
	} `json:"error"`
}

// price is a price of the configuration, in dollars per million tokens.
func price(dollars string) *money.Price {
	p, err := money.ParsePrice(dollars)
	if err != nil {
		panic(err)
	}
	return &p
}

// nanos reads an amount of a record as GET /executions/:id writes it: whole nano-dollars in a string
// (protobuf's JSON form of an int64); an absent amount is zero.
func nanos(t testing.TB, rec map[string]any, field string) money.USD {
	t.Helper()
	s, ok := rec[field].(string)
	if !ok {
		if rec[field] != nil {
			t.Fatalf("%s is %v, not a string of nano-dollars", field, rec[field])
		}
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", field, err)
	}
	return money.USD(n)
}

// record fetches an execution record.
func (tb *testbed) record(id string) map[string]any {
	tb.t.Helper()
	var rec map[string]any
	resp, raw := tb.do(http.MethodGet, "/executions/"+id, nil, &rec)
	if resp.StatusCode != http.StatusOK {
		tb.t.Fatalf("GET /executions/%s: %d %s", id, resp.StatusCode, raw)
	}
	return rec
}
