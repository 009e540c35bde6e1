package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"github.com/jackc/pgx/v5"
)

// controller is a `conclave serve` process of the cluster test.
type controller struct {
	name, http, remote string
	cmd                *exec.Cmd
}

// startController runs the built binary as one controller sharing the test's database and Redis.
func startController(t *testing.T, bin, name string, env []string, config string) *controller {
	t.Helper()
	c := serveProcess(t, bin, env, io.Discard, "--remote", "127.0.0.1:0", "--node-id", name, "--config", config, "--log-level", "warn")
	c.name = name
	return c
}

// serveProcess runs `conclave serve` from the built binary on loopback with args, its logs going to
// logs, and waits until it says where it listens.
func serveProcess(t *testing.T, bin string, env []string, logs io.Writer, args ...string) *controller {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &controller{cmd: cmd}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	listening := regexp.MustCompile(`conclave listening on (http://\S+)`)
	remote := regexp.MustCompile(`remote endpoint on (\S+)`)
	for lines.Scan() && c.http == "" {
		if m := remote.FindStringSubmatch(lines.Text()); m != nil {
			c.remote = m[1]
		}
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			c.http = m[1]
		}
	}
	if c.http == "" || (c.remote == "" && slices.Contains(args, "--remote")) {
		t.Fatalf("conclave serve %q did not start", args)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return c
}

