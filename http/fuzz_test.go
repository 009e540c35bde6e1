package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/config"
	"github.com/conclave-ai/conclave/engine"
	"github.com/conclave-ai/conclave/validation"
	"go.uber.org/zap"
)

// FuzzRouteAndChatBodies decodes any body as a route request and as a chat completion request: each is
// valid or refused with 400 or 404 and a bounded list of bounded problems, never a panic.
func FuzzRouteAndChatBodies(f *testing.F) {
	cfg := config.Default()
	e, err := engine.New(engine.Options{Config: cfg, Log: zap.NewNop()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	s := New(e, Options{})
	for _, seed := range []string{
		`{"task": "Review this diff", "category": "code_review", "workers": 3, "min_responses": 2}`,
		`{"task": "x", "models": ["gpt-4o", "gpt-4o"], "timeout": -1, "quorum": "adaptive", "quorum_tau": 1}`,
		`{"task": " \u200b ", "metadata": {"answer_kind": 3}, "extra": null}`,
		`{"model": "conclave/auto", "messages": [{"role": "user", "content": "hi"}], "stream": true, "n": 1}`,
		`{"model": "gpt-4o", "messages": [{"role": "tool", "content": [{"type": "image_url"}]}]}`,
		`[1, 2, 3]`, `{"task": {"nested": [[[[]]]]}}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if p := strictJSON(body); p != nil {
			return // refused before any field is read
		}
		// Problems may quote the input at length here: the answer's writer clips them.
		check := func(kind string, status int, problems int) {
			if status != 0 && status != http.StatusBadRequest && status != http.StatusNotFound {
				t.Fatalf("%s: status %d", kind, status)
			}
			if status != 0 && problems == 0 {
				t.Fatalf("%s: refused without a problem", kind)
			}
			if problems > validation.MaxProblems+1 {
				t.Fatalf("%s: %d problems", kind, problems)
			}
		}
		_, status, ps := s.parseRoute(body)
		check("route", status, len(ps))
		_, status, ps = s.parseChat(body)
		check("chat", status, len(ps))
	})
}
