// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as keys_test.go.

//go:build !fuzz

package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/alerts"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"go.uber.org/zap"
)

// TestABudgetAlertIsToldOncePerThreshold spends a key past two shares of its budget: each crossing is
// logged (budget_alert) and posted to the webhook once, signed with the secret, the webhook's first
// failure tried again; checks after it tell nothing more.
func TestABudgetAlertIsToldOncePerThreshold(t *testing.T) {
	const key = "alert-secret"
	var mu sync.Mutex
	var got []alerts.Alert
	attempts := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if attempts++; attempts == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first try fails: it is tried again
			return
		}
		if r.Header.Get(alerts.SignatureHeader) != alerts.Sign([]byte(key), body) {
			t.Errorf("a body signed %q", r.Header.Get(alerts.SignatureHeader))
		}
		var a alerts.Alert
		if err := json.Unmarshal(body, &a); err != nil {
			t.Errorf("the alert %s: %v", body, err)
		}
		got = append(got, a)
	}))
	defer hook.Close()
	tb := newTestbed(t, func(c *config.Config) {
		withAdmin(c)
		c.Alerts = config.Alerts{WebhookURL: hook.URL, Secret: secret.String(key)}
	}, func(_ *config.Config, o *engine.Options) { o.BudgetCheck = 20 * time.Millisecond })
	budget := money.Dollar / 2000
	k := tb.createKey(map[string]any{"name": "watched", "budget_usd": budget, "budget_period": "1d", "budget_alerts": []float64{0.2, 0.1}})
	var spent money.USD
	for spent < budget/5 {
		status, _, cost, raw := directCall(tb, k.Key)
		if status != http.StatusOK {
			t.Fatalf("%d %s after spending %s", status, raw, spent)
		}
		spent += cost
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	time.Sleep(200 * time.Millisecond) // ten checks more: nothing is told again
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || attempts != 3 {
		t.Fatalf("%d alerts in %d posts: %+v", len(got), attempts, got)
	}
	seen := map[float64]bool{}
	for _, a := range got {
		seen[a.Threshold] = true
		if a.Event != "budget_alert" || a.KeyID != k.ID || a.BudgetUSD != budget || a.PeriodEnd == nil || !a.PeriodEnd.After(time.Now()) ||
			float64(a.SpendUSD) < a.Threshold*float64(budget) {
			t.Errorf("alert %+v", a)
		}
	}
	if !seen[0.1] || !seen[0.2] {
		t.Fatalf("thresholds told: %v", seen)
	}
	if n := tb.logs.FilterField(zap.String("event", "budget_alert")).Len(); n != 2 {
		t.Fatalf("%d budget_alert lines", n)
	}
}
