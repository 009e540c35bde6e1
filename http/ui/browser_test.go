package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	httpapi "github.com/conclave-ai/conclave/http"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv"
	"go.uber.org/zap"
)

const token = "dashboard-token-0123456789"

// artefacts is where the screenshots are kept: $CONCLAVE_ARTEFACTS, or reports/ui in the repository.
func artefacts(t *testing.T) string {
	dir := os.Getenv("CONCLAVE_ARTEFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "reports", "ui")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// server is a real Conclave on the embedded default with some traffic and an evaluation report.
func server(t *testing.T) string {
	cfg := config.Default()
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	cfg.Sim.LatencyScale, cfg.Sim.Faults = 0.02, providers.Fault{}
	cfg.APIToken = secret.String(token)
	e, err := engine.New(engine.Options{Config: cfg, Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	rep := map[string]any{
		"seeds": []int{1, 2, 3}, "runs": []string{"thompson/agreement", "uniform/agreement"},
		"best_single": map[string]float64{"gsm": 0.97, "overall": 0.75},
		"datasets": map[string]any{
			"gsm":     map[string]any{"thompson/agreement": map[string]any{"accuracy": map[string]float64{"mean": 0.975, "min": 0.968, "max": 0.98}}, "uniform/agreement": map[string]any{"accuracy": map[string]float64{"mean": 0.965, "min": 0.958, "max": 0.973}}},
			"overall": map[string]any{"thompson/agreement": map[string]any{"accuracy": map[string]float64{"mean": 0.732, "min": 0.731, "max": 0.734}}, "uniform/agreement": map[string]any{"accuracy": map[string]float64{"mean": 0.579, "min": 0.573, "max": 0.582}}},
		},
	}
	raw, _ := json.Marshal(rep)
	if err := os.WriteFile(report, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(e, httpapi.Options{Token: cfg.APIToken, Keys: e.Keys(), Log: zap.NewNop(), EvalReport: report}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	tasks := []string{
		"Which of these is a prime number?\nA) 21\nB) 27\nC) 29\nD) 33",
		"Review this diff for bugs: func add(a, b int) int { return a - b }",
		"Summarize the incident: the database failed over at 03:12 and writes were lost for 40 seconds.",
	}
	for i := range 6 {
		body := `{"task": ` + quote(tasks[i%len(tasks)]) + `}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/route-thompson", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	// Records are listed once written.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !listed(srv.URL) {
		time.Sleep(20 * time.Millisecond)
	}
	return srv.URL
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func listed(base string) bool {
	req, _ := http.NewRequest(http.MethodGet, base+"/executions?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var page struct{ Records []any }
	return json.NewDecoder(resp.Body).Decode(&page) == nil && len(page.Records) > 0
}

// TestDashboardInHeadlessChromium renders every page of the dashboard from a real server in Debian's
// headless Chromium: the token is asked once, each page shows the server's data, a click on an
// execution opens its waterfall. Screenshots of each page are kept.
func TestDashboardInHeadlessChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium is not installed (run scripts/services.sh)")
	}
	base := server(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first run starts the browser, whose life is that run's context: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	dir := artefacts(t)
	shot := func(name string) {
		t.Helper()
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is a PNG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// open shows a page and returns its text once it is drawn.
	open := func(hash, page string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/"+hash), chromedp.WaitVisible(chromedp.CSS(`main[data-page="`+page+`"]`))); err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}

	// The token is asked for once; the session keeps it for every page after.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/#/fleet"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS("#login-form button")), // a click sends the submit event a script listens for
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="fleet"]`)),
	); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "worker-01") || !strings.Contains(text, "closed") {
		t.Fatalf("fleet page: %q", text)
	}
	shot("fleet")

	checks := []struct {
		hash, page string
		want       []string
	}{
		{"#/providers", "providers", []string{"openrouter", "anthropic", "groq", "closed"}},
		{"#/models?category=code_review", "models", []string{"ranked by mean", "code_review"}},
		{"#/eval", "eval", []string{"thompson/agreement", "73.2 %", "best single model"}},
		{"#/executions", "executions", []string{"code_review", "summarization"}},
		{"#/fleet", "fleet", []string{"worker-01"}}, // the token held: no second prompt
	}
	for _, c := range checks {
		text := open(c.hash, c.page)
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Fatalf("%s page lacks %q: %q", c.page, w, text)
			}
		}
		shot(c.page)
	}
	open("#/models?category=code_review", "models")
	curves, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#posteriors polyline.curve").length`))
	if err != nil || curves == 0 {
		t.Fatalf("posterior curves: %d (%v)", curves, err)
	}

	// A click on an execution opens it: its waterfall and its answer.
	open("#/executions", "executions")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr.link[data-row="0"]`)), chromedp.WaitVisible(chromedp.CSS(`main[data-page="execution"]`))); err != nil {
		t.Fatal(err)
	}
	answer, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("answer")))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#waterfall tr").length`))
	if err != nil {
		t.Fatal(err)
	}
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(answer) == "" || rows < 9 || !strings.Contains(text, "agreement") {
		t.Fatalf("execution page: answer %q, %d waterfall rows: %q", answer, rows, text)
	}
	shot("execution")
}
