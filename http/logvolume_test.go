package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/catalog"
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
