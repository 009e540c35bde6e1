package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/classify"
)

func TestVersionAndUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out.Reset()
		if err := run(context.Background(), args, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "conclave ") {
			t.Fatalf("%v: %v %q", args, err, out.String())
		}
	}
	// --help on every command succeeds and shows the defaults, with the environment variables of serve.
	for args, want := range map[string][]string{
		"serve --help":   {"--listen", "CONCLAVE_LISTEN", "127.0.0.1:5000", "CONCLAVE_NODE_ID", "CONCLAVE_API_TOKEN", "CONCLAVE_CONFIG", "--fleet", "CONCLAVE_FLEET", "--dev-insecure-host-keys"},
		"eval --help":    {"-data", "../shared/data/replay", "-workers", "-seeds"},
		"help":           {"conclave serve", "conclave eval", "conclave migrate", "conclave records prune", "conclave worker"},
		"worker --help":  {"authorized_keys", "command="},
		"migrate --help": {"up", "down", "status", "DATABASE_URL", "advisory lock"},
		"records --help": {"--older-than", "--batch"},
		"--help":         {"conclave serve"},
	} {
		out.Reset()
		if err := run(context.Background(), strings.Fields(args), &out, &errOut); err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Fatalf("%s does not show %q:\n%s", args, w, out.String())
			}
		}
	}
	if err := run(context.Background(), []string{"frobnicate"}, &out, &errOut); err == nil || !strings.Contains(errOut.String(), "conclave serve") {
		t.Fatalf("unknown command: %v %q", err, errOut.String())
	}
	if err := run(context.Background(), nil, &out, &errOut); err == nil {
		t.Fatal("no command accepted")
	}
}

