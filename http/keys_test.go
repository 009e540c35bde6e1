// The fuzzing build (make fuzz, -tags fuzz) leaves this file out: it calls Conclave with openai-go, as
// openai_test.go.

//go:build !fuzz

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"go.uber.org/zap/zapcore"
)

const adminToken = "admin-token-0123456789"

// keyEmbedModel is an embeddings model the tests add to the catalog.
const keyEmbedModel = "text-embedding-3-small"

func withAdmin(c *config.Config) { c.APIToken = secret.String(adminToken) }

type createdKey struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Spend  struct {
		SpendUSD money.USD `json:"spend_usd"`
		TotalUSD money.USD `json:"total_usd"`
	} `json:"spend"`
	Usage struct {
		Requests int `json:"requests"`
		InFlight int `json:"in_flight"`
	} `json:"usage"`
	LastUsedAt *string  `json:"last_used_at"`
	Models     []string `json:"models"`
}

// sharedControllers starts two controllers, ctl-a and ctl-b, with the admin token, sharing a fresh
// PostgreSQL and a Redis, each with a spool of its own.
func sharedControllers(t *testing.T) (a, b *testbed, db *database) {
	t.Helper()
	db = newDatabase(t)
	_, prefix := redistest.New(t)
	shared := func(node string) func(*config.Config) {
		return func(c *config.Config) {
			withAdmin(c)
			sharing(prefix, node)(c)
			withDatabase(db.url, filepath.Join(t.TempDir(), "spool-"+node))(c)
		}
	}
	return newTestbed(t, shared("ctl-a")), newTestbed(t, shared("ctl-b")), db
}

// createKey makes a key through the admin API.
func (tb *testbed) createKey(body map[string]any) createdKey {
	tb.t.Helper()
	var k createdKey
	resp, raw := tb.do(http.MethodPost, "/admin/keys", body, &k)
	if resp.StatusCode != http.StatusCreated {
		tb.t.Fatalf("POST /admin/keys: %d %s", resp.StatusCode, raw)
	}
	return k
}

// as sends a request with a key (or any credential) instead of the testbed's token.
func (tb *testbed) as(credential, method, path string, body any) (*http.Response, []byte) {
	tb.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, tb.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+credential)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// modelCalls is how many model calls the server has sent, by its metrics (a call refused before it
