package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/conclave-ai/conclave/internal/core/money"
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
	var page struct{ Records []any }
	return call(base, http.MethodGet, "/executions?limit=1", nil, &page) == http.StatusOK && len(page.Records) > 0
}

// call sends a request with the admin token and decodes its JSON answer into out (when not nil); it
// returns the status, or 0 when the request failed.
func call(base, method, path string, body, out any) int {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if out != nil && json.NewDecoder(resp.Body).Decode(out) != nil {
		return 0
	}
	return resp.StatusCode
}

// keyWithTraffic creates a key through the admin API and sends tasks with it, then waits for their
// records to be listed (the spend by model is summed from them).
func keyWithTraffic(t *testing.T, base string) (id, name string) {
	t.Helper()
	var k struct{ ID, Key, Name string }
	body := map[string]any{"name": "nightly-report", "budget_usd": 5, "budget_period": "1d", "rpm": 600, "tpm": 1000000, "max_concurrency": 4}
	if status := call(base, http.MethodPost, "/admin/keys", body, &k); status != http.StatusCreated {
		t.Fatalf("POST /admin/keys: %d", status)
	}
	tasks := []string{
		"Translate to French: the report is ready and the numbers look good.",
		"Which of these is a prime number?\nA) 49\nB) 51\nC) 53\nD) 57",
		"Explain why the nightly job ran twice: the cron entry and the systemd timer both start it.",
	}
	for i, task := range tasks {
		req, _ := http.NewRequest(http.MethodPost, base+"/route-thompson", strings.NewReader(`{"task": `+quote(task)+`}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+k.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the key's request %d: %d", i, resp.StatusCode)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var page struct{ Records []any }
		if call(base, http.MethodGet, "/executions?key="+k.ID, nil, &page) == http.StatusOK && len(page.Records) == len(tasks) {
			return k.ID, k.Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key's %d records are not listed", len(tasks))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// usd writes dollars as the dashboard does.
// usd writes an amount as the dashboard does: exactly, with cents at least ($0.00125717, $5.00).
func usd(x money.USD) string {
	s := x.String()
	whole, frac, _ := strings.Cut(s, ".")
	for len(frac) < 2 {
		frac += "0"
	}
	return "$" + whole + "." + frac
}

// browser is a headless Chromium on the dashboard of a server.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

// shot keeps a screenshot of the page.
func (b *browser) shot(name string) {
	b.t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // quality 100 is a PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn gives the token the page asks for.
func (b *browser) signIn() {
	b.t.Helper()
	if err := chromedp.Do(b.ctx,
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS("#login-form button")), // a click sends the submit event a script listens for
	); err != nil {
		b.t.Fatal(err)
	}
}

// reload reloads the page, which keeps its address and asks for the token again (the tab kept it in
// its memory only), and waits for page.
func (b *browser) reload(page string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Reload()); err != nil {
		b.t.Fatal(err)
	}
	b.signIn()
	b.settle(page)
}

// settle waits until the page shows what its address asks for: a page drawn for another hash, or
// one still loading, does not count.
func (b *browser) settle(page string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelector("main").dataset.drawn === location.hash`)); err != nil {
		b.t.Fatalf("%s: %v (at %s)", page, err, b.eval(`location.href`))
	}
	if got := b.eval(`document.querySelector("main").dataset.page`); got != page {
		b.t.Fatalf("drew page %q (%s), want %q", got, b.text("main"), page)
	}
}

// open shows a page and returns its text once it is drawn.
func (b *browser) open(hash, page string) string {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(b.base+"/ui/"+hash)); err != nil {
		b.t.Fatalf("%s: %v", page, err)
	}
	b.settle(page)
	return b.text("main")
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	text, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return text
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return v
}

// click clicks an element and waits for the page it leads to.
func (b *browser) click(sel, page string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
	b.settle(page)
}

// rows are the listed executions' request ids.
func (b *browser) rows() string {
	return b.eval(`[...document.querySelectorAll("#executions tbody tr")].map((tr) => tr.dataset.id).join(",")`)
}

