// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as keys_test.go.

//go:build !fuzz

package httpapi_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/money"
)

// TestThePanelIsInTheHeaders asks every door, a panel and direct calls: the answer's headers name the
// request, the models that answered, the chosen model, the agreement and the cost as the record has
// them, for clients that drop the body's conclave field. A stream's headers name its request.
func TestThePanelIsInTheHeaders(t *testing.T) {
	tb := newTestbed(t, nil)
	model := groqModels[0]
	asks := []struct {
		desc, path string
		body       map[string]any
		panel      bool
	}{
		{"a panel on chat completions", "/v1/chat/completions", map[string]any{"model": "conclave/general",
			"messages": []map[string]any{{"role": "user", "content": mcq}}}, true},
		{"a panel on /route-thompson", "/route-thompson", map[string]any{"task": mcq, "category": "general"}, true},
		{"a direct call on chat completions", "/v1/chat/completions", map[string]any{"model": model,
			"messages": []map[string]any{{"role": "user", "content": mcq}}}, false},
		{"a direct call on messages", "/v1/messages", map[string]any{"model": model, "max_tokens": 100,
			"messages": []map[string]any{{"role": "user", "content": mcq}}}, false},
		{"a direct call on responses", "/v1/responses", map[string]any{"model": model, "input": mcq}, false},
	}
	for _, a := range asks {
		t.Run(a.desc, func(t *testing.T) {
			resp, raw := tb.do(http.MethodPost, a.path, a.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
			h := resp.Header
			id := h.Get("X-Conclave-Request-Id")
			rec := tb.execution(id)
			var answered []string
			contributed := 0
			for _, r := range rec.Results {
				if r.Status == "ok" {
					answered = append(answered, r.Model)
					if r.Contributed {
						contributed++
					}
				}
			}
			models := strings.Split(h.Get("X-Conclave-Models"), ",")
			if !slices.Equal(models, answered) || (a.panel && len(models) < 2) || (!a.panel && !slices.Equal(models, []string{model})) {
				t.Fatalf("X-Conclave-Models %q, the record's answers %v", h.Get("X-Conclave-Models"), answered)
			}
			if chosen := h.Get("X-Conclave-Chosen-Model"); chosen != rec.GetDecision().GetChosenModel() || !slices.Contains(answered, chosen) {
				t.Fatalf("X-Conclave-Chosen-Model %q, the record's %q", chosen, rec.GetDecision().GetChosenModel())
			}
			agreement, err := strconv.ParseFloat(h.Get("X-Conclave-Agreement"), 64)
			if err != nil || agreement != float64(contributed)/float64(len(answered)) {
				t.Fatalf("X-Conclave-Agreement %q, %d of %d answers agreed", h.Get("X-Conclave-Agreement"), contributed, len(answered))
			}
			if cost, err := money.Parse(h.Get("X-Conclave-Cost-Usd")); err != nil || int64(cost) != rec.CostNanos || cost <= 0 {
				t.Fatalf("X-Conclave-Cost-Usd %q, the record's %d nano-dollars", h.Get("X-Conclave-Cost-Usd"), rec.CostNanos)
			}
		})
	}
	t.Run("a stream names its request before its first byte", func(t *testing.T) {
		resp, raw := tb.do(http.MethodPost, "/v1/chat/completions", map[string]any{"model": model, "stream": true,
			"messages": []map[string]any{{"role": "user", "content": mcq}}}, nil)
		id := resp.Header.Get("X-Conclave-Request-Id")
		if resp.StatusCode != http.StatusOK || id == "" || !strings.Contains(string(raw), `"id":"`+id+`"`) {
			t.Fatalf("%d, X-Conclave-Request-Id %q: %.300s", resp.StatusCode, id, raw)
		}
	})
}