// was sent counts as not_sent).
func (tb *testbed) modelCalls() float64 {
	tb.t.Helper()
	families, err := tb.engine.Metrics().Registry().Gather()
	if err != nil {
		tb.t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "conclave_model_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			sent := true
			for _, l := range m.GetLabel() {
				sent = sent && !(l.GetName() == "outcome" && l.GetValue() == "not_sent")
			}
			if sent {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// errorCode and errorMessage read an error body's code and message.
func errorCode(t *testing.T, raw []byte) string { t.Helper(); return errorOf(t, raw).Code }

func errorMessage(t *testing.T, raw []byte) string { t.Helper(); return errorOf(t, raw).Message }

func errorOf(t *testing.T, raw []byte) (e struct{ Code, Message string }) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("not an error body: %s", raw)
	}
	return body.Error
}

func TestTheAdminAPIKeepsKeys(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	k := tb.createKey(map[string]any{"name": "team-a", "budget_usd": 5, "budget_period": "7d", "rpm": 60, "models": []string{"openai/*"},
		"metadata": map[string]any{"team": "a"}})
	if !strings.HasPrefix(k.Key, "ck-") || len(k.Key) != 46 || !strings.HasPrefix(k.ID, "key_") || k.Status != "active" {
		t.Fatalf("created %+v", k)
	}
	var shown map[string]any
	if resp, raw := tb.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown); resp.StatusCode != http.StatusOK || strings.Contains(string(raw), k.Key) {
		t.Fatalf("GET the key: %d %s", resp.StatusCode, raw)
	}
	if shown["budget_usd"] != 5.0 || shown["budget_period"] != "7d" || shown["rpm"] != 60.0 || shown["metadata"].(map[string]any)["team"] != "a" {
		t.Fatalf("shown %v", shown)
	}
	var patched map[string]any
	if resp, raw := tb.do(http.MethodPatch, "/admin/keys/"+k.ID, map[string]any{"rpm": 0, "budget_usd": nil, "name": "team-b"}, &patched); resp.StatusCode != http.StatusOK ||
		patched["rpm"] != 0.0 || patched["budget_usd"] != nil || patched["name"] != "team-b" || patched["budget_period"] != "7d" {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, raw)
	}
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	if resp, raw := tb.do(http.MethodGet, "/admin/keys", nil, &list); resp.StatusCode != http.StatusOK || len(list.Keys) != 1 || strings.Contains(string(raw), k.Key) {
		t.Fatalf("list: %d %s", resp.StatusCode, raw)
	}
	resp, raw := tb.do(http.MethodPost, "/admin/keys", map[string]any{"budget_usd": -1, "budget_period": "2d", "models": "openai/*", "key": "ck-mine"}, nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad key: %d %s", resp.StatusCode, raw)
	}
	for _, field := range []string{"name", "budget_usd", "budget_period", "models", "key"} {
		if !strings.Contains(string(raw), `"field":"`+field+`"`) {
			t.Errorf("the refusal does not name %s: %s", field, raw)
		}
	}
	if resp, _ := tb.do(http.MethodGet, "/admin/keys/key_unknown", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown key: %d", resp.StatusCode)
	}
	// A key is no admin.
	if resp, raw := tb.as(k.Key, http.MethodGet, "/admin/keys", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a key listing keys: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := tb.as(k.Key, http.MethodGet, "/executions", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a key listing every record: %d", resp.StatusCode)
	}
	var revoked map[string]any
	if resp, raw := tb.do(http.MethodDelete, "/admin/keys/"+k.ID, nil, &revoked); resp.StatusCode != http.StatusOK || revoked["status"] != "revoked" {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq}); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(string(raw), "revoked") {
		t.Errorf("a revoked key: %d %s", resp.StatusCode, raw)
	}
	// A key cannot be created already expired; one that expires later can be made to expire at once.
	if resp, raw := tb.do(http.MethodPost, "/admin/keys", map[string]any{"name": "old", "expires_at": "2020-01-01T00:00:00Z"}, nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(raw), "expires_at") {
		t.Errorf("a key created expired: %d %s", resp.StatusCode, raw)
	}
	expired := tb.createKey(map[string]any{"name": "old", "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if resp, raw := tb.do(http.MethodPatch, "/admin/keys/"+expired.ID, map[string]any{"expires_at": "2020-01-01T00:00:00Z"}, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH expires_at: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := tb.as(expired.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq}); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(string(raw), "expired") {
		t.Errorf("an expired key: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := tb.as("ck-"+strings.Repeat("x", 43), http.MethodPost, "/route-thompson", map[string]any{"task": mcq}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an unknown key: %d", resp.StatusCode)
	}
}

// A key's requests per minute: the third request in the minute is refused with 429 and Retry-After,
// in OpenAI's shape on /v1, which OpenAI's own client reads as a typed error.
func TestAKeysRequestsPerMinute(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	k := tb.createKey(map[string]any{"name": "cron", "rpm": 2})
	for i := range 2 {
		if resp, raw := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "workers": 1, "min_responses": 1}); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, raw)
		}
	}
	resp, raw := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq})
	if resp.StatusCode != http.StatusTooManyRequests || errorCode(t, raw) != "rate_limit_exceeded" {
		t.Fatalf("the third request: %d %s", resp.StatusCode, raw)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	client := sdkClient(tb, k.Key)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "conclave/auto",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "rate_limit_error" {
		t.Fatalf("the SDK's fourth request: %v", err)
	}
	var shown createdKey
	tb.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown)
	if shown.Usage.Requests != 2 || shown.Usage.InFlight != 0 || shown.LastUsedAt == nil {
		t.Errorf("the key's use: %+v", shown)
	}
}