// TestDashboardInHeadlessChromium renders every page of the dashboard from a real server in Debian's
// headless Chromium: the token is asked once, each page shows the server's data, a click on an
// execution opens its waterfall, the Keys page shows a key's spend after its traffic as the admin
// API says it, and the Executions page filters and pages with its address. Screenshots are kept.
func TestDashboardInHeadlessChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium is not installed (run scripts/services.sh)")
	}
	base := server(t)
	keyID, keyName := keyWithTraffic(t, base)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first run starts the browser, whose life is that run's context: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, 120*time.Second)
	defer cancelTimeout()
	b := &browser{t: t, ctx: ctx, base: base, dir: artefacts(t)}

	// The token is asked for once; the tab keeps it in memory for every page after.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/#/fleet")); err != nil {
		t.Fatal(err)
	}
	b.signIn()
	b.settle("fleet")
	if text := b.text("main"); !strings.Contains(text, "worker-01") || !strings.Contains(text, "closed") {
		t.Fatalf("fleet page: %q", text)
	}
	b.shot("fleet")

	checks := []struct {
		hash, page string
		want       []string
	}{
		{"#/providers", "providers", []string{"openrouter", "anthropic", "groq", "closed"}},
		{"#/models?category=code_review", "models", []string{"ranked by mean", "code_review"}},
		{"#/eval", "eval", []string{"thompson/agreement", "73.2 %", "best single model"}},
		{"#/executions", "executions", []string{"code_review", "summarization", keyName, "Review this diff for bugs"}},
		{"#/keys", "keys", []string{keyName, keyID}},
		{"#/fleet", "fleet", []string{"worker-01"}}, // the token held: no second prompt
	}
	for _, c := range checks {
		text := b.open(c.hash, c.page)
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Fatalf("%s page lacks %q: %q", c.page, w, text)
			}
		}
		b.shot(c.page)
	}

	t.Run("models", func(t *testing.T) { b.t = t; modelRows(b) })
	t.Run("keys", func(t *testing.T) { b.t = t; keySpend(b, keyID, keyName) })
	t.Run("key management", func(t *testing.T) { b.t = t; keyManagement(b) })
	t.Run("team management", func(t *testing.T) { b.t = t; teamManagement(b) })
	t.Run("executions", func(t *testing.T) { b.t = t; executionFilters(b, keyID, keyName) })
	t.Run("execution", func(t *testing.T) { b.t = t; executionWaterfall(b) })
}

// modelRows checks the Models chart: a row per arm, no row over another, a curve in each.
func modelRows(b *browser) {
	b.open("#/models?category=code_review", "models")
	arms, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]struct{ Top, Bottom float64 }](
		`[...document.querySelectorAll("#posteriors g.arm")].map((g) => { const r = g.getBBox(); return { Top: r.y, Bottom: r.y + r.height }; })`))
	if err != nil {
		b.t.Fatal(err)
	}
	if curves := b.count("#posteriors g.arm polyline.curve"); len(arms) != 8 || curves != 8 {
		b.t.Fatalf("%d arms drawn, %d curves, want 8 of each", len(arms), curves)
	}
	for i := 1; i < len(arms); i++ {
		if arms[i].Top < arms[i-1].Bottom {
			b.t.Errorf("arm %d (%v) is drawn over arm %d (%v)", i, arms[i], i-1, arms[i-1])
		}
	}
}

