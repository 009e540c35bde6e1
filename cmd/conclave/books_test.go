package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"github.com/jackc/pgx/v5"
)

const booksAdmin = "books-admin-token-0123456789"

// pricedUpstream is an OpenAI-format provider on loopback with one priced model, every answer held
// for delay: calls are in flight long enough for a controller to die under them.
func pricedUpstream(t *testing.T, delay time.Duration) *providertest.Server {
	s := providertest.New(providertest.OpenAI, func(model, prompt string) string { return "The answer is (B)." })
	t.Cleanup(s.Close)
	s.Fail(providertest.Response{Delay: delay}) // every call: a composed answer, after the delay
	return s
}

// booksConfig writes the configuration of a controller calling upstream's model m-1 ($1 and $2 per
// million tokens), with Redis under prefix.
func booksConfig(t *testing.T, dir, prefix string, upstream *providertest.Server) string {
	off := 0.0
	// Slots enough for every call at once: none waits in a worker's queue.
	raw, _ := json.Marshal(map[string]any{"redis_prefix": prefix, "worker_slots": 64, "providers": map[string]any{"local": map[string]any{
		"kind": "openai", "base_url": upstream.URL + "/v1", "discovery_interval_seconds": off,
		"rate_limit": map[string]any{"requests_per_minute": 100000, "concurrency": 512},
		"models":     []map[string]any{{"id": "m-1", "context": 32768, "price_in": 1, "price_out": 2}}}}})
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// as sends a body to a controller with a credential and returns the status and the JSON answer.
func as(url, credential, path string, body any) (int, map[string]any, error) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+credential)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

func chat(url, secret string) (int, map[string]any, error) {
	return as(url, secret, "/v1/chat/completions", map[string]any{"model": "m-1", "max_tokens": 100,
		"messages": []map[string]any{{"role": "user", "content": "Which is larger? A) 2 B) 3"}}})
}

// TestASIGKILLLosesNoCallAndFreesItsSlots runs two controllers on one PostgreSQL and one Redis with a
// priced upstream whose answers take a while, and kills one with SIGKILL while it has calls in flight
// and holds a key's concurrency slots: the other controller has the slots back within 30 s (their
// leases lapse), the killed controller restarts and settles the calls it left open, and every call
// the upstream served has its charge in the journal and its record; `conclave books check` finds the
// books balanced.
func TestASIGKILLLosesNoCallAndFreesItsSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts controller processes and waits for leases to end")
	}
	_, prefix := redistest.New(t)
	db := pgtest.New(t, true)
	bin := sshtest.BuildConclave(t, t.TempDir())
	dir := t.TempDir()
	upstream := pricedUpstream(t, 3*time.Second)
	config := booksConfig(t, dir, prefix, upstream)
	env := func(node string) []string {
		return []string{"DATABASE_URL=" + db.Reveal(), "REDIS_URL=" + redistest.URL(), "CONCLAVE_API_TOKEN=" + booksAdmin,
			"CONCLAVE_SPOOL_PATH=" + filepath.Join(dir, node+".spool")}
	}
	start := func(node string) *controller {
		return serveProcess(t, bin, env(node), os.Stderr, "--node-id", node, "--config", config, "--log-level", "warn")
	}
	a, b := start("ctl-a"), start("ctl-b")
	status, key, err := as(a.http, booksAdmin, "/admin/keys", map[string]any{"name": "killed-under", "budget_usd": 10, "max_concurrency": 2})
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create the key: %d %v %v", status, key, err)
	}
	secret := key["key"].(string)
	status, loadKey, _ := as(a.http, booksAdmin, "/admin/keys", map[string]any{"name": "load", "budget_usd": 10})
	if status != http.StatusCreated {
		t.Fatalf("create the load key: %d", status)
	}

	// B takes the limited key's two slots and 20 calls of the load key, all held by the upstream.
	var wg sync.WaitGroup
	inFlight := func(n int) {
		for len(upstream.Requests()) < n {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 2 {
		wg.Go(func() { _, _, _ = chat(b.http, secret) })
	}
	inFlight(2)
	for range 20 {
		wg.Go(func() { _, _, _ = chat(b.http, loadKey["key"].(string)) })
	}
	inFlight(22)
	if status, _, _ := chat(a.http, secret); status != http.StatusTooManyRequests {
		t.Fatalf("a third request of a key with two requests at once: %d", status)
	}
	_ = b.cmd.Process.Kill() // SIGKILL: its calls are in flight, its slots held
	killed := time.Now()
	wg.Wait()

	// The slots come back on A within their lease (the time below includes the upstream's delay of the
	// call that finds them free).
	var freed time.Duration
	for {
		status, _, err := chat(a.http, secret)
		if err == nil && status == http.StatusOK {
			freed = time.Since(killed)
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("the killed controller's slots were still held after 30 s (last status %d)", status)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the killed controller's slots were free again after %v", freed.Round(100*time.Millisecond))

	// B restarts and settles the calls it left open: every call the upstream served is charged.
	b = start("ctl-b")
	conn, err := pgx.Connect(context.Background(), db.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var open, charged, records int
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := conn.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'open'), count(*) FILTER (WHERE state <> 'open' AND cost_nanos > 0),
    (SELECT count(*) FROM workflow.executions) FROM books.journal`).Scan(&open, &charged, &records)
		if err != nil {
			t.Fatal(err)
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A call journaled but killed before it reached the upstream is charged too (at its reservation):
	// the books cannot know it was never sent, and err towards the provider.
	served := len(upstream.Requests())
	t.Logf("the upstream served %d calls; the journal charged %d, %d left open; %d records", served, charged, open, records)
	if open != 0 || charged < served {
		t.Fatalf("the upstream served %d calls: %d charged, %d open", served, charged, open)
	}
	check := exec.Command(bin, "books", "check", "--since", "1h")
	check.Env = append(os.Environ(), "DATABASE_URL="+db.Reveal())
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("books check: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}
