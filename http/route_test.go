package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"go.uber.org/zap"
)

const mcq = "A warehouse robot must choose a route.\nA) north aisle\nB) south aisle\nC) loading dock\nD) freezer corridor"

func TestEveryStrategyEndToEnd(t *testing.T) {
	tb := newTestbed(t, nil)
	tasks := map[string]string{
		"multiple choice": mcq,
		"free text":       "Propose how the billing service should cache exchange rates, with the trade-offs of each option.",
	}
	for _, strategy := range blueprints.Strategies {
		for kind, task := range tasks {
			t.Run(string(strategy)+"/"+kind, func(t *testing.T) {
				status, resp, bad := tb.route(map[string]any{"task": task, "strategy": strategy, "workers": 5, "min_responses": 3})
				if status != http.StatusOK {
					t.Fatalf("status %d: %+v", status, bad)
				}
				if resp.Consensus.Strategy != string(strategy) || resp.Blueprint.Strategy != string(strategy) || resp.Blueprint.Workers != 5 {
					t.Fatalf("consensus %+v, blueprint %+v", resp.Consensus, resp.Blueprint)
				}
				if resp.Answer == "" || len(resp.Responses) != 5 || resp.Degraded {
					t.Fatalf("answer %q from %d responses (degraded %v)", resp.Answer, len(resp.Responses), resp.Degraded)
				}
				contributed, deciders := 0, 0
				for _, r := range resp.Responses {
					if r.Status != "ok" || r.WeightedScore <= 0 || r.WeightedScore > 1 || r.Worker == "" || r.Provider == "" {
						t.Fatalf("response %+v", r)
					}
					if r.Contributed {
						contributed++
					}
					if r.Decider {
						deciders++
					}
				}
				if contributed == 0 {
					t.Fatal("no response contributed to the answer")
				}
				// A plain majority over short answers is decided by min_responses of them; every other
				// decision lets every answer weigh in.
				wantDeciders := 0
				if strategy == blueprints.Majority && kind == "multiple choice" {
					wantDeciders = 3
				}
				if deciders != wantDeciders {
					t.Fatalf("%d answers decided, want %d", deciders, wantDeciders)
				}
				switch strategy {
				case blueprints.Majority:
					if resp.Consensus.Arbiter != "" {
						t.Fatalf("majority asked an arbiter: %q", resp.Consensus.Arbiter)
					}
				default: // rotating, weighted and pairwise ask an arbiter model, in turn
					if resp.Consensus.Arbiter == "" || resp.Consensus.Arbiter == "local" || resp.Consensus.ArbiterError != "" {
						t.Fatalf("%s arbiter %q (%s): the arbiter model should have judged", strategy, resp.Consensus.Arbiter, resp.Consensus.ArbiterError)
					}
				}
				for _, phase := range []string{"classify_ms", "select_ms", "assign_ms", "dispatch_ms", "collect_ms", "consensus_ms", "feedback_ms"} {
					if _, ok := resp.Phases[phase]; !ok {
						t.Fatalf("phase %s missing from %v", phase, resp.Phases)
					}
				}
				rec := tb.record(resp.RequestID)
				if rec["request_id"] != resp.RequestID || rec["answer"] != resp.Answer || rec["status_code"] != float64(200) {
					t.Fatalf("record does not match the answer: %v", rec)
				}
				// Free text without an arbiter model is chosen by learned quality, which judges nobody.
				want := 5
				if strategy == blueprints.Majority && kind == "free text" {
					want = 0
				}
				if ups, _ := rec["bandit_updates"].([]any); len(ups) != want {
					t.Fatalf("record has %d bandit updates, want %d", len(ups), want)
				}
				recorded := 0
				for _, r := range rec["results"].([]any) {
					if r.(map[string]any)["decider"] == true {
						recorded++
					}
				}
				if recorded != wantDeciders {
					t.Fatalf("the record has %d deciders, want %d", recorded, wantDeciders)
				}
				// Tokens and cost: the request's are the sum of its calls', the arbiter's included.
				var sum money.USD
				tokens := 0
				for _, r := range resp.Responses {
					sum += r.Cost
					tokens += r.Usage.InputTokens
				}
				decision := rec["decision"].(map[string]any)
				sum += nanos(t, decision, "arbiter_cost_nanos")
				if resp.Usage.InputTokens < tokens || tokens == 0 || resp.Cost != sum || nanos(t, rec, "cost_nanos") != resp.Cost {
					t.Fatalf("usage %+v cost %s, want the sum %s of the calls' (%d input tokens)", resp.Usage, resp.Cost, sum, tokens)
				}
			})
		}
	}
}

