//go:build !fuzz

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv"
)

// A spent budget, as the official Node SDKs hear it at their default retry settings: the refusal (429,
// x-should-retry: false, no Retry-After) reaches the application within a second of its call, after
// the one request it sent. Each SDK runs a script (budget.mjs in its folder) that calls its door once
// and prints how long the call took, measured around the call in the script; scripts/services.sh
// installs both SDKs at their pinned versions (scripts/node-clients.sh).

// nodeSDKCase is one official Node SDK and the door it calls.
type nodeSDKCase struct {
	name    string // the SDK's package
	dir     string // the folder of its pinned installation and its script
	install string // the script that installs it
	path    string // the door it calls
	base    string // its base URL's path
	model   string
	// The error it must raise for a spent budget: its class, and the type and code it reads.
	class, typ, code string
	// retries is how many times it asks again at its default settings whatever x-should-retry says (the
	// Vercel AI SDK retries every 429 twice, with backoff): each is refused as freely as the first.
	retries int
}

var budgetNodeSDKs = []nodeSDKCase{
	{name: "openai", dir: filepath.Join("testdata", "openai-node"), install: "scripts/node-clients.sh", path: "/v1/chat/completions", base: "/v1",
		model: "openai/gpt-4o-mini", class: "RateLimitError", typ: "insufficient_quota", code: "budget_exceeded"},
	{name: "@anthropic-ai/sdk", dir: filepath.Join("testdata", "anthropic-node"), install: "scripts/node-clients.sh", path: "/v1/messages",
		model: "claude-3-5-haiku-20241022", class: "RateLimitError", typ: "rate_limit_error", code: "budget_exceeded"},
	{name: "@langchain/openai", dir: filepath.Join("testdata", "langchain-node"), install: "scripts/node-clients.sh", path: "/v1/chat/completions",
		base: "/v1", model: "openai/gpt-4o-mini", class: "RateLimitError", typ: "insufficient_quota", code: "budget_exceeded"},
	{name: "ai", dir: filepath.Join("testdata", "aisdk-node"), install: "scripts/node-clients.sh", path: "/v1/chat/completions", base: "/v1",
		model: "openai/gpt-4o-mini", class: "RetryError", typ: "insufficient_quota", code: "budget_exceeded", retries: 2},
}

// budgetNodeAdmin is the admin token of the testbed that makes the keys.
const budgetNodeAdmin = "budget-node-admin-0123456789"

// pinnedNodeSDK returns the node binary, once it and the SDK at the version its folder pins are
// installed; without them the test is Missing: skipped on a user's machine, failed in CI.
func pinnedNodeSDK(t *testing.T, sdk nodeSDKCase) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed (scripts/services.sh installs it)")
	}
	var pkg, installed struct {
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
	}
	raw, err := os.ReadFile(filepath.Join(sdk.dir, "package.json"))
	if err != nil || json.Unmarshal(raw, &pkg) != nil || pkg.Dependencies[sdk.name] == "" {
		t.Fatalf("%s/package.json pins no %s: %v", sdk.dir, sdk.name, err)
	}
	raw, err = os.ReadFile(filepath.Join(sdk.dir, "node_modules", filepath.FromSlash(sdk.name), "package.json"))
	if err != nil || json.Unmarshal(raw, &installed) != nil || installed.Version != pkg.Dependencies[sdk.name] {
		testenv.Missing(t, "%s %s is not installed in %s (found %q): run %s", sdk.name, pkg.Dependencies[sdk.name], sdk.dir, installed.Version, sdk.install)
	}
	return node
}

// budgetOutcome is what budget.mjs printed: how long its one call took, and its answer or its error.
type budgetOutcome struct {
	ElapsedMS *float64 `json:"elapsed_ms"`
	Answer    *struct {
		ID      string  `json:"id"`
		Content *string `json:"content"`
	} `json:"answer"`
	Error *struct {
		Class       string  `json:"class"`
		Status      int     `json:"status"`
		Type        string  `json:"type"`
		Code        string  `json:"code"`
		Message     string  `json:"message"`
		ShouldRetry *string `json:"should_retry"`
		RetryAfter  *string `json:"retry_after"`
	} `json:"error"`
}

// doorCounter sits in front of a testbed's handler and counts the requests each path receives.
type doorCounter struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *doorCounter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[path]
}

