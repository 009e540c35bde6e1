// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as keys_test.go.

//go:build !fuzz

package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
)

// cachedAsk is a direct call asking for the exact answer cache, with temperature t.
func cachedAsk(t float64, cache any) map[string]any {
	body := map[string]any{"model": groqModels[0], "temperature": t, "messages": []map[string]any{{"role": "user", "content": mcq}}}
	if cache != nil {
		body["cache"] = cache
	}
	return body
}

// askAs posts a chat completion as credential ("" for the admin token) and returns the answer's
// headers and id, and the model calls it made.
func askAs(t *testing.T, tb *testbed, credential string, body map[string]any) (http.Header, string, float64) {
	t.Helper()
	calls := tb.modelCalls()
	var resp *http.Response
	var raw []byte
	if credential == "" {
		resp, raw = tb.do(http.MethodPost, "/v1/chat/completions", body, nil)
	} else {
		resp, raw = tb.as(credential, http.MethodPost, "/v1/chat/completions", body)
	}
	var c struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &c) != nil {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	return resp.Header, c.ID, tb.modelCalls() - calls
}

// TestAnIdenticalRequestIsAnsweredFromTheCache: a request asking for the cache is answered by models
// and kept; the identical one after it is answered from the cache, calling no model, charged nothing,
// its record naming the first; a request that differs in a sampling parameter, asks no-cache, or comes
// with another key is not, unless the key is of the same team; a stream of the identical request
// streams the kept answer.
func TestAnIdenticalRequestIsAnsweredFromTheCache(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	ttl := map[string]any{"ttl": 60}
	h, first, calls := askAs(t, tb, "", cachedAsk(0.2, ttl))
	if calls != 1 || h.Get("X-Conclave-Cache") != "" {
		t.Fatalf("the first request: %v calls, cache %q", calls, h.Get("X-Conclave-Cache"))
	}
	h, second, calls := askAs(t, tb, "", cachedAsk(0.2, ttl))
	if calls != 0 || h.Get("X-Conclave-Cache") != "hit" || h.Get("X-Conclave-Cached-From") != first || h.Get("X-Conclave-Cost-Usd") != "0" {
		t.Fatalf("the identical request: %v calls, headers %v", calls, h)
	}
	rec, firstRec := tb.execution(second), tb.execution(first)
	if rec.CachedFrom != first || rec.CostNanos != 0 || len(rec.Results) != 0 || rec.Answer != firstRec.Answer || rec.StatusCode != 200 {
		t.Fatalf("the hit's record %+v", rec)
	}
	for desc, body := range map[string]map[string]any{
		"another temperature": cachedAsk(0.3, ttl),
		"no-cache":            cachedAsk(0.2, map[string]any{"no-cache": true}),
	} {
		if h, _, calls := askAs(t, tb, "", body); calls != 1 || h.Get("X-Conclave-Cache") != "" {
			t.Errorf("%s: %v calls, cache %q", desc, calls, h.Get("X-Conclave-Cache"))
		}
	}
	k := tb.createKey(map[string]any{"name": "other"})
	if h, _, calls := askAs(t, tb, k.Key, cachedAsk(0.2, ttl)); calls != 1 || h.Get("X-Conclave-Cache") != "" {
		t.Errorf("another key read the admin token's answer: %v calls", calls)
	}
	// The keys of a team share their answers; no answer crosses teams.
	red, blue := tb.createTeam(map[string]any{"name": "red"}), tb.createTeam(map[string]any{"name": "blue"})
	r1, r2 := tb.createKey(map[string]any{"name": "r1", "team_id": red.ID}), tb.createKey(map[string]any{"name": "r2", "team_id": red.ID})
	b1 := tb.createKey(map[string]any{"name": "b1", "team_id": blue.ID})
	_, redFirst, _ := askAs(t, tb, r1.Key, cachedAsk(0.4, ttl))
	if h, _, calls := askAs(t, tb, r2.Key, cachedAsk(0.4, ttl)); calls != 0 || h.Get("X-Conclave-Cached-From") != redFirst {
		t.Errorf("a key of the same team: %v calls, headers %v", calls, h)
	}
	if h, _, calls := askAs(t, tb, b1.Key, cachedAsk(0.4, ttl)); calls != 1 || h.Get("X-Conclave-Cache") != "" {
		t.Errorf("a key of another team read the red team's answer: %v calls", calls)
	}
	if h, _, calls := askAs(t, tb, k.Key, cachedAsk(0.4, ttl)); calls != 1 || h.Get("X-Conclave-Cache") != "" {
		t.Errorf("a key of no team read a team's answer: %v calls", calls)
	}
	stream := cachedAsk(0.2, ttl)
	stream["stream"] = true
	resp, raw := tb.do(http.MethodPost, "/v1/chat/completions", stream, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Conclave-Cache") != "hit" || !strings.Contains(string(raw), "data: [DONE]") ||
		streamedAnswer(t, string(raw)) != firstRec.Answer {
		t.Fatalf("a stream of the identical request: %d %v\n%s", resp.StatusCode, resp.Header, raw)
	}
	bad := cachedAsk(0.2, map[string]any{"ttl": -5})
	if resp, raw := tb.do(http.MethodPost, "/v1/chat/completions", bad, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "cache.ttl") {
		t.Errorf("a negative ttl: %d %s", resp.StatusCode, raw)
	}
}

// streamedAnswer puts a chat completion stream's pieces together.
func streamedAnswer(t *testing.T, raw string) string {
	t.Helper()
	var text strings.Builder
	for line := range strings.Lines(raw) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		text.WriteString(streamedText(t, data))
	}
	return text.String()
}

