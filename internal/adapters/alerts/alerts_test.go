package alerts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/redistest"
)

// TestAnAlertIsClaimedOnce: in memory and in a Redis two controllers share, the first claim of a name
// wins and the others do not, until the claim's time ends.
func TestAnAlertIsClaimedOnce(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	m := NewMemory(func() time.Time { return now })
	c, prefix := redistest.New(t)
	for name, pair := range map[string][2]Claims{"memory": {m, m}, "redis": {NewRedis(c, prefix), NewRedis(c, prefix)}} {
		first, err := pair[0].Claim(ctx, "key:a:0:0.8", time.Hour)
		second, err2 := pair[1].Claim(ctx, "key:a:0:0.8", time.Hour)
		other, err3 := pair[1].Claim(ctx, "key:a:0:1", time.Hour)
		if !first || second || !other || err != nil || err2 != nil || err3 != nil {
			t.Errorf("%s: first %v, second %v, another name %v (%v %v %v)", name, first, second, other, err, err2, err3)
		}
	}
	now = now.Add(time.Hour)
	if again, _ := m.Claim(ctx, "key:a:0:0.8", time.Hour); !again {
		t.Error("a claim past its time was still held")
	}
}

// TestTheWebhookTriesAgainWhileItFails: a webhook that fails twice gets the alert on the third try,
// signed; one that never takes it gets the attempts and no more.
func TestTheWebhookTriesAgainWhileItFails(t *testing.T) {
	var tries atomic.Int32
	var signature atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) <= 2 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		signature.Store(r.Header.Get(SignatureHeader))
	}))
	defer srv.Close()
	w := &Webhook{URL: srv.URL, Secret: "s", Client: srv.Client(), Attempts: 5, Backoff: time.Millisecond, Seed: 1}
	body := []byte(`{"event":"budget_alert"}`)
	if err := w.Send(context.Background(), body); err != nil || tries.Load() != 3 || signature.Load() != Sign([]byte("s"), body) {
		t.Fatalf("%v after %d tries, signed %v", err, tries.Load(), signature.Load())
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tries.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer down.Close()
	tries.Store(0)
	w.URL = down.URL
	if err := w.Send(context.Background(), body); err == nil || tries.Load() != 5 {
		t.Fatalf("a webhook that never takes it: %v after %d tries", err, tries.Load())
	}
}