// lockedBuffer collects the server's log lines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReadmeQuickStart runs `conclave serve` as the README says and sends the README's example request.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "go run ./cmd/conclave serve") || !strings.Contains(string(readme), "make test") {
		t.Fatal("the README's first commands changed; update this test")
	}
	example := regexp.MustCompile(`curl -s localhost:5000/route-thompson -H 'Content-Type: application/json' -d '([^']+)'`).FindSubmatch(readme)
	if example == nil {
		t.Fatal("no route-thompson curl example in the README")
	}

	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0"}, io.Discard, logs) }()
	var addr string
	deadline := time.Now().Add(30 * time.Second)
	for addr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start:\n%s", logs.String())
		}
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["event"] == "server_listening" {
				addr, _ = line["address"].(string)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Post(addr+"/route-thompson", "application/json", bytes.NewReader(example[1]))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Answer    string `json:"answer"`
		RequestID string `json:"request_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || body.Answer == "" {
		t.Fatalf("README example: %d %v %+v", resp.StatusCode, err, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
	if !strings.Contains(logs.String(), `"event":"engine_stopped"`) {
		t.Fatal("no engine_stopped event")
	}
}

func TestEvalCommand(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	var raw bytes.Buffer
	gz := gzip.NewWriter(&raw)
	for i := 0; i < 150; i++ {
		gold := []string{"A", "B", "C"}[i%3]
		wrong := []string{"B", "C", "A"}[i%3]
		fmt.Fprintf(gz, `{"id":"quiz/%d","dataset":"quiz","category":"quiz","kind":"choice","prompt":"Q%d?","gold":%q,"responses":{"sharp":{"answer":%q},"dull":{"answer":%q},"also-sharp":{"answer":%q}}}`+"\n",
			i, i, gold, gold, wrong, gold)
	}
	gz.Close()
	if err := os.WriteFile(filepath.Join(dir, "quiz.dev.jsonl.gz"), raw.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"eval", "--data", dir, "--datasets", "quiz", "--runs", "thompson/agreement,uniform/agreement",
		"--workers", "2", "--min-responses", "1", "--out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, f := range []string{"report.json", "report.md", "report.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "| best single model in hindsight | 100.0% | 100.0% |") {
		t.Fatalf("table:\n%s", stdout.String())
	}
	if err := run(context.Background(), []string{"eval", "--data", filepath.Join(dir, "none")}, &stdout, &stderr); err == nil {
		t.Fatal("a missing data directory was accepted")
	}
}

// serving runs `conclave serve` with args until the test ends and returns what it printed once the
// listen address is out, and the address.
func serving(t *testing.T, args ...string) (*lockedBuffer, string) {
	out, _, addr := servingWithLogs(t, args...)
	return out, addr
}

// servingWithLogs is serving with the server's logs too.
func servingWithLogs(t *testing.T, args ...string) (out, logs *lockedBuffer, addr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, logs = &lockedBuffer{}, &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), out, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	pattern := regexp.MustCompile(`conclave listening on (http://127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(30 * time.Second)
	var m []string
	for m = pattern.FindStringSubmatch(out.String()); m == nil; m = pattern.FindStringSubmatch(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no address printed: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return out, logs, m[1]
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTheAddressIsPrintedAtEveryLogLevel starts the server with only errors logged: it still says where
// it listens.
func TestTheAddressIsPrintedAtEveryLogLevel(t *testing.T) {
	_, addr := serving(t, "--log-level", "error")
	if status := get(t, addr+"/healthz"); status != http.StatusOK {
		t.Fatalf("the printed address answers %d", status)
	}
}

// Every log line of a controller names it: logs of several controllers can be read together.
func TestEveryLogLineCarriesTheNodeID(t *testing.T) {
	_, logs, addr := servingWithLogs(t, "--node-id", "ctl-x", "--sim-latency-scale", "0")
	resp, err := http.Post(addr+"/route-thompson", "application/json", strings.NewReader(`{"task": "Is 7 prime?\nA) yes\nB) no"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The log is written through a buffer flushed every 100 ms: wait for the request's last line.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), `"request_completed"`) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		lines++
		if entry["node_id"] != "ctl-x" {
			t.Fatalf("a line without the node id: %s", line)
		}
	}
	if lines < 5 {
		t.Fatalf("%d log lines", lines)
	}
}

// TestPprofOnlyOnTheDebugListener: pprof is off by default, and when asked for it is served on its own
// loopback listener, never on the API's.
func TestPprofOnlyOnTheDebugListener(t *testing.T) {
	out, addr := serving(t, "--debug-listen", "127.0.0.1:0")
	if status := get(t, addr+"/debug/pprof/"); status != http.StatusNotFound {
		t.Fatalf("the API serves pprof: %d", status)
	}
	m := regexp.MustCompile(`pprof on (http://127\.0\.0\.1:\d+)/debug/pprof/`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no debug address printed: %q", out.String())
	}
	if status := get(t, m[1]+"/debug/pprof/goroutine?debug=1"); status != http.StatusOK {
		t.Fatalf("the debug listener answers %d", status)
	}
	_, plain := serving(t)
	if status := get(t, plain+"/debug/pprof/"); status != http.StatusNotFound {
		t.Fatalf("pprof without --debug-listen: %d", status)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--debug-listen", "0.0.0.0:6060"}, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a debug listener beyond loopback was accepted: %v", err)
	}
}

// TestTheReadmeNamesTheBlueprintsClassificationNeverPicks compares the README with the classifier's
// categories and the embedded blueprints.
func TestClassificationCanPickEveryBlueprint(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	set, err := blueprints.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	picked := map[string]bool{}
	for _, c := range classify.Categories {
		picked[string(c)] = true
	}
	for _, name := range set.Names() {
		if !picked[name] {
			t.Errorf("classification never picks the blueprint %s", name)
		}
	}
	if want := fmt.Sprintf("one of the %d blueprints", len(set.Names())); !strings.Contains(string(readme), want) {
		t.Errorf("the README does not say %q", want)
	}
}

// TestRouteCommand sends tasks to a running server: the live view shows each model's status and the
// answer, --json prints the response, flags become request fields, and a refusal is an error.
func TestRouteCommand(t *testing.T) {
	_, addr := serving(t, "--sim-latency-scale", "0")
	const task = "A warehouse robot must choose a route.\nA) north aisle\nB) south aisle\nC) loading dock"
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"route", "--server", addr, task, "--category", "general", "--workers", "3", "--min-responses", "2"}, &out, &errs); err != nil {
		t.Fatalf("%v: %s", err, errs.String())
	}
	text := out.String()
	for _, want := range []string{"classified as general", "blueprint general, ", "asking 3 models", "waiting on ", "answered in ", "consensus (", "answer ("} {
		if !strings.Contains(text, want) {
			t.Fatalf("the live view lacks %q:\n%s", want, text)
		}
	}
	// A majority vote says how many of the best-learned answers decided it.
	out.Reset()
	if err := run(context.Background(), []string{"route", "--server", addr, task, "--category", "general", "--workers", "3", "--min-responses", "2",
		"--strategy", "majority"}, &out, &errs); err != nil || !strings.Contains(out.String(), " agree, 2 decided, ") {
		t.Fatalf("a majority vote's answer line (%v):\n%s", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"route", "--json", "--server", addr, "--workers", "2", "--min-responses", "1", "--metadata", `{"answer_kind":"choice"}`, task}, &out, &errs); err != nil {
		t.Fatalf("%v: %s", err, errs.String())
	}
	var resp struct {
		Answer    string `json:"answer"`
		Blueprint struct {
			Workers      int `json:"workers"`
			MinResponses int `json:"min_responses"`
		} `json:"blueprint"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil || resp.Answer == "" || resp.Blueprint.Workers != 2 || resp.Blueprint.MinResponses != 1 {
		t.Fatalf("--json printed %s (%v)", out.String(), err)
	}
	out.Reset()
	err := run(context.Background(), []string{"route", "--server", addr, "--category", "astrology", task}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("an unknown category: %v\n%s", err, out.String())
	}
	if err := run(context.Background(), []string{"route", "--server", addr}, &out, &errs); err == nil {
		t.Fatal("a missing task was accepted")
	}
}

// A client that trickles its body is cut off at the read timeout instead of holding its connection.
func TestATricklingClientIsCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(path, []byte(`{"read_timeout_seconds": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := serving(t, "--config", path)
	conn, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /route-thompson HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{")
	cut := false
	for range 40 { // up to 10 s of a byte every 250 ms
		time.Sleep(250 * time.Millisecond)
		if _, err := conn.Write([]byte(" ")); err != nil {
			cut = true
			break
		}
	}
	if !cut {
		// The server may answer the read error before closing: a read sees the end either way.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				cut = !errors.Is(err, os.ErrDeadlineExceeded)
				break
			}
		}
	}
	if !cut {
		t.Fatal("a client trickling its body kept its connection")
	}
}

// Past max_connections a new connection waits to be accepted: it is answered once a held one closes.
func TestConnectionsPastTheLimitWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(path, []byte(`{"max_connections": 2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := serving(t, "--config", path)
	host := strings.TrimPrefix(addr, "http://")
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	// Two connections that have sent half a request hold both places; each is answered once complete.
	held := []net.Conn{dial(), dial()}
	for _, c := range held {
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	}
	third := dial()
	fmt.Fprint(third, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(third).ReadString('\n')
		answered <- line
	}()
	select {
	case line := <-answered:
		t.Fatalf("a third connection was served past max_connections 2: %q", line)
	case <-time.After(time.Second):
	}
	held[0].Close()
	select {
	case line := <-answered:
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("the waiting connection got %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not served after a held one closed")
	}
}