func post(url string, body map[string]any) (int, map[string]any, error) {
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url+"/route-thompson", "application/json", bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func breakerOf(t *testing.T, c *controller, provider string) string {
	var v struct {
		Providers []struct {
			Name    string `json:"name"`
			Breaker struct {
				State string `json:"state"`
			} `json:"breaker"`
		} `json:"providers"`
	}
	getJSON(t, c.http+"/providers", &v)
	for _, p := range v.Providers {
		if p.Name == provider {
			return p.Breaker.State
		}
	}
	return ""
}

func pullsOf(t *testing.T, c *controller, category, model string) int64 {
	var v struct {
		Models []struct {
			ID   string `json:"id"`
			Arms map[string]struct {
				Pulls int64 `json:"pulls"`
			} `json:"arms"`
		} `json:"models"`
	}
	getJSON(t, c.http+"/models?category="+category, &v)
	for _, m := range v.Models {
		if m.ID == model {
			return m.Arms[category].Pulls
		}
	}
	return -1
}

// TestThreeControllersShareOneDatabaseAndOneRedis starts three controllers on loopback sharing one
// PostgreSQL and one Redis: requests spread over all three, an arm learned through one is visible in the
// others, a remote message to one answers, one is killed mid-load while the others keep answering and
// every answered request has its record, and a breaker opened by one controller is honoured by all.
func TestThreeControllersShareOneDatabaseAndOneRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four controller processes")
	}
	_, prefix := redistest.New(t)
	db := pgtest.New(t, true)
	bin := sshtest.BuildConclave(t, t.TempDir())
	dir := t.TempDir()
	writeConfig := func(name string, faults float64) string {
		limits := map[string]any{}
		for _, p := range []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"} {
			limits[p] = map[string]any{"requests_per_minute": 100000, "concurrency": 256}
		}
		raw, _ := json.Marshal(map[string]any{"redis_prefix": prefix, "arms_refresh_seconds": 0.2, "rate_limits": limits,
			"sim": map[string]any{"latency_scale": 0.01, "faults": map[string]any{"server_error_rate": faults}}})
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	env := []string{"DATABASE_URL=" + db.Reveal(), "REDIS_URL=" + redistest.URL(), "CONCLAVE_SPOOL_PATH=" + filepath.Join(dir, "spool")}
	nodes := []*controller{}
	for _, name := range []string{"ctl-a", "ctl-b", "ctl-c"} {
		nodes = append(nodes, startController(t, bin, name, append(env, "CONCLAVE_SPOOL_PATH="+filepath.Join(dir, name+".spool")), writeConfig(name, 0)))
	}
	a, b, c := nodes[0], nodes[1], nodes[2]

	// Load round-robin over the three, as a balancer would: a controller that does not answer is
	// skipped for the next. C is killed a third of the way through.
	const total = 240
	var next, answered, refused atomic.Int64
	var mu sync.Mutex
	ids := map[string]bool{}
	var cDead atomic.Bool
	var wg sync.WaitGroup
	task := "Which is larger?\nA) 2^10\nB) 10^3\nC) 1000"
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				if i == total/3 && cDead.CompareAndSwap(false, true) {
					_ = c.cmd.Process.Kill() // SIGKILL: no shutdown, no flush
				}
				for try := range 3 {
					n := nodes[(int(i)+try)%3]
					status, body, err := post(n.http, map[string]any{"task": task, "category": "general", "workers": 3, "min_responses": 2})
					if err != nil {
						continue // the connection failed: the next controller takes it
					}
					if status != http.StatusOK {
						refused.Add(1)
						break
					}
					answered.Add(1)
					mu.Lock()
					ids[body["request_id"].(string)] = true
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	if refused.Load() > 0 || answered.Load() != total {
		t.Fatalf("%d answered, %d refused of %d", answered.Load(), refused.Load(), total)
	}

	// Every answered request has its record: A's and B's within a moment, C's up to its last
	// ShipInterval before the kill, and the rest, which its spool kept, once C starts again on it.
	conn, err := pgx.Connect(context.Background(), db.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	byNode := map[string]int{}
	var missing []string
	deadline := time.Now().Add(10 * time.Second)
	restarted := false
	for {
		byNode = map[string]int{}
		rows, err := conn.Query(context.Background(), `SELECT request_id, node_id FROM workflow.executions`)
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string]bool{}
		var id, node string
		if _, err := pgx.ForEachRow(rows, []any{&id, &node}, func() error { stored[id] = true; byNode[node]++; return nil }); err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for id := range ids {
			if !stored[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		if !restarted && time.Now().After(deadline.Add(-8*time.Second)) {
			t.Logf("%d answered records are not in the database 2 s after the load: ctl-c starts again on its spool", len(missing))
			startController(t, bin, "ctl-c", append(env, "CONCLAVE_SPOOL_PATH="+filepath.Join(dir, "ctl-c.spool")), writeConfig("ctl-c", 0))
			restarted = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d requests answered: %v by node; %d answered records missing", total, byNode, len(missing))
	if byNode["ctl-a"] == 0 || byNode["ctl-b"] == 0 || byNode["ctl-c"] == 0 {
		t.Fatalf("requests did not spread over the three: %v", byNode)
	}
	if len(missing) > 0 {
		t.Fatalf("%d answered requests have no record (of %d by ctl-c)", len(missing), byNode["ctl-c"])
	}

	// An arm learned through A is visible in B.
	model := "llama3.1-8b"
	before := pullsOf(t, b, "testing", model)
	if status, _, err := post(a.http, map[string]any{"task": task, "category": "testing", "models": []string{model}, "workers": 1, "min_responses": 1}); err != nil || status != http.StatusOK {
		t.Fatalf("a: %d %v", status, err)
	}
	learned := time.Now()
	for pullsOf(t, b, "testing", model) <= before {
		if time.Since(learned) > 10*time.Second {
			t.Fatal("b never saw what a learned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("an arm learned through ctl-a was visible in ctl-b after %v", time.Since(learned).Round(time.Millisecond))

	// A request sent as a remote message to B answers.
	out, err := exec.Command(bin, "route", "--remote", b.remote, "--json", "--category", "general", task).Output()
	var rec struct {
		NodeID string `json:"node_id"`
		Answer string `json:"answer"`
	}
	if err != nil || json.Unmarshal(out, &rec) != nil || rec.NodeID != "ctl-b" || rec.Answer == "" {
		t.Fatalf("remote to b: %v: %s", err, out)
	}

	// A breaker opened by one controller is honoured by all: D's calls all fail, so its groq breaker
	// opens, and A's and B's follow.
	d := startController(t, bin, "ctl-d", append(env, "CONCLAVE_SPOOL_PATH="+filepath.Join(dir, "d.spool")), writeConfig("ctl-d", 1))
	groq := []string{"llama-3.1-8b-instant", "llama-3.3-70b-versatile", "gemma2-9b-it"}
	for range 3 {
		_, _, _ = post(d.http, map[string]any{"task": task, "category": "general", "models": groq, "workers": 3, "min_responses": 1})
		if breakerOf(t, d, "groq") == "open" {
			break
		}
	}
	if s := breakerOf(t, d, "groq"); s != "open" {
		t.Fatalf("d's groq breaker is %s", s)
	}
	opened := time.Now()
	for _, n := range []*controller{a, b} {
		for breakerOf(t, n, "groq") != "open" {
			if time.Since(opened) > 10*time.Second {
				t.Fatalf("%s never honoured d's open breaker", n.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("a and b honoured ctl-d's open groq breaker after %v", time.Since(opened).Round(time.Millisecond))
	if s := breakerOf(t, a, "cerebras"); s != "closed" {
		t.Fatalf("a's cerebras breaker is %s", s)
	}
}