// keySpend checks the Keys page against the admin API: the key's spend this period (not zero) and,
// on the key's own page, its spend by model.
func keySpend(b *browser, id, name string) {
	var k struct {
		RPM   int `json:"rpm"`
		Spend struct {
			SpendUSD money.USD `json:"spend_usd"`
		} `json:"spend"`
	}
	var spend struct {
		TotalUSD money.USD `json:"total_usd"`
		Groups   []struct {
			Model string `json:"model"`
		} `json:"groups"`
	}
	if call(b.base, http.MethodGet, "/admin/keys/"+id, nil, &k) != http.StatusOK || call(b.base, http.MethodGet, "/admin/keys/"+id+"/spend", nil, &spend) != http.StatusOK {
		b.t.Fatal("the admin API does not show the key")
	}
	if k.Spend.SpendUSD <= 0 || spend.TotalUSD <= 0 || len(spend.Groups) == 0 {
		b.t.Fatalf("the key spent %s this period, %s by its records (%d models): its traffic cost nothing", k.Spend.SpendUSD, spend.TotalUSD, len(spend.Groups))
	}
	b.open("#/keys", "keys")
	row := b.text(`#keys tr[data-key="` + id + `"]`)
	for _, want := range []string{name, usd(k.Spend.SpendUSD) + " of $5.00", "per 1d", "/600", "ago"} {
		if !strings.Contains(row, want) {
			b.t.Errorf("the key's row lacks %q: %q", want, row)
		}
	}
	b.click(`#keys tr[data-key="`+id+`"]`, "key")
	if got := b.text("#spend-total"); got != usd(spend.TotalUSD) {
		b.t.Errorf("the key's page shows %s spent by model, the admin API %s", got, usd(spend.TotalUSD))
	}
	if byModel := b.text("#spend-by-model"); !strings.Contains(byModel, spend.Groups[0].Model) {
		b.t.Errorf("the spend by model lacks %s: %q", spend.Groups[0].Model, byModel)
	}
	b.shot("key")
}

// executionFilters pages through the executions both ways and filters them with the form; the
// address keeps both across a reload.
func executionFilters(b *browser, keyID, keyName string) {
	first := b.open("#/executions?limit=2", "executions")
	page1 := b.rows()
	if strings.Count(page1, ",") != 1 || !b.disabled("#newer") || b.disabled("#older") {
		b.t.Fatalf("the first page of 2: %q, %q", page1, first)
	}
	b.click("#older", "executions")
	page2 := b.rows()
	if strings.Count(page2, ",") != 1 || page2 == page1 || !strings.Contains(b.eval("location.hash"), "after=") || b.disabled("#newer") {
		b.t.Fatalf("the second page: %q after %q", page2, page1)
	}
	b.click("#newer", "executions")
	if back := b.rows(); back != page1 {
		b.t.Fatalf("back from the second page: %q, want %q", back, page1)
	}
	b.reload("executions")
	if again := b.rows(); again != page1 {
		b.t.Fatalf("the page after a reload: %q, want %q", again, page1)
	}

	// The form's filters go to the address, and the list is the API's for them.
	b.open("#/executions", "executions")
	if err := chromedp.Do(b.ctx, chromedp.SetValue(chromedp.ID("f-category"), "code_review"), chromedp.SetValue(chromedp.ID("f-outcome"), "ok")); err != nil {
		b.t.Fatal(err)
	}
	b.click("#apply", "executions")
	var page struct{ Records []struct{ Category string } }
	call(b.base, http.MethodGet, "/executions?category=code_review&outcome=ok", nil, &page)
	hash := b.eval("location.hash")
	categories := b.eval(`[...document.querySelectorAll("#executions tbody tr")].map((tr) => tr.children[3].textContent).join(",")`)
	if !strings.Contains(hash, "category=code_review") || !strings.Contains(hash, "outcome=ok") || len(page.Records) == 0 ||
		categories != strings.TrimSuffix(strings.Repeat("code_review,", len(page.Records)), ",") {
		b.t.Fatalf("filtered by category and outcome (%s): %q, the API lists %d", hash, categories, len(page.Records))
	}
	b.reload("executions")
	if v := b.eval(`document.getElementById("f-category").value`); v != "code_review" {
		b.t.Fatalf("the category after a reload: %q", v)
	}
	b.shot("executions-filtered")

	// By key: its three requests, under its name.
	if err := chromedp.Do(b.ctx, chromedp.SetValue(chromedp.ID("f-category"), ""), chromedp.SetValue(chromedp.ID("f-outcome"), ""),
		chromedp.SetValue(chromedp.ID("f-key"), keyID)); err != nil {
		b.t.Fatal(err)
	}
	b.click("#apply", "executions")
	keys := b.eval(`[...document.querySelectorAll("#executions tbody tr")].map((tr) => tr.dataset.key).join(",")`)
	if keys != strings.Join([]string{keyID, keyID, keyID}, ",") || !strings.Contains(b.text("#executions"), keyName) {
		b.t.Fatalf("filtered by key: %q", keys)
	}
	// By time: nothing before the server started; a time that is none is refused, named, with the form kept.
	if text := b.open("#/executions?until=2001-01-01T00:00:00Z", "executions"); !strings.Contains(text, "No execution matches") ||
		b.eval(`document.getElementById("f-until").value`) == "" {
		b.t.Fatalf("until 2001: %q", text)
	}
	if text := b.open("#/executions?since=yesterday", "executions"); !strings.Contains(text, "since must be an RFC 3339 time") {
		b.t.Fatalf("since yesterday: %q", text)
	}
}

