//go:build soak

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"github.com/jackc/pgx/v5"
)

// faultRow is one row of the specification's error table, injected while the load runs.
type faultRow struct {
	name string
	// inject starts the fault and restore ends it; either may be nil.
	inject, restore func()
	// to is where the phase's load goes (the main controller when nil).
	to *controller
	// bad makes the phase's extra requests: malformed or oversized bodies, sent beside the steady load.
	bad []byte
	// alone is a request the fault leaves no alternative for, sent once the fault is on, and the
	// status it must get.
	alone     map[string]any
	aloneWant int
	// noAlternative says the steady load itself has nowhere else to go: its answers are 503s.
	noAlternative bool
}

// outcome is what one request got: an answer, or an error getting none.
type outcome struct {
	status int
	code   string   // the error's code, for failures
	id     string   // X-Request-ID
	calls  []string // the error kinds of the answer's failed calls
	err    error    // the request got no answer at all
}

// TestFaultMatrixUnderLoad runs the built binary against a real PostgreSQL, a real Redis (both through
// proxies that can cut them), three real sshd worker hosts running the built worker agent and five
// local providers in three wire formats, at a steady request rate, and injects every row of the
// specification's error table in turn. Each phase counts the answers; every answer the pipeline gave
// must have its record in PostgreSQL at the end, and the server's goroutines and RSS are read at the
// start and the end. make soak runs it (CONCLAVE_FAULT_PHASE sets each phase's length, 10 s by default).
func TestFaultMatrixUnderLoad(t *testing.T) {
	phase := 10 * time.Second
	if v := os.Getenv("CONCLAVE_FAULT_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CONCLAVE_FAULT_PHASE: %v", err)
		}
		phase = d
	}
	const rate = 40 // requests per second
	bin := sshtest.BuildConclave(t, t.TempDir())
	db := pgtest.New(t, true)
	pgCut, dbThrough := pgtest.NewProxy(t, db)
	redisCut, redisThrough := redistest.NewProxy(t)
	_, prefix := redistest.New(t)
	dir := t.TempDir()

	// Three worker hosts taking one client key.
	var hosts []*sshtest.SSHD
	var known []string
	var entries []sshtest.FleetHost
	for i := range 3 {
		h := sshtest.StartSSHD(t, bin+" worker")
		hosts, known = append(hosts, h), append(known, h.KnownHosts)
		entries = append(entries, sshtest.FleetHost{Name: fmt.Sprintf("host-%d", i+1), Mode: fleet.ModeAgent, SSHD: h, Slots: 32})
	}
	key := hosts[0].Client
	for _, h := range hosts[1:] {
		write(t, filepath.Join(filepath.Dir(h.Client.File), "authorized_keys"), fmt.Sprintf("command=%q,restrict %s\n", bin+" worker", key.Authorized()))
	}
	fleetPath := sshtest.WriteFleet(t, known, entries, key.File)

	// Providers: alpha (OpenAI-compatible), beta (Anthropic Messages), gamma (Gemini), and two more
	// OpenAI-compatible ones whose faults end them: delta's one model will be unknown (404, it leaves the
	// pool) and epsilon's key refused (401, it takes no call until its key changes).
	alpha, beta, gamma := providertest.New(providertest.OpenAI, nil), providertest.New(providertest.Anthropic, nil), providertest.New(providertest.Gemini, nil)
	delta, epsilon := providertest.New(providertest.OpenAI, nil), providertest.New(providertest.OpenAI, nil)
	for _, s := range []*providertest.Server{alpha, beta, gamma, delta, epsilon} {
		t.Cleanup(s.Close)
	}
	models := func(ids ...string) []map[string]any {
		var out []map[string]any
		for _, id := range ids {
			out = append(out, map[string]any{"id": id, "context": 32768, "price_in": 1, "price_out": 2})
		}
		return out
	}
	provider := func(kind, base string, ids ...string) map[string]any {
		return map[string]any{"kind": kind, "base_url": base, "api_key_env": "FAULTS_KEY", "discovery_interval_seconds": 0, "models": models(ids...),
			"rate_limit": map[string]any{"requests_per_minute": 1000000, "concurrency": 1024},
			"breaker":    map[string]any{"open_seconds": 2, "model_open_seconds": 2}}
	}
	pool := []string{"a-1", "a-2", "b-1", "b-2", "g-1", "g-2", "d-1", "e-1"}
	// general: four of the pool, majority of at least two, within 3 s.
	bpDir := filepath.Join(dir, "blueprints")
	os.Mkdir(bpDir, 0o755)
	write(t, filepath.Join(bpDir, "general.json"), `{"name": "general", "description": "Anything else.", "workers": 4, "timeout_seconds": 3, "strategy": "majority", "min_responses": 2}`)
	configFor := func(name, blueprints string) string {
		raw, _ := json.Marshal(map[string]any{
			"redis_prefix": prefix, "fleet": fleetPath, "blueprints_dir": blueprints,
			"retry": map[string]any{"scale": 0.05, "rounds": 1},
			"providers": map[string]any{
				"alpha": provider("openai", alpha.URL+"/v1", "a-1", "a-2"), "beta": provider("anthropic", beta.URL, "b-1", "b-2"),
				"gamma": provider("gemini", gamma.URL, "g-1", "g-2"), "delta": provider("openai", delta.URL+"/v1", "d-1"),
				"epsilon": provider("openai", epsilon.URL+"/v1", "e-1"),
			},
		})
		path := filepath.Join(dir, name+".json")
		write(t, path, string(raw))
		return path
	}
	env := []string{"DATABASE_URL=" + dbThrough.Reveal(), "REDIS_URL=" + redisThrough, "FAULTS_KEY=sk-faults-0123456789"}
	ctlA := startController(t, bin, "ctl-a", append(env, "CONCLAVE_SPOOL_PATH="+filepath.Join(dir, "a.spool")), configFor("a", bpDir))
	// B reads its blueprints from a directory that is not there.
	other := startController(t, bin, "ctl-b", append(env, "CONCLAVE_SPOOL_PATH="+filepath.Join(dir, "b.spool")), configFor("b", filepath.Join(dir, "gone")))

	openAIError := func(status int, message, typ, code string) providertest.Response {
		return providertest.Response{Status: status, Body: providertest.OpenAIError(message, typ, code)}
	}
	gemini5xx := func(status int) providertest.Response {
		return providertest.Response{Status: status, Body: providertest.GeminiError(status, "UNAVAILABLE", "The service is currently unavailable.")}
	}
	rows := []faultRow{
		{name: "none (baseline)"},
		{name: "worker timeout (beta's calls outlast the blueprint)", inject: func() { beta.Fail(providertest.Response{Delay: time.Minute}) }, restore: func() { beta.Fail() }},
		{name: "provider 429 (alpha, Retry-After 1)", inject: func() {
			alpha.Fail(providertest.Response{Status: 429, Header: map[string]string{"Retry-After": "1", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"},
				Body: providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")})
		}, restore: func() { alpha.Fail() }},
		{name: "provider 500/502/503 (gamma)", inject: func() { gamma.Fail(gemini5xx(500), gemini5xx(502), gemini5xx(503)) }, restore: func() { gamma.Fail() }},
		{name: "network timeout (host-1 frozen)", inject: hosts[0].Freeze, restore: hosts[0].Thaw},
		{name: "SSH connection refused (host-2 killed)", inject: hosts[1].Kill, restore: func() { restart(t, hosts[1]) }},
		{name: "Redis lost", inject: redisCut.Cut, restore: redisCut.Restore},
		{name: "blueprint directory unavailable (ctl-b)", to: other},
		{name: "invalid API key 401 (epsilon)", inject: func() {
			epsilon.Fail(openAIError(401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
		}, alone: map[string]any{"models": []string{"e-1"}, "workers": 1, "min_responses": 1}, aloneWant: http.StatusUnauthorized},
		{name: "model not found 404 (delta's d-1)", inject: func() {
			delta.Fail(openAIError(404, "The model `d-1` does not exist", "invalid_request_error", "model_not_found"))
		}, alone: map[string]any{"models": []string{"d-1"}, "workers": 1, "min_responses": 1}, aloneWant: http.StatusNotFound},
		{name: "request too large 413", bad: bytes.Repeat([]byte("x"), 2<<20)},
		{name: "malformed request 400", bad: []byte(`{"task": "", "workers": "many", "strategy": "loudest"}`)},
		{name: "all workers offline", noAlternative: true, inject: func() {
			for _, h := range hosts {
				h.Kill()
			}
		}, restore: func() {
			for _, h := range hosts {
				restart(t, h)
			}
		}},
		{name: "all providers down", noAlternative: true, inject: func() {
			alpha.Fail(openAIError(503, "Service unavailable", "server_error", "service_unavailable"))
			beta.Fail(providertest.Response{Status: 529, Body: providertest.AnthropicError("overloaded_error", "Overloaded")})
			gamma.Fail(gemini5xx(503))
		}, restore: func() { alpha.Fail(); beta.Fail(); gamma.Fail() }},
		{name: "database unreachable", inject: pgCut.Cut, restore: pgCut.Restore},
		{name: "none (after every fault)"},
	}

	client := &http.Client{Timeout: 60 * time.Second}
	send := func(c *controller, request []byte) outcome {
		resp, err := client.Post(c.http+"/route-thompson", "application/json", bytes.NewReader(request))
		if err != nil {
			return outcome{err: err}
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		a := outcome{status: resp.StatusCode, id: resp.Header.Get("X-Request-ID")}
		var body struct {
			Responses []struct {
				ErrorKind string `json:"error_kind"`
			} `json:"responses"`
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &body)
		a.code = body.Error.Code
		for _, r := range body.Responses {
			if r.ErrorKind != "" {
				a.calls = append(a.calls, r.ErrorKind)
			}
		}
		return a
	}
	steady := func(i int) []byte {
		raw, _ := json.Marshal(map[string]any{"task": fmt.Sprintf("Which is larger?\nA) 2^10\nB) 10^3\n(%d)", i), "category": "general", "models": pool})
		return raw
	}

	var startGoroutines int
	var startRSS float64
	var all []outcome
	var table []string
	n := 0
	for _, row := range rows {
		target := ctlA
		if row.to != nil {
			target = row.to
		}
		if row.inject != nil {
			row.inject()
		}
		var mu sync.Mutex
		var got []outcome
		var extra []outcome
		var wg sync.WaitGroup
		record := func(into *[]outcome, a outcome) {
			mu.Lock()
			*into = append(*into, a)
			mu.Unlock()
		}
		alone := outcome{}
		if row.alone != nil {
			body := map[string]any{"task": "Which is larger?\nA) 2^10\nB) 10^3", "category": "general"}
			for k, v := range row.alone {
				body[k] = v
			}
			raw, _ := json.Marshal(body)
			alone = send(target, raw)
		}
		tick := time.NewTicker(time.Second / rate)
		end := time.Now().Add(phase)
		for time.Now().Before(end) {
			<-tick.C
			n++
			body := steady(n)
			wg.Go(func() { record(&got, send(target, body)) })
			if row.bad != nil && n%4 == 0 {
				wg.Go(func() { record(&extra, send(target, row.bad)) })
			}
		}
		tick.Stop()
		wg.Wait()
		if row.restore != nil {
			row.restore()
		}
		all = append(all, got...)
		line := fmt.Sprintf("%-52s %s", row.name, tally(got))
		if calls := failedCalls(got); calls != "" {
			line += "; failed calls in answers: " + calls
		}
		if len(extra) > 0 {
			line += "; extra requests: " + tally(extra)
		}
		if row.alone != nil {
			line += fmt.Sprintf("; with no alternative: %d %s", alone.status, alone.code)
		}
		table = append(table, line)
		t.Log(line)

		for _, a := range got {
			switch {
			case a.err != nil:
				t.Errorf("%s: a request got no answer: %v", row.name, a.err)
			case row.noAlternative && a.status != http.StatusOK && a.status != http.StatusServiceUnavailable:
				t.Errorf("%s: status %d %s, want 200 or 503", row.name, a.status, a.code)
			case !row.noAlternative && a.status != http.StatusOK:
				t.Errorf("%s: status %d %s, want 200: an alternative existed", row.name, a.status, a.code)
			}
		}
		if row.alone != nil && alone.status != row.aloneWant {
			t.Errorf("%s: the request with no alternative got %d %s, want %d", row.name, alone.status, alone.code, row.aloneWant)
		}
		for _, a := range extra {
			if want := map[bool]int{true: http.StatusRequestEntityTooLarge, false: http.StatusBadRequest}[len(row.bad) > 1<<20]; a.status != want {
				t.Errorf("%s: an extra request got %d, want %d", row.name, a.status, want)
			}
		}
		if len(table) == 1 { // after the baseline row: the server has warmed up
			client.CloseIdleConnections()
			startGoroutines, startRSS = serverState(t, ctlA)
		}
		if row.noAlternative {
			// Wait for the pipeline to take its workers and providers back before the next row.
			recovered := time.Now()
			for send(ctlA, steady(0)).status != http.StatusOK {
				if time.Since(recovered) > 90*time.Second {
					t.Fatalf("%s: no answer 90 s after the fault ended", row.name)
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Logf("%s: answering again %v after the fault ended", row.name, time.Since(recovered).Round(100*time.Millisecond))
		}
	}

	// Every answer the pipeline gave has its record, once the spool has gone back to the database.
	conn, err := pgx.Connect(context.Background(), db.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		stored := map[string]bool{}
		rows, err := conn.Query(context.Background(), `SELECT request_id FROM workflow.executions`)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { stored[id] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, a := range all {
			if a.err == nil && a.id != "" && !stored[a.id] {
				missing = append(missing, fmt.Sprintf("%s (%d %s)", a.id, a.status, a.code))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	client.CloseIdleConnections()
	time.Sleep(12 * time.Second) // the dispatcher's idle goroutines end after 10 s
	endGoroutines, endRSS := serverState(t, ctlA)
	t.Logf("fault matrix at %d requests/s, %v per row: %d steady requests; records missing: %d; ctl-a goroutines %d -> %d, RSS %.1f -> %.1f MiB",
		rate, phase, len(all), len(missing), startGoroutines, endGoroutines, startRSS, endRSS)
	fmt.Println("\nfault matrix under load (" + strconv.Itoa(rate) + " requests/s, " + phase.String() + " per row)")
	for _, line := range table {
		fmt.Println("  " + line)
	}
	fmt.Printf("  %d steady requests, records missing: %d; ctl-a goroutines %d -> %d, RSS %.1f -> %.1f MiB\n",
		len(all), len(missing), startGoroutines, endGoroutines, startRSS, endRSS)
	if len(missing) > 0 {
		t.Errorf("%d answers have no record: %v", len(missing), missing[:min(len(missing), 10)])
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func restart(t *testing.T, h *sshtest.SSHD) {
	if err := h.Restart(); err != nil {
		t.Errorf("restart %s: %v", h.Addr, err)
	}
}

// tally says how many answers got each status and error code.
func tally(as []outcome) string {
	var keys []string
	for _, a := range as {
		k := strconv.Itoa(a.status)
		switch {
		case a.err != nil:
			k = "no answer"
		case a.code != "":
			k += " " + a.code
		}
		keys = append(keys, k)
	}
	return count(keys)
}

// failedCalls counts the error kinds of the failed calls the answers list.
func failedCalls(as []outcome) string {
	var kinds []string
	for _, a := range as {
		kinds = append(kinds, a.calls...)
	}
	return count(kinds)
}

// count says how often each key occurs, in the keys' order.
func count(keys []string) string {
	counts := map[string]int{}
	for _, k := range keys {
		counts[k]++
	}
	distinct := make([]string, 0, len(counts))
	for k := range counts {
		distinct = append(distinct, k)
	}
	sort.Strings(distinct)
	parts := make([]string, len(distinct))
	for i, k := range distinct {
		parts[i] = fmt.Sprintf("%s: %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// serverState reads a controller's goroutines (from /metrics) and resident memory (from /proc).
func serverState(t *testing.T, c *controller) (int, float64) {
	t.Helper()
	resp, err := http.Get(c.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	goroutines := -1
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			goroutines, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var rssKiB float64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rssKiB, _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		}
	}
	return goroutines, rssKiB / 1024
}