func TestRotatingArbiterRotatesAcrossRequests(t *testing.T) {
	tb := newTestbed(t, nil)
	models := []string{"claude-3-5-sonnet-20241022", "gemini-1.5-pro-002", "deepseek-chat"}
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		status, resp, bad := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "strategy": "rotating"})
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, bad)
		}
		seen[resp.Consensus.Arbiter]++
	}
	for _, m := range models {
		if seen[m] != 2 {
			t.Fatalf("arbiters over 6 requests %v: each of 3 models should judge twice", seen)
		}
	}
}

func TestClassificationPicksTheBlueprint(t *testing.T) {
	tb := newTestbed(t, nil)
	status, resp, _ := tb.route(map[string]any{"task": "Audit this login handler for SQL injection and XSS vulnerabilities: db.Query(\"SELECT * FROM users WHERE name='\" + name + \"'\")"})
	if status != http.StatusOK || resp.Category != "security_audit" || resp.Blueprint.Name != "security_audit" || resp.Blueprint.Workers != 6 ||
		resp.Blueprint.Strategy != "weighted" || resp.Blueprint.MinResponses != 4 || resp.Confidence <= 0 || resp.Confidence > 1 {
		t.Fatalf("status %d, category %s (%.2f), blueprint %+v", status, resp.Category, resp.Confidence, resp.Blueprint)
	}
}

func TestMalformedRequests(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.MaxBodyBytes = 4096 })
	tests := []struct {
		desc   string
		body   string
		status int
		code   string
		fields []string
	}{
		{"not JSON", `{"task": `, 400, "malformed_request", []string{"body"}},
		{"an array", `["task"]`, 400, "malformed_request", []string{"body"}},
		{"two objects", `{"task":"a"} {"task":"b"}`, 400, "malformed_request", []string{"body"}},
		{"empty body", ``, 400, "malformed_request", []string{"body"}},
		{"task missing", `{}`, 400, "malformed_request", []string{"task"}},
		{"every problem at once", `{"task": 7, "workers": 0, "min_responses": 2.5, "timeout": -1, "strategy": "vibes", "quorum_grace_seconds": "soon", "metadata": [1], "colour": "red"}`,
			400, "malformed_request", []string{"colour", "task", "strategy", "timeout", "quorum_grace_seconds", "workers", "min_responses", "metadata"}},
		{"an unknown quorum and a tau out of range", `{"task": "x", "quorum": "sometimes", "quorum_tau": 1.5}`, 400, "malformed_request", []string{"quorum", "quorum_tau"}},
		{"min_responses above workers", `{"task": "x", "workers": 2, "min_responses": 3}`, 400, "malformed_request", []string{"min_responses"}},
		{"min_responses above the blueprint's workers", `{"task": "x", "category": "documentation", "min_responses": 4}`, 400, "malformed_request", []string{"min_responses"}},
		{"min_responses above the models", `{"task": "x", "models": ["deepseek-chat"], "min_responses": 2}`, 400, "malformed_request", []string{"min_responses"}},
		{"duplicate models", `{"task": "x", "models": ["deepseek-chat", "deepseek-chat"]}`, 400, "malformed_request", []string{"models[1]"}},
		{"wrong types of models", `{"task": "x", "models": "deepseek-chat"}`, 400, "malformed_request", []string{"models"}},
		{"unknown blueprint", `{"task": "x", "category": "astrology"}`, 404, "not_found", []string{"category"}},
		{"unknown model", `{"task": "x", "models": ["deepseek-chat", "gpt-17"]}`, 404, "not_found", []string{"models[1]"}},
		{"malformed beats unknown", `{"task": "", "category": "astrology"}`, 400, "malformed_request", []string{"task", "category"}},
		{"too large", `{"task": "` + strings.Repeat("x", 5000) + `"}`, 413, "request_too_large", nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var bad errorResponse
			resp, raw := tb.do(http.MethodPost, "/route-thompson", tt.body, &bad)
			if resp.StatusCode != tt.status || bad.Error.Code != tt.code || bad.Error.Message == "" {
				t.Fatalf("got %d %s", resp.StatusCode, raw)
			}
			var fields []string
			for _, d := range bad.Error.Details {
				fields = append(fields, d.Field)
				if d.Message == "" {
					t.Fatalf("problem without a message: %s", raw)
				}
			}
			if fmt.Sprint(fields) != fmt.Sprint(tt.fields) && !(tt.fields == nil && len(fields) == 0) {
				t.Fatalf("fields %v, want %v: %s", fields, tt.fields, raw)
			}
			if resp.Header.Get("X-Request-ID") == "" {
				t.Fatal("no X-Request-ID on an error")
			}
		})
	}
}