// runBudgetScript runs an SDK's budget.mjs once against url with a key. The child sees none of the
// machine's OpenAI or Anthropic settings: only the base URL, key and model the test gives.
func runBudgetScript(t *testing.T, node string, sdk nodeSDKCase, url, key string) budgetOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "budget.mjs")
	cmd.Dir = sdk.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "ANTHROPIC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CONCLAVE_BASE_URL="+url+sdk.base, "CONCLAVE_API_KEY="+key, "CONCLAVE_MODEL="+sdk.model)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s/budget.mjs: %v\n%s", sdk.dir, err, stderr.String())
	}
	var out budgetOutcome
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.ElapsedMS == nil || (out.Answer == nil) == (out.Error == nil) {
		t.Fatalf("node %s/budget.mjs printed %q: %v\n%s", sdk.dir, stdout.String(), err, stderr.String())
	}
	return out
}

func TestNodeSDKsHearASpentBudgetAtOnce(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.APIToken = secret.String(budgetNodeAdmin) })
	doors := &doorCounter{seen: map[string]int{}}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doors.mu.Lock()
		doors.seen[r.URL.Path]++
		doors.mu.Unlock()
		tb.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	checked, checkSpec := specProxy(t, front.URL) // what each SDK is given is checked against its specification
	newKey := func(name string, budget json.Number) string {
		var k struct {
			Key string `json:"key"`
		}
		resp, raw := tb.do(http.MethodPost, "/admin/keys", map[string]any{"name": name, "budget_usd": budget, "budget_period": "1d"}, &k)
		if resp.StatusCode != http.StatusCreated || k.Key == "" {
			t.Fatalf("POST /admin/keys: %d %s", resp.StatusCode, raw)
		}
		return k.Key
	}

	for _, sdk := range budgetNodeSDKs {
		t.Run(sdk.name, func(t *testing.T) {
			node := pinnedNodeSDK(t, sdk)

			// The control: a key whose budget has room, so a refusal below is the budget's.
			t.Run("a budget with room answers", func(t *testing.T) {
				before := doors.count(sdk.path)
				out := runBudgetScript(t, node, sdk, checked, newKey(sdk.name+" with room", "1"))
				checkSpec(true)
				if out.Error != nil || out.Answer.ID == "" || out.Answer.Content == nil || *out.Answer.Content == "" {
					t.Fatalf("the application got %+v %+v", out.Answer, out.Error)
				}
				if n := doors.count(sdk.path) - before; n != 1 {
					t.Fatalf("%s received %d requests for one call", sdk.path, n)
				}
				t.Logf("%s answered in %.1f ms", sdk.name, *out.ElapsedMS)
			})

			// One call's worst case (its prompt and 16 output tokens at the model's price) is above
			// $0.0000001: the first call is refused before any model is called.
			t.Run("a spent budget is refused before any model is called, each try", func(t *testing.T) {
				before, calls := doors.count(sdk.path), tb.modelCalls()
				out := runBudgetScript(t, node, sdk, checked, newKey(sdk.name+" spent", "0.0000001"))
				checkSpec(false)
				e := out.Error
				if e == nil || e.Class != sdk.class || e.Status != http.StatusTooManyRequests || e.Type != sdk.typ || e.Code != sdk.code ||
					!strings.Contains(e.Message, "starts again at") {
					t.Fatalf("the application got %+v %+v", out.Answer, out.Error)
				}
				if e.ShouldRetry == nil || *e.ShouldRetry != "false" || e.RetryAfter != nil {
					t.Errorf("the refusal's headers: x-should-retry %v, retry-after %v", e.ShouldRetry, e.RetryAfter)
				}
				if n := doors.count(sdk.path) - before; n != 1+sdk.retries {
					t.Fatalf("%s received %d requests for one call, want %d", sdk.path, n, 1+sdk.retries)
				}
				if n := tb.modelCalls() - calls; n != 0 {
					t.Fatalf("the refused requests called %v models", n)
				}
				if sdk.retries == 0 && *out.ElapsedMS >= 1000 {
					t.Fatalf("the application heard the refusal after %.1f ms", *out.ElapsedMS)
				}
				t.Logf("%s heard the refusal after %.1f ms", sdk.name, *out.ElapsedMS)
			})
		})
	}
}