// budgetModel is the model the budget tests call directly: one price, so that each call holds the
// same worst case.
const budgetModel = "openai/gpt-4o-mini"

// directCall makes a direct call of budgetModel with a key: its status, answer and cost.
func directCall(tb *testbed, secret string) (int, string, money.USD, []byte) {
	tb.t.Helper()
	resp, raw := tb.as(secret, http.MethodPost, "/v1/chat/completions", map[string]any{"model": budgetModel, "max_tokens": 200,
		"messages": []map[string]any{{"role": "user", "content": mcq}}})
	var ok struct {
		ID       string `json:"id"`
		Conclave struct {
			CostUSD money.USD `json:"cost_usd"`
		} `json:"conclave"`
	}
	if resp.StatusCode == http.StatusOK && json.Unmarshal(raw, &ok) != nil {
		tb.t.Fatalf("an answer that does not read: %s", raw)
	}
	return resp.StatusCode, ok.ID, ok.Conclave.CostUSD, raw
}

// A budget with room for a few calls: each call holds its worst case against the budget before it is
// sent, so requests go through until the budget has no room for one more call's worst case; the next
// is refused with insufficient_quota / budget_exceeded before any model is called, without a
// Retry-After (x-should-retry: false, the reset in the body), and the key never spends past its budget.
func TestABudgetStopsTheNextRequest(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	budget := money.Dollar / 2000
	k := tb.createKey(map[string]any{"name": "tight", "budget_usd": budget, "budget_period": "1d"})
	var spent money.USD
	answered := 0
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatalf("%d requests answered: the budget of %s never stopped one (spent %s)", i, budget, spent)
		}
		calls := tb.modelCalls()
		status, id, cost, raw := directCall(tb, k.Key)
		if status == http.StatusTooManyRequests {
			if errorCode(t, raw) != "budget_exceeded" || !strings.Contains(string(raw), "starts again at") {
				t.Fatalf("the refusal: %s", raw)
			}
			if after := tb.modelCalls(); after != calls {
				t.Fatalf("a refused request sent %v calls", after-calls)
			}
			break
		}
		if status != http.StatusOK || cost <= 0 {
			t.Fatalf("request %d: %d %s", i, status, raw)
		}
		if rec := tb.record(id); rec["key_id"] != k.ID || nanos(t, rec, "cost_nanos") != cost {
			t.Fatalf("request %d's record: key %v, cost %v nano-dollars, answered %s", i, rec["key_id"], rec["cost_nanos"], cost)
		}
		spent += cost
		answered++
	}
	if answered == 0 || spent > budget {
		t.Fatalf("%d requests answered for %s, budget %s", answered, spent, budget)
	}
	// The official SDK at its default retries hears it at once: no Retry-After to wait out.
	calls := tb.modelCalls()
	client := openai.NewClient(oaoption.WithBaseURL(tb.srv.URL+"/v1/"), oaoption.WithAPIKey(k.Key))
	began := time.Now()
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: budgetModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(mcq)}, MaxTokens: openai.Int(200)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "budget_exceeded" || apiErr.Type != "insufficient_quota" {
		t.Fatalf("the SDK's request: %v", err)
	}
	if h := apiErr.Response.Header; h.Get("Retry-After") != "" || h.Get("X-Should-Retry") != "false" {
		t.Errorf("the refusal's headers: %v", h)
	}
	if after := tb.modelCalls(); after != calls {
		t.Fatalf("a refused request called %v models", after-calls)
	}
	t.Logf("the SDK heard the refusal after %v", time.Since(began))
	var shown createdKey
	tb.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown)
	if shown.Spend.SpendUSD != spent {
		t.Errorf("the key's spend %s, its requests' costs %s", shown.Spend.SpendUSD, spent)
	}
	var spend struct {
		TotalUSD money.USD `json:"total_usd"`
		Groups   []struct {
			Model    string    `json:"model"`
			Day      string    `json:"day"`
			Requests int       `json:"requests"`
			CostUSD  money.USD `json:"cost_usd"`
		} `json:"groups"`
	}
	waitFor(t, func() bool { // the records reach the store in the recorder's next batch
		resp, raw := tb.do(http.MethodGet, "/admin/keys/"+k.ID+"/spend?group_by=model", nil, &spend)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("spend by model: %d %s", resp.StatusCode, raw)
		}
		return len(spend.Groups) == 1 && spend.TotalUSD == spent
	})
	if resp, raw := tb.do(http.MethodGet, "/admin/keys/"+k.ID+"/spend?group_by=day", nil, &spend); resp.StatusCode != http.StatusOK ||
		len(spend.Groups) != 1 || spend.Groups[0].Requests < answered || spend.Groups[0].Day == "" || spend.Groups[0].CostUSD != spent {
		t.Fatalf("spend by day: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := tb.do(http.MethodGet, "/admin/keys/"+k.ID+"/spend?group_by=week&color=red", nil, nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(raw), "group_by") || !strings.Contains(string(raw), "color") {
		t.Errorf("a bad spend query: %d %s", resp.StatusCode, raw)
	}
}