func TestRoutingErrors(t *testing.T) {
	tb := newTestbed(t, nil)
	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/route-thompson", 405, "method_not_allowed"},
		{http.MethodGet, "/nowhere", 404, "not_found"},
		{http.MethodGet, "/executions/00000000-0000-0000-0000-000000000000", 404, "not_found"},
		{http.MethodGet, "/models?category=astrology", 404, "not_found"},
	}
	for _, tt := range tests {
		var bad errorResponse
		resp, raw := tb.do(tt.method, tt.path, nil, &bad)
		if resp.StatusCode != tt.status || bad.Error.Code != tt.code {
			t.Errorf("%s %s: %d %s", tt.method, tt.path, resp.StatusCode, raw)
		}
	}
}

func TestReadOnlyViews(t *testing.T) {
	tb := newTestbed(t, nil)
	status, _, _ := tb.route(map[string]any{"task": mcq, "category": "general", "models": []string{"deepseek-chat"}})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	var models struct {
		Models []struct {
			ID   string `json:"id"`
			Arms map[string]struct {
				Alpha, Beta, Mean float64
			} `json:"arms"`
		} `json:"models"`
	}
	// The reward reaches its arm's actor after the answer: the listing shows it soon after.
	rewarded := func() bool {
		tb.do(http.MethodGet, "/models", nil, &models)
		if len(models.Models) < 200 {
			t.Fatalf("%d models", len(models.Models))
		}
		for _, m := range models.Models {
			if a, ok := m.Arms["general"]; ok && m.ID == "deepseek-chat" {
				return a.Alpha+a.Beta == 3 && a.Mean == a.Alpha/(a.Alpha+a.Beta)
			}
		}
		return false
	}
	waitFor(t, rewarded)
	var byCategory struct {
		Models []struct {
			Arms map[string]any `json:"arms"`
		} `json:"models"`
	}
	tb.do(http.MethodGet, "/models?category=code_review", nil, &byCategory)
	for _, m := range byCategory.Models {
		if _, ok := m.Arms["code_review"]; !ok || len(m.Arms) != 1 {
			t.Fatalf("category view arms %v", m.Arms)
		}
	}
	var provs struct {
		Providers []struct {
			Name    string `json:"name"`
			Breaker struct {
				State string `json:"state"`
			} `json:"breaker"`
			RateLimitUse float64 `json:"rate_limit_use"`
		} `json:"providers"`
	}
	tb.do(http.MethodGet, "/providers", nil, &provs)
	if len(provs.Providers) != 6 || provs.Providers[0].Breaker.State != "closed" {
		t.Fatalf("providers %+v", provs)
	}
	var workers struct {
		Workers []struct {
			Name string `json:"name"`
			Tier int    `json:"tier"`
		} `json:"workers"`
	}
	tb.do(http.MethodGet, "/workers", nil, &workers)
	if len(workers.Workers) != 8 || workers.Workers[0].Tier != 1 {
		t.Fatalf("workers %+v", workers)
	}
	var bps struct {
		Source     string `json:"source"`
		Blueprints []struct {
			Name string `json:"name"`
		} `json:"blueprints"`
	}
	tb.do(http.MethodGet, "/blueprints", nil, &bps)
	if len(bps.Blueprints) != 22 || bps.Source != "embedded" {
		t.Fatalf("blueprints %+v", bps)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, raw := tb.do(http.MethodGet, path, nil, nil); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
		}
	}
}

func TestBearerToken(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.APIToken = secret.String("s3cr3t-token-0123456") })
	tests := []struct {
		desc, path, header string
		status             int
	}{
		{"no token", "/workers", "", 401},
		{"wrong token", "/workers", "Bearer nope", 401},
		{"wrong scheme", "/workers", "Basic s3cr3t-token-0123456", 401},
		{"right token", "/workers", "Bearer s3cr3t-token-0123456", 200},
		{"the scheme in lower case", "/workers", "bearer s3cr3t-token-0123456", 200},
		{"the scheme in upper case", "/workers", "BEARER s3cr3t-token-0123456", 200},
		{"the token in another case", "/workers", "Bearer S3CR3T-TOKEN-0123456", 401},
		{"health needs none", "/healthz", "", 200},
		{"readiness needs none: it tells nothing secret", "/readyz", "", 200},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodGet, tb.srv.URL+tt.path, nil)
		if tt.header != "" {
			req.Header.Set("Authorization", tt.header)
		}
		began := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s: %d, want %d", tt.desc, resp.StatusCode, tt.status)
		}
		// A refusal waits AuthFailureDelay on purpose: this bounds a sleep, not a speed.
		if tt.status == http.StatusUnauthorized && time.Since(began) < 200*time.Millisecond {
			t.Errorf("%s: refused without the delay", tt.desc)
		}
	}
	if n := tb.logs.FilterField(zap.String("event", "auth_failed")).Len(); n != 1 {
		t.Fatalf("%d auth_failed lines for 4 failures: the first is logged, then one in a hundred", n)
	}
	// The token never shows up in logs.
	for _, e := range tb.logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "s3cr3t-token-0123456") {
			t.Fatalf("token logged: %v", e)
		}
	}
}

