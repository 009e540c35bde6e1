package httpapi

import (
	"math"
	"slices"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/remotedoor"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/structpb"
)

// One way in: /route-thompson and the remote door judge a request with the one validation, so that a
// malformed request is refused the same from either, with the same status and the same problems, each
// under the same field with the same message, in the same order.
func TestOneValidationForEveryDoor(t *testing.T) {
	s := parsingServer(t)
	ptr := func(v float64) *float64 { return &v }
	n := func(v int32) *int32 { return &v }
	str := func(v string) *string { return &v }
	kind, _ := structpb.NewStruct(map[string]any{"answer_kind": "vibes"})
	for _, tc := range []struct {
		desc, body string
		req        *messages.RouteRequest
		status     int
	}{
		{"every override wrong",
			`{"task": " ", "models": ["deepseek-chat", "deepseek-chat", ""], "strategy": "vibes", "timeout": 0, "quorum": "sometimes",
				"quorum_tau": 1.5, "quorum_grace_seconds": 4000, "workers": 0, "min_responses": 13}`,
			&messages.RouteRequest{Task: " ", Models: []string{"deepseek-chat", "deepseek-chat", ""}, Strategy: str("vibes"), TimeoutSeconds: ptr(0),
				Quorum: str("sometimes"), QuorumTau: ptr(1.5), QuorumGraceSeconds: ptr(4000), Workers: n(0), MinResponses: n(13)},
			400},
		{"unknown names beside a malformed one", `{"task": "x", "category": "astrology", "models": ["gpt-17", "deepseek-chat", "deepseek-chat"]}`,
			&messages.RouteRequest{Task: "x", Category: "astrology", Models: []string{"gpt-17", "deepseek-chat", "deepseek-chat"}}, 400},
		{"unknown names alone", `{"task": "x", "category": "astrology", "models": ["gpt-17"]}`,
			&messages.RouteRequest{Task: "x", Category: "astrology", Models: []string{"gpt-17"}}, 404},
		{"min_responses above the blueprint's workers", `{"task": "x", "category": "documentation", "min_responses": 4}`,
			&messages.RouteRequest{Task: "x", Category: "documentation", MinResponses: n(4)}, 400},
		{"an unknown answer kind", `{"task": "x", "metadata": {"answer_kind": "vibes"}}`, &messages.RouteRequest{Task: "x", Metadata: kind}, 400},
		{"sampling out of range", `{"task": "x", "parameters": {"temperature": 3, "top_p": -1, "max_tokens": 0, "stop": ["a", ""], "logit_bias": {"abc": 1, "12": 101}}}`,
			&messages.RouteRequest{Task: "x", Ask: &messages.Ask{Sampling: &messages.Sampling{Temperature: ptr(3), TopP: ptr(-1), MaxTokens: n(0),
				Stop: []string{"a", ""}, LogitBias: map[string]int32{"abc": 1, "12": 101}}}}, 400},
		{"a timeout NaN, which only the remote door can carry, is refused as JSON's out-of-range one", `{"task": "x", "timeout": 1e9}`,
			&messages.RouteRequest{Task: "x", TimeoutSeconds: ptr(math.NaN())}, 400},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, status, ps := s.parseRoute([]byte(tc.body))
			exec := remotedoor.Judge(tc.req, s.engine, nil)
			if status != tc.status || exec == nil || int(exec.StatusCode) != tc.status {
				t.Fatalf("/route-thompson %d %v, remote %v: want %d", status, ps, exec, tc.status)
			}
			code := "malformed_request"
			if tc.status == 404 {
				code = "not_found"
			}
			if exec.Error.Code != code {
				t.Fatalf("remote code %s, want %s", exec.Error.Code, code)
			}
			same := slices.EqualFunc(ps, exec.Error.Details, func(a, b *messages.Problem) bool { return a.Field == b.Field && a.Message == b.Message })
			if !same || len(ps) == 0 {
				t.Fatalf("problems differ:\n/route-thompson %v\nremote         %v", ps, exec.Error.Details)
			}
		})
	}
	if exec := remotedoor.Judge(&messages.RouteRequest{Task: "What is 2 + 2?", Category: "general", Models: []string{"deepseek-chat"}}, s.engine, nil); exec != nil {
		t.Fatalf("a good request refused: %v", exec)
	}
}
