package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	httpapi "github.com/conclave-ai/conclave/http"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsAfterTraffic(t *testing.T) {
	tb := newTestbed(t, nil)
	for range 3 {
		if status, _, e := tb.route(map[string]any{"task": mcq, "category": "general"}); status != http.StatusOK {
			t.Fatalf("status %d %+v", status, e)
		}
	}
	tb.do(http.MethodGet, "/nowhere/at/all", nil, nil)
	resp, raw := tb.do(http.MethodGet, "/metrics", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	text := string(raw)
	for _, want := range []string{
		`conclave_http_requests_total{category="general",code="200",endpoint="/route-thompson"} 3`,
		`conclave_http_requests_total{category="",code="404",endpoint="unmatched"} 1`,
		`conclave_http_request_duration_seconds_bucket{endpoint="/route-thompson",le="+Inf"} 3`,
		`conclave_overhead_seconds_count 3`,
		`conclave_quorum_outcomes_total{outcome="complete"} 3`,
		`conclave_quorum_outcomes_total{outcome="failed"} 0`,
		`conclave_model_calls_total{error_type="",gen_ai_provider_name="`,
		`conclave_tokens_total{gen_ai_provider_name="`,
		`gen_ai_token_type="input"}`,
		`conclave_breaker_state{gen_ai_provider_name="groq",state="closed"} 1`,
		`conclave_breaker_state{gen_ai_provider_name="groq",state="open"} 0`,
		`conclave_rate_limit_use_ratio{gen_ai_provider_name="groq",limit="requests"}`,
		`conclave_arm_mean{category="general",gen_ai_request_model="`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	// Names, help and types follow Prometheus' conventions.
	problems, err := testutil.GatherAndLint(tb.engine.Metrics().Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "conclave_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
	// At most TopArms arms per category are exported.
	if n := strings.Count(text, `conclave_arm_mean{category="general"`); n == 0 || n > 5 {
		t.Errorf("%d general arms exported", n)
	}
}

func TestEveryResponseCarriesItsOverhead(t *testing.T) {
	tb := newTestbed(t, nil)
	raw, _ := json.Marshal(map[string]any{"task": mcq, "category": "general"})
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/route-thompson", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Phases map[string]float64 `json:"phases"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	overhead, err := strconv.ParseFloat(resp.Header.Get(httpapi.OverheadHeader), 64)
	if err != nil || overhead < 0 {
		t.Fatalf("%s: %q", httpapi.OverheadHeader, resp.Header.Get(httpapi.OverheadHeader))
	}
	for _, path := range []string{"/healthz", "/models", "/nowhere", "/v1/models"} {
		resp, _ := tb.do(http.MethodGet, path, nil, nil)
		if _, err := strconv.ParseFloat(resp.Header.Get(httpapi.OverheadHeader), 64); err != nil {
			t.Errorf("GET %s: %s %q", path, httpapi.OverheadHeader, resp.Header.Get(httpapi.OverheadHeader))
		}
	}
}

func TestPrettyAndRankedModels(t *testing.T) {
	tb := newTestbed(t, nil)
	for range 5 {
		tb.route(map[string]any{"task": mcq, "category": "general"})
	}
	_, plain := tb.do(http.MethodGet, "/blueprints", nil, nil)
	_, pretty := tb.do(http.MethodGet, "/blueprints?pretty=1", nil, nil)
	if bytes.Contains(plain, []byte("\n  ")) || !bytes.Contains(pretty, []byte("\n  ")) || !json.Valid(pretty) {
		t.Fatalf("pretty=1 should indent, and only it")
	}
	var ranked struct {
		Models []struct {
			ID   string `json:"id"`
			Arms map[string]struct {
				Mean float64 `json:"mean"`
			} `json:"arms"`
		} `json:"models"`
	}
	tb.do(http.MethodGet, "/models?sort=mean&category=general", nil, &ranked)
	if len(ranked.Models) < 2 {
		t.Fatalf("%d models", len(ranked.Models))
	}
	for i := 1; i < len(ranked.Models); i++ {
		if ranked.Models[i].Arms["general"].Mean > ranked.Models[i-1].Arms["general"].Mean {
			t.Fatalf("not ranked by mean at %d: %v then %v", i, ranked.Models[i-1], ranked.Models[i])
		}
	}
	if ranked.Models[0].Arms["general"].Mean <= 0.5 {
		t.Fatalf("the top arm after rewards has mean %v", ranked.Models[0].Arms["general"].Mean)
	}
	var bad errorResponse
	if resp, raw := tb.do(http.MethodGet, "/models?sort=price", nil, &bad); resp.StatusCode != http.StatusBadRequest || bad.Error.Details[0].Field != "sort" {
		t.Fatalf("sort=price: %d %s", resp.StatusCode, raw)
	}
}