func TestEveryDecisionIsLoggedWithTheRequestID(t *testing.T) {
	tb := newTestbed(t, nil)
	status, resp, _ := tb.route(map[string]any{"task": mcq, "category": "general", "strategy": "rotating"})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	events := map[string]int{}
	var calls []any
	for _, e := range tb.logs.All() {
		fields := e.ContextMap()
		if fields["request_id"] == resp.RequestID {
			events[fmt.Sprint(fields["event"])]++
			if fields["event"] == "collect_done" {
				calls, _ = fields["calls"].([]any)
			}
		}
	}
	// collect_done summarises every call; an answer's own reply line is a debug line.
	if len(calls) != resp.Blueprint.Workers {
		t.Errorf("collect_done lists %d calls for %d workers: %v", len(calls), resp.Blueprint.Workers, calls)
	}
	for _, name := range []string{"request_received", "classification", "blueprint", "selection", "assignment", "dispatch", "reply",
		"collect_done", "arbiter", "consensus", "bandit_updates", "request_completed"} {
		if events[name] == 0 {
			t.Errorf("no %s event for the request (got %v)", name, events)
		}
	}
	if events["dispatch"] != resp.Blueprint.Workers || events["reply"] != resp.Blueprint.Workers {
		t.Errorf("%d dispatch and %d reply events for %d workers", events["dispatch"], events["reply"], resp.Blueprint.Workers)
	}
}

// TestAtInfoARequestWritesOneSummaryLine: an operator's log holds one line per request, which says
// what the request was, which models answered, how much they agreed, where its time went and its cost.
func TestAtInfoARequestWritesOneSummaryLine(t *testing.T) {
	tb := newTestbed(t, nil)
	status, resp, _ := tb.route(map[string]any{"task": mcq, "category": "general", "workers": 6, "min_responses": 6, "strategy": "majority"})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	var lines []map[string]any
	for _, e := range tb.logs.All() {
		if fields := e.ContextMap(); fields["request_id"] == resp.RequestID && e.Level >= zap.InfoLevel {
			lines = append(lines, fields)
		}
	}
	if len(lines) != 1 || lines[0]["event"] != "request_completed" {
		t.Fatalf("%d lines at info for the request, want its summary alone: %v", len(lines), lines)
	}
	line := lines[0]
	for _, field := range []string{"status", "category", "blueprint", "strategy", "models", "calls", "answered", "chosen", "agreement",
		"retries", "classify_ms", "select_ms", "collect_ms", "consensus_ms", "total_ms", "cost", "input_tokens", "output_tokens"} {
		if _, ok := line[field]; !ok {
			t.Errorf("the summary lacks %s: %v", field, line)
		}
	}
	if asked, _ := line["models"].([]any); len(asked) != 6 || fmt.Sprint(line["answered"]) != "6" || line["strategy"] != "majority" {
		t.Errorf("the summary says models %v, answered %v, strategy %v", line["models"], line["answered"], line["strategy"])
	}
	if a, _ := line["agreement"].(float64); a <= 0 || a > 1 {
		t.Errorf("agreement %v is not a share of the answers", line["agreement"])
	}
}