// count is how many elements a selector matches.
func (b *browser) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+quote(sel)+`).length`))
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *browser) disabled(sel string) bool {
	return b.eval(`String(document.querySelector(`+quote(sel)+`).disabled)`) == "true"
}

// executionWaterfall opens an execution with a click: its waterfall and its answer.
func executionWaterfall(b *browser) {
	b.open("#/executions", "executions")
	b.click(`tr.link[data-row="0"]`, "execution")
	answer := b.text("#answer")
	rows := b.count("#waterfall tr")
	text := b.text("main")
	if strings.TrimSpace(answer) == "" || rows < 9 || !strings.Contains(text, "agreement") || !strings.Contains(text, "key ") {
		b.t.Fatalf("execution page: answer %q, %d waterfall rows: %q", answer, rows, text)
	}
	b.shot("execution")

	// A majority vote names the answers that decided it.
	var routed struct {
		RequestID string `json:"request_id"`
		Responses []struct {
			Model   string `json:"model"`
			Decider bool   `json:"decider"`
		} `json:"responses"`
	}
	body := map[string]any{"task": "Which planet is largest?\nA) Mars\nB) Jupiter\nC) Venus\nD) Mercury",
		"strategy": "majority", "workers": 5, "min_responses": 3}
	if status := call(b.base, http.MethodPost, "/route-thompson", body, &routed); status != http.StatusOK {
		b.t.Fatalf("a majority vote: %d", status)
	}
	var deciders []string
	for _, r := range routed.Responses {
		if r.Decider {
			deciders = append(deciders, r.Model)
		}
	}
	text = b.open("#/executions/"+routed.RequestID, "execution")
	if len(deciders) != 3 || !strings.Contains(text, "decided by "+strings.Join(deciders, ", ")) {
		b.t.Fatalf("the execution page of a vote decided by %v: %q", deciders, text)
	}

	// Each call: its model, worker, status, latency, tokens, cost, vote and its answer, collapsed; and
	// why the chosen answer won.
	var rec struct {
		Results []struct {
			Model, Worker, Status string
		} `json:"results"`
	}
	call(b.base, http.MethodGet, "/executions/"+routed.RequestID, nil, &rec)
	ok := 0
	for i, r := range rec.Results {
		row := b.eval(fmt.Sprintf(`document.querySelectorAll("#calls tbody tr")[%d].textContent`, i))
		if !strings.Contains(row, r.Model) || !strings.Contains(row, r.Worker) || !strings.Contains(row, r.Status) || !strings.Contains(row, " ms") {
			b.t.Fatalf("call %d (%s on %s, %s) shows as %q", i, r.Model, r.Worker, r.Status, row)
		}
		if r.Status == "ok" {
			ok++
			if !strings.Contains(row, " in · ") || !strings.Contains(row, "$") || !strings.Contains(row, "agreed") && !strings.Contains(row, "dissented") {
				b.t.Fatalf("an answered call's row lacks its tokens, cost or vote: %q", row)
			}
		}
	}
	if n := b.count("#calls tbody tr"); n != len(rec.Results) || b.count("#calls details") != ok || b.count("#calls details[open]") != 0 {
		b.t.Fatalf("%d rows for %d calls, %d answers collapsed of %d", n, len(rec.Results), b.count("#calls details"), ok)
	}
	if w := b.text("#why"); !strings.HasPrefix(w, "Majority: ") || !strings.Contains(w, "agreed with") {
		b.t.Fatalf("why the answer won: %q", w)
	}
	b.shot("execution-calls")
}