// TestAKeyAndABlueprintKeepTheirAnswers: a key's cache_ttl_seconds and a blueprint's keep answers
// without the request asking.
func TestAKeyAndABlueprintKeepTheirAnswers(t *testing.T) {
	set, err := blueprints.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if set, err = set.With(blueprints.Blueprint{Name: "remembered", Workers: 2, TimeoutSeconds: 10, Strategy: blueprints.Majority, MinResponses: 2,
		CacheTTLSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	tb := newTestbed(t, withAdmin, func(_ *config.Config, o *engine.Options) { o.Blueprints = set })
	k := tb.createKey(map[string]any{"name": "remembers", "cache_ttl_seconds": 60})
	askAs(t, tb, k.Key, cachedAsk(0.2, nil))
	if h, _, calls := askAs(t, tb, k.Key, cachedAsk(0.2, nil)); calls != 0 || h.Get("X-Conclave-Cache") != "hit" {
		t.Errorf("the key's cache: %v calls, %q", calls, h.Get("X-Conclave-Cache"))
	}
	panel := map[string]any{"model": "conclave/remembered", "messages": []map[string]any{{"role": "user", "content": mcq}}}
	if _, _, calls := askAs(t, tb, "", panel); calls != 2 {
		t.Fatalf("the blueprint's first request made %v calls", calls)
	}
	if h, _, calls := askAs(t, tb, "", panel); calls != 0 || h.Get("X-Conclave-Cache") != "hit" {
		t.Errorf("the blueprint's cache: %v calls, %q", calls, h.Get("X-Conclave-Cache"))
	}
}

// TestTheCacheIsSharedByTheControllers: what one controller answered, another sharing its Redis
// answers from the cache.
func TestTheCacheIsSharedByTheControllers(t *testing.T) {
	_, prefix := redistest.New(t)
	a, b := newTestbed(t, sharing(prefix, "ctl-a")), newTestbed(t, sharing(prefix, "ctl-b"))
	_, first, _ := askAs(t, a, "", cachedAsk(0.2, map[string]any{"ttl": 60}))
	if h, _, calls := askAs(t, b, "", cachedAsk(0.2, map[string]any{"ttl": 60})); calls != 0 || h.Get("X-Conclave-Cached-From") != first {
		t.Fatalf("the other controller: %v calls, %v", calls, h)
	}
}