// A key limited to openai/* may not name another model (403 before anything is selected), and its
// conclave/auto chooses among openai's models only.
func TestAKeysModels(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	k := tb.createKey(map[string]any{"name": "openai-only", "models": []string{"openai/*"}})
	calls := tb.modelCalls()
	resp, raw := tb.as(k.Key, http.MethodPost, "/v1/chat/completions", map[string]any{"model": groqModels[0],
		"messages": []map[string]any{{"role": "user", "content": mcq}}})
	if resp.StatusCode != http.StatusForbidden || errorCode(t, raw) != "model_not_allowed" || !strings.Contains(string(raw), groqModels[0]) {
		t.Fatalf("another provider's model: %d %s", resp.StatusCode, raw)
	}
	if tb.modelCalls() != calls {
		t.Fatal("a refused model was called")
	}
	resp, raw = tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "workers": 4, "min_responses": 2})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("conclave/auto: %d %s", resp.StatusCode, raw)
	}
	var routed struct {
		RequestID string `json:"request_id"`
	}
	json.Unmarshal(raw, &routed)
	rec := tb.record(routed.RequestID)
	results, _ := rec["results"].([]any)
	if len(results) == 0 {
		t.Fatalf("no calls in %v", rec)
	}
	for _, r := range results {
		if m := r.(map[string]any)["model"].(string); !strings.HasPrefix(m, "openai/") {
			t.Errorf("a key limited to openai/* had %s asked", m)
		}
	}
	// The key reads its own record, not another's.
	if resp, _ := tb.as(k.Key, http.MethodGet, "/executions/"+routed.RequestID, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("its own record: %d", resp.StatusCode)
	}
	_, theirs, _ := tb.route(map[string]any{"task": mcq, "workers": 1, "min_responses": 1})
	if resp, _ := tb.as(k.Key, http.MethodGet, "/executions/"+theirs.RequestID, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the admin's record: %d", resp.StatusCode)
	}
}