// set fills a form's field.
func (b *browser) set(form, name, value string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.SetValue(chromedp.CSS(fmt.Sprintf("#%s [name=%q]", form, name)), value)); err != nil {
		b.t.Fatal(err)
	}
}

// keyManagement makes a key in the Keys page (its secret shown once, and working), changes it and
// revokes it on its page, each as the admin API then says; a key already expired is refused, named.
func keyManagement(b *browser) {
	b.open("#/keys", "keys")
	b.set("new-key", "name", "made-in-the-dashboard")
	b.set("new-key", "budget_usd", "2.5")
	b.set("new-key", "budget_period", "7d")
	b.set("new-key", "rpm", "7")
	b.set("new-key", "models", "conclave/*, groq/*")
	b.click("#new-key button", "keys")
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`!!document.getElementById("secret")`)); err != nil {
		b.t.Fatal(err)
	}
	secret := b.text("#secret")
	var list struct {
		Keys []struct {
			ID, Name, Status string
			RPM              int       `json:"rpm"`
			BudgetUSD        money.USD `json:"budget_usd"`
			Models           []string  `json:"models"`
		} `json:"keys"`
	}
	call(b.base, http.MethodGet, "/admin/keys", nil, &list)
	id := ""
	for _, k := range list.Keys {
		if k.Name == "made-in-the-dashboard" && k.RPM == 7 && k.BudgetUSD == 5*money.Dollar/2 && strings.Join(k.Models, ",") == "conclave/*,groq/*" {
			id = k.ID
		}
	}
	if !strings.HasPrefix(secret, "ck-") || id == "" || !strings.Contains(b.text("#keys"), "made-in-the-dashboard") {
		b.t.Fatalf("the key made in the dashboard: secret %q, the admin API's keys %+v", secret, list.Keys)
	}
	b.shot("key-made")
	req, _ := http.NewRequest(http.MethodGet, b.base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		b.t.Fatalf("the secret shown: %v %v", resp, err)
	}

	b.open("#/keys/"+id, "key")
	b.set("change-key", "rpm", "9")
	b.set("change-key", "cache_ttl_seconds", "60")
	b.click("#change-key button", "key")
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelector("#change-key [name=rpm]").value === "9" && document.querySelector("#key").textContent.includes("/9")`)); err != nil {
		b.t.Fatalf("the key's page after the change: %q (%v)", b.text("#key"), err)
	}
	var k struct {
		RPM      int    `json:"rpm"`
		CacheTTL int    `json:"cache_ttl_seconds"`
		Status   string `json:"status"`
	}
	if call(b.base, http.MethodGet, "/admin/keys/"+id, nil, &k); k.RPM != 9 || k.CacheTTL != 60 {
		b.t.Fatalf("after the change the admin API says %+v", k)
	}
	b.click("#revoke", "key")
	if strings.Contains(b.text("main"), "revoked") {
		b.t.Fatal("one click revoked the key")
	}
	b.click("#revoke", "key")
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelector("main h2").textContent.includes("revoked")`)); err != nil {
		b.t.Fatalf("the key's page after revoking: %q (%v)", b.text("h2"), err)
	}
	if call(b.base, http.MethodGet, "/admin/keys/"+id, nil, &k); k.Status != "revoked" || b.count("#revoke") != 0 {
		b.t.Fatalf("after revoking, the key is %q", k.Status)
	}

	b.open("#/keys", "keys")
	b.set("new-key", "name", "late")
	b.set("new-key", "expires_at", "2020-01-01T00:00:00Z")
	b.click("#new-key button", "keys")
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.getElementById("new-key-error").textContent !== ""`)); err != nil {
		b.t.Fatal(err)
	}
	if e := b.text("#new-key-error"); !strings.Contains(e, "expires_at") || !strings.Contains(e, "400") {
		b.t.Fatalf("a key created expired: %q", e)
	}
}

// teamManagement makes a team in the Teams page, lists its key on its page, changes it, and deletes it
// once its key is revoked (the first delete refused, the refusal shown), each as the admin API says.
func teamManagement(b *browser) {
	b.open("#/teams", "teams")
	b.set("new-team", "name", "platform")
	b.set("new-team", "budget_usd", "3")
	b.set("new-team", "budget_period", "30d")
	b.set("new-team", "rpm", "11")
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#new-team button"))); err != nil {
		b.t.Fatal(err)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`location.hash.startsWith("#/teams/team_")`)); err != nil {
		b.t.Fatalf("no team page after the creation: %v (%s)", err, b.text("main"))
	}
	b.settle("team")
	id := strings.TrimPrefix(b.eval(`decodeURIComponent(location.hash)`), "#/teams/")
	var team struct {
		Name      string    `json:"name"`
		RPM       int       `json:"rpm"`
		BudgetUSD money.USD `json:"budget_usd"`
		Period    string    `json:"budget_period"`
	}
	if call(b.base, http.MethodGet, "/admin/teams/"+id, nil, &team); team.Name != "platform" || team.RPM != 11 || team.BudgetUSD != 3*money.Dollar || team.Period != "30d" {
		b.t.Fatalf("the team made in the dashboard: %+v", team)
	}
	var k struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	if status := call(b.base, http.MethodPost, "/admin/keys", map[string]any{"name": "platform-bot", "team_id": id}, &k); status != http.StatusCreated {
		b.t.Fatalf("a key in the team: %d", status)
	}
	if text := b.open("#/keys", "keys"); !strings.Contains(b.text(`#keys tr[data-key="`+k.ID+`"]`), id) {
		b.t.Fatalf("the key's team in the Keys page: %q", text)
	}
	b.open("#/teams/"+id, "team")
	if keys := b.text("#team-keys"); !strings.Contains(keys, "platform-bot") {
		b.t.Fatalf("the team's keys: %q", keys)
	}
	b.shot("team")
	b.set("change-team", "rpm", "12")
	b.click("#change-team button", "team")
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelector("#team").textContent.includes("/12")`)); err != nil {
		b.t.Fatalf("the team's page after the change: %q (%v)", b.text("#team"), err)
	}
	if call(b.base, http.MethodGet, "/admin/teams/"+id, nil, &team); team.RPM != 12 {
		b.t.Fatalf("after the change the admin API says %+v", team)
	}
	for range 2 { // the first click arms, the second deletes: refused while the key can be used
		if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#delete-team"))); err != nil {
			b.t.Fatal(err)
		}
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.getElementById("delete-team-error").textContent !== ""`)); err != nil {
		b.t.Fatal(err)
	}
	if e := b.text("#delete-team-error"); !strings.Contains(e, "409") || !strings.Contains(e, k.ID) {
		b.t.Fatalf("a team with a key deleted: %q", e)
	}
	if status := call(b.base, http.MethodDelete, "/admin/keys/"+k.ID, nil, nil); status != http.StatusOK {
		b.t.Fatalf("revoke: %d", status)
	}
	b.reload("team")
	for range 2 {
		if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#delete-team"))); err != nil {
			b.t.Fatal(err)
		}
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`location.hash === "#/teams"`)); err != nil {
		b.t.Fatalf("after the deletion: %v (%s)", err, b.text("main"))
	}
	b.settle("teams")
	if status := call(b.base, http.MethodGet, "/admin/teams/"+id, nil, nil); status != http.StatusNotFound || strings.Contains(b.text("main"), id) {
		b.t.Fatalf("a deleted team: %d", status)
	}
}