func TestFeedbackAPI(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.Reward = "external" })
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash"}
	status, resp, _ := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "strategy": "majority"})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if rec := tb.record(resp.RequestID); len(rec["bandit_updates"].([]any)) != 0 {
		t.Fatalf("external reward mode rewarded answers by itself: %v", rec["bandit_updates"])
	}
	truth := strings.ToLower(providers.SimTruth(mcq))
	var fb struct {
		Updates []struct {
			Model  string  `json:"model"`
			Reward float64 `json:"reward"`
		} `json:"updates"`
	}
	r, raw := tb.do(http.MethodPost, "/executions/"+resp.RequestID+"/feedback", map[string]any{"answer": "(" + strings.ToUpper(truth) + ")"}, &fb)
	if r.StatusCode != http.StatusOK || len(fb.Updates) != 3 {
		t.Fatalf("feedback: %d %s", r.StatusCode, raw)
	}
	texts := map[string]string{}
	for _, r := range tb.record(resp.RequestID)["results"].([]any) {
		res := r.(map[string]any)
		texts[res["model"].(string)] = res["text"].(string)
	}
	for _, u := range fb.Updates {
		text, ok := texts[u.Model]
		if !ok {
			t.Fatalf("update for a model that did not answer: %+v", u)
		}
		if right := consensus.Normalize(text) == truth; right != (u.Reward == 1) {
			t.Fatalf("%s answered %q (truth %q) and got reward %v", u.Model, text, truth, u.Reward)
		}
	}
	waitFor(t, func() bool {
		total := 0.0
		for _, m := range models {
			a := tb.engine.Arms().Arm("general", m)
			total += a.Alpha + a.Beta
		}
		return total == 9
	})
	rec := tb.record(resp.RequestID)
	if got := rec["feedback"].([]any); len(got) != 3 {
		t.Fatalf("feedback not recorded: %v", rec["feedback"])
	}
	tests := []struct {
		desc, path string
		body       any
		status     int
	}{
		{"twice", "/executions/" + resp.RequestID + "/feedback", map[string]any{"answer": "A"}, 409},
		{"unknown execution", "/executions/00000000-0000-0000-0000-000000000000/feedback", map[string]any{"answer": "A"}, 404},
		{"both answer and scores", "/executions/" + resp.RequestID + "/feedback", map[string]any{"answer": "A", "scores": map[string]float64{"x": 1}}, 400},
		{"neither", "/executions/" + resp.RequestID + "/feedback", map[string]any{}, 400},
		{"not JSON", "/executions/" + resp.RequestID + "/feedback", "{", 400},
	}
	for _, tt := range tests {
		var bad errorResponse
		r, raw := tb.do(http.MethodPost, tt.path, tt.body, &bad)
		if r.StatusCode != tt.status || bad.Error.Code == "" {
			t.Errorf("%s: %d %s", tt.desc, r.StatusCode, raw)
		}
	}
	// Scores for a model that did not answer are refused.
	_, second, _ := tb.route(map[string]any{"task": mcq, "category": "general", "models": models, "strategy": "majority"})
	var bad errorResponse
	r, raw = tb.do(http.MethodPost, "/executions/"+second.RequestID+"/feedback", map[string]any{"scores": map[string]float64{"gpt-oss-120b": 1}}, &bad)
	if r.StatusCode != 400 {
		t.Fatalf("scores for a stranger: %d %s", r.StatusCode, raw)
	}
	r, raw = tb.do(http.MethodPost, "/executions/"+second.RequestID+"/feedback", map[string]any{"scores": map[string]float64{"deepseek-chat": 0.25}}, &fb)
	if r.StatusCode != 200 || len(fb.Updates) != 1 || fb.Updates[0].Reward != 0.25 {
		t.Fatalf("scores: %d %s", r.StatusCode, raw)
	}
}

// TestTruthLetsAnchoredModelsDecide: where votes weigh by estimated accuracy, the best models decide only
// once callers' truth anchors their estimates (ten labelled answers each); before, every answer weighs in.
func TestTruthLetsAnchoredModelsDecide(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.Reward = "reliability" })
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash", "claude-3-haiku-20240307"}
	body := map[string]any{"task": mcq, "category": "general", "models": models, "workers": len(models), "min_responses": 3, "strategy": "majority"}
	truth := "(" + strings.ToUpper(providers.SimTruth(mcq)) + ")"
	deciders := func(resp routeResponse) (n int) {
		for _, r := range resp.Responses {
			if r.Decider {
				n++
			}
		}
		return n
	}
	for i := 0; ; i++ {
		status, resp, bad := tb.route(body)
		if status != http.StatusOK || len(resp.Responses) != len(models) {
			t.Fatalf("request %d: %d %+v", i, status, bad)
		}
		n := deciders(resp)
		switch {
		case n == 3:
			if i < 10 {
				t.Fatalf("request %d was decided by its best models after %d truths, want at least 10", i, i)
			}
			t.Logf("decided by the anchored models after %d truths", i)
			return
		case n != 0:
			t.Fatalf("request %d: %d deciders, want none or 3", i, n)
		case i >= 30:
			t.Fatalf("no request decided by anchored models after %d truths", i)
		}
		if r, raw := tb.do(http.MethodPost, "/executions/"+resp.RequestID+"/feedback", map[string]any{"answer": truth}, nil); r.StatusCode != http.StatusOK {
			t.Fatalf("feedback %d: %d %s", i, r.StatusCode, raw)
		}
	}
}