// A key's secret is shown once: it is in no log line, record or metric.
func TestASecretIsShownOnce(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	k := tb.createKey(map[string]any{"name": "quiet", "rpm": 1})
	resp, raw := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "workers": 2, "min_responses": 1})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq}) // refused: over its rpm
	tb.as(k.Key+"x", http.MethodPost, "/route-thompson", map[string]any{"task": mcq})
	var routed struct {
		RequestID string `json:"request_id"`
	}
	json.Unmarshal(raw, &routed)
	_, record := tb.do(http.MethodGet, "/executions/"+routed.RequestID, nil, nil)
	_, metrics := tb.do(http.MethodGet, "/metrics", nil, nil)
	_, list := tb.do(http.MethodGet, "/admin/keys", nil, nil)
	secretPart := k.Key[3:]
	for what, text := range map[string]string{"record": string(record), "metrics": string(metrics), "key list": string(list)} {
		if strings.Contains(text, secretPart) {
			t.Errorf("the secret is in the %s", what)
		}
	}
	if !strings.Contains(string(metrics), `conclave_key_requests_total{code="200",key="quiet"} 1`) ||
		!strings.Contains(string(metrics), `conclave_key_requests_total{code="429",key="quiet"} 1`) || !strings.Contains(string(metrics), `conclave_key_spend_nanodollars_total{key="quiet"}`) {
		t.Errorf("the key's metrics are missing: %s", grepLines(string(metrics), "conclave_key_"))
	}
	for _, e := range tb.logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += " " + f.String
			if f.Type == zapcore.ErrorType {
				line += " " + f.Interface.(error).Error()
			}
		}
		if strings.Contains(line, secretPart) {
			t.Fatalf("a log line holds the secret: %s", line)
		}
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Two controllers sharing PostgreSQL and Redis charge one budget and count one rpm window, and a key
// revoked on one is refused on the other at once.
func TestControllersShareKeysBudgetsAndLimits(t *testing.T) {
	a, b, _ := sharedControllers(t)
	limited := a.createKey(map[string]any{"name": "shared-rpm", "rpm": 3})
	for i, tb := range []*testbed{a, b, a} {
		if resp, raw := tb.as(limited.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "workers": 1, "min_responses": 1}); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, raw)
		}
	}
	if resp, raw := b.as(limited.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq}); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the fourth request, on b: %d %s", resp.StatusCode, raw)
	}

	// One budget, two controllers: requests on either go through until the shared account has no room
	// for one more call, and then both refuse.
	limit := money.Dollar / 2000
	budget := b.createKey(map[string]any{"name": "shared-budget", "budget_usd": limit})
	answered := 0
	for i := 0; ; i++ {
		tb, other := []*testbed{a, b}[i%2], []*testbed{a, b}[(i+1)%2]
		status, _, _, raw := directCall(tb, budget.Key)
		if status == http.StatusTooManyRequests && errorCode(t, raw) == "budget_exceeded" {
			if status, _, _, raw := directCall(other, budget.Key); status != http.StatusTooManyRequests {
				t.Fatalf("the other controller, after the budget: %d %s", status, raw)
			}
			break
		}
		if status != http.StatusOK || i == 200 {
			t.Fatalf("request %d: %d %s", i, status, raw)
		}
		answered++
	}
	var shown createdKey
	if a.do(http.MethodGet, "/admin/keys/"+budget.ID, nil, &shown); answered < 2 || shown.Spend.SpendUSD > limit || shown.Spend.SpendUSD == 0 {
		t.Fatalf("%d answered, spent %s of %s", answered, shown.Spend.SpendUSD, limit)
	}

	if resp, raw := b.do(http.MethodDelete, "/admin/keys/"+limited.ID, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke on b: %d %s", resp.StatusCode, raw)
	}
	// The revocation reaches a through Redis: within 2 s, its next request is refused.
	revoked := time.Now()
	for {
		resp, raw := a.as(limited.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq})
		if resp.StatusCode == http.StatusUnauthorized {
			t.Logf("the revocation reached a after %v", time.Since(revoked).Round(time.Millisecond))
			break
		}
		if time.Since(revoked) > 2*time.Second {
			t.Fatalf("the revoked key on a, 2 s later: %d %s", resp.StatusCode, raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The embedded default keeps keys in memory: without a token, the loopback caller is the admin (as
// before keys), and a key works, is limited and is revoked as anywhere.
func TestKeysOnTheEmbeddedDefault(t *testing.T) {
	base, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := base.With(catalog.Model{ID: keyEmbedModel, Provider: "deepseek", ContextWindow: 8192, InputPricePerMTok: money.PerMillionDollar / 50, Tier: 3,
		Capabilities: []string{catalog.Embeddings}})
	if err != nil {
		t.Fatal(err)
	}
	tb := newTestbed(t, nil, func(_ *config.Config, o *engine.Options) { o.Catalog = cat })
	k := tb.createKey(map[string]any{"name": "local", "models": []string{"conclave/*", keyEmbedModel}})
	if resp, raw := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "workers": 1, "min_responses": 1}); resp.StatusCode != http.StatusOK {
		t.Fatalf("a key on the embedded default: %d %s", resp.StatusCode, raw)
	}
	// Let in by the key, the call then finds no upstream that embeds (the simulated providers do not).
	if resp, raw := tb.as(k.Key, http.MethodPost, "/v1/embeddings", map[string]any{"model": keyEmbedModel, "input": "The cat sat."}); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(raw), "no embeddings") {
		t.Fatalf("embeddings of a model in the key's list: %d %s", resp.StatusCode, raw)
	}
	if _, err := tb.engine.Keys().Update(context.Background(), k.ID, keys.Changes{Models: &[]string{"conclave/*"}}); err != nil {
		t.Fatal(err)
	}
	if resp, raw := tb.as(k.Key, http.MethodPost, "/v1/embeddings", map[string]any{"model": keyEmbedModel, "input": "The cat sat."}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("embeddings of a model outside the key's list: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := tb.as(k.Key, http.MethodPost, "/v1/chat/completions", map[string]any{"model": groqModels[0],
		"messages": []map[string]any{{"role": "user", "content": mcq}}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a model outside the key's list: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := tb.as("any-client-placeholder", http.MethodGet, "/admin/keys", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("a loopback caller without a key, and no token configured: %d %s", resp.StatusCode, raw)
	}
	tb.do(http.MethodDelete, "/admin/keys/"+k.ID, nil, nil)
	if resp, _ := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a revoked key: %d", resp.StatusCode)
	}
}

// summaryPage is a page of GET /executions as a test reads it.
type summaryPage struct {
	Records []struct {
		RequestID   string `json:"request_id"`
		KeyID       string `json:"key_id"`
		Task        string `json:"task"`
		TaskClipped bool   `json:"task_clipped"`
	} `json:"records"`
	Next string `json:"next"`
	Prev string `json:"prev"`
}

func (p summaryPage) ids() string {
	var ids []string
	for _, r := range p.Records {
		ids = append(ids, r.RequestID)
	}
	return strings.Join(ids, ",")
}

// GET /executions?key= lists one key's records, with their tasks clipped, a page at a time either
// way; the listing stays the admin's, and a bad query names each of its problems.
func TestListingAKeysExecutions(t *testing.T) {
	for _, backend := range []string{"memory", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			mutate := withAdmin
			if backend == "postgres" {
				db := newDatabase(t)
				mutate = func(c *config.Config) {
					withAdmin(c)
					withDatabase(db.url, filepath.Join(t.TempDir(), "spool"))(c)
				}
			}
			tb := newTestbed(t, mutate)
			k := tb.createKey(map[string]any{"name": "lister"})
			long := strings.Repeat("Größe? ", 50) // 350 characters, 400 bytes
			for i, task := range []string{mcq, long, mcq + "\n(2)"} {
				if resp, raw := tb.as(k.Key, http.MethodPost, "/route-thompson", map[string]any{"task": task, "workers": 2}); resp.StatusCode != http.StatusOK {
					t.Fatalf("the key's request %d: %d %s", i, resp.StatusCode, raw)
				}
			}
			for range 2 {
				tb.route(map[string]any{"task": mcq, "workers": 2})
			}
			var all summaryPage
			waitFor(t, func() bool {
				tb.do(http.MethodGet, "/executions", nil, &all)
				return len(all.Records) == 5
			})
			var first, second, back summaryPage
			if resp, raw := tb.do(http.MethodGet, "/executions?limit=2&key="+k.ID, nil, &first); resp.StatusCode != http.StatusOK ||
				len(first.Records) != 2 || first.Next == "" || first.Prev != "" {
				t.Fatalf("the key's first page: %d %s", resp.StatusCode, raw)
			}
			tb.do(http.MethodGet, "/executions?limit=2&key="+k.ID+"&after="+first.Next, nil, &second)
			if len(second.Records) != 1 || second.Next != "" || second.Prev == "" {
				t.Fatalf("the key's second page: %+v", second)
			}
			tb.do(http.MethodGet, "/executions?limit=2&key="+k.ID+"&before="+second.Prev, nil, &back)
			if back.ids() != first.ids() || back.Prev != "" || back.Next != first.Next {
				t.Fatalf("back from the second page: %+v, want %+v", back, first)
			}
			clipped := 0
			for _, r := range append(first.Records, second.Records...) {
				if r.KeyID != k.ID || r.Task == "" {
					t.Errorf("a summary of the key's: %+v", r)
				}
				if r.TaskClipped {
					clipped++
					if r.Task != string([]rune(long)[:200]) {
						t.Errorf("the long task clipped to %q", r.Task)
					}
				}
			}
			if clipped != 1 {
				t.Errorf("%d clipped tasks, want 1", clipped)
			}
			var bad errorResponse
			resp, raw := tb.do(http.MethodGet, "/executions?key="+strings.Repeat("k", 65)+"&after="+first.Next+"&before=%21&outcome=meh", nil, &bad)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("a bad query: %d %s", resp.StatusCode, raw)
			}
			named := map[string]int{}
			for _, d := range bad.Error.Details {
				named[d.Field]++
			}
			if named["key"] != 1 || named["before"] != 2 || named["outcome"] != 1 {
				t.Errorf("the problems named: %v (%s)", named, raw)
			}
			if resp, _ := tb.as(k.Key, http.MethodGet, "/executions?key="+k.ID, nil); resp.StatusCode != http.StatusForbidden {
				t.Errorf("a key listing its own records: %d", resp.StatusCode)
			}
		})
	}
}

// TestTheModelListIsTheKeys: GET /v1/models lists what the caller may call, a key only the models its
// globs allow (a model it may not call is not found either); each catalog entry has its context
// window, its prices per token as decimal strings (the catalog's per million, divided exactly) and its
// capabilities.
func TestTheModelListIsTheKeys(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	k := tb.createKey(map[string]any{"name": "two", "models": []string{groqModels[0], groqModels[1]}})
	type entry struct {
		ID            string   `json:"id"`
		ContextLength int      `json:"context_length"`
		Capabilities  []string `json:"capabilities"`
		Pricing       *struct {
			Prompt     string `json:"prompt"`
			Completion string `json:"completion"`
		} `json:"pricing"`
	}
	var list struct {
		Data []entry `json:"data"`
	}
	if resp, raw := tb.as(k.Key, http.MethodGet, "/v1/models", nil); resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &list) != nil {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var ids []string
	for _, e := range list.Data {
		ids = append(ids, e.ID)
		m, ok := tb.engine.Catalog().Get(e.ID)
		if !ok || e.ContextLength != m.ContextWindow || len(e.Capabilities) == 0 || e.Pricing == nil ||
			e.Pricing.Prompt != m.InputPricePerMTok.PerToken() || e.Pricing.Completion != m.OutputPricePerMTok.PerToken() {
			t.Errorf("entry %+v, the catalog's %+v", e, m)
		}
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{groqModels[0], groqModels[1]}) {
		t.Fatalf("the key sees %v", ids)
	}
	if resp, _ := tb.as(k.Key, http.MethodGet, "/v1/models/"+groqModels[2], nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a model the key may not call: %d", resp.StatusCode)
	}
	if resp, _ := tb.as(k.Key, http.MethodGet, "/v1/models/"+groqModels[0], nil); resp.StatusCode != http.StatusOK {
		t.Errorf("a model the key may call: %d", resp.StatusCode)
	}
	var all struct {
		Data []entry `json:"data"`
	}
	tb.do(http.MethodGet, "/v1/models", nil, &all)
	if len(all.Data) != len(tb.engine.Catalog().All())+1+len(tb.engine.Blueprints().Names()) {
		t.Fatalf("the admin token sees %d models", len(all.Data))
	}
}
