//go:build !fuzz

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
)

// clientOutcome is what a client's contract script printed for one case.
type clientOutcome struct {
	Text      json.RawMessage   `json:"text"`
	ID        string            `json:"id"`
	Headers   map[string]string `json:"headers"`
	Usage     map[string]any    `json:"usage"`
	ToolCalls []struct {
		ID, Name string
		Input    map[string]any `json:"input"`
	} `json:"toolCalls"`
	Error *struct {
		Class, Message string
		Status         int
	} `json:"error"`
}

// text is the answer's text (LangChain's content may be a string or parts).
func (o clientOutcome) text(t *testing.T) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(o.Text, &s); err != nil {
		t.Fatalf("the text %s is not a string", o.Text)
	}
	return s
}

// runClient runs one case of a client's contract script against Conclave.
func runClient(t *testing.T, node string, sdk nodeSDKCase, u *upstreams, name string) clientOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "contract.mjs", name)
	cmd.Dir = sdk.dir
	base, checkSpec := specProxy(t, u.srv.URL) // every answer the client is given is checked against the specification
	defer checkSpec(true)
	cmd.Env = append(os.Environ(), "CONCLAVE_BASE_URL="+base+"/v1", "CONCLAVE_API_KEY="+sdkToken, "CONCLAVE_MODEL="+directModel)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s/contract.mjs %s: %v\n%s", sdk.dir, name, err, stderr.String())
	}
	var out clientOutcome
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node %s/contract.mjs %s printed %q: %v\n%s", sdk.dir, name, stdout.String(), err, stderr.String())
	}
	if out.Error != nil {
		t.Fatalf("%s %s: the application got %+v", sdk.name, name, *out.Error)
	}
	return out
}

// TestTheVercelAISDKAndLangChainUseConclave: the Vercel AI SDK's OpenAI provider and LangChain's
// ChatOpenAI, unchanged but for their base URL, ask Conclave a direct call and a panel, stream one and
// have a tool called; the AI SDK reads the panel in Conclave's headers, which LangChain's messages have
// no place for (its body's conclave field it drops).
func TestTheVercelAISDKAndLangChainUseConclave(t *testing.T) {
	u := contractUpstreams(t)
	for _, sdk := range []nodeSDKCase{
		{name: "ai", dir: filepath.Join("testdata", "aisdk-node"), install: "scripts/node-clients.sh"},
		{name: "@langchain/openai", dir: filepath.Join("testdata", "langchain-node"), install: "scripts/node-clients.sh"},
	} {
		t.Run(sdk.name, func(t *testing.T) {
			node := pinnedNodeSDK(t, sdk)
			aiSDK := sdk.name == "ai"
			t.Run("a direct call", func(t *testing.T) {
				out := runClient(t, node, sdk, u, "text")
				if rec := u.record(out.ID); out.text(t) == "" || rec["answer"] != out.text(t) {
					t.Fatalf("the application read %q, the record says %v", out.text(t), rec["answer"])
				}
				if len(out.Usage) == 0 {
					t.Fatalf("no usage: %+v", out)
				}
				if aiSDK && (out.Headers["x-conclave-request-id"] != out.ID || out.Headers["x-conclave-models"] != directModel || out.Headers["x-conclave-cost-usd"] == "") {
					t.Fatalf("the headers %v", out.Headers)
				}
			})
			t.Run("a panel", func(t *testing.T) {
				out := runClient(t, node, sdk, u, "panel")
				if out.text(t) == "" {
					t.Fatalf("an empty answer: %+v", out)
				}
				if aiSDK && (len(strings.Split(out.Headers["x-conclave-models"], ",")) < 2 || out.Headers["x-conclave-chosen-model"] == "" || out.Headers["x-conclave-agreement"] == "") {
					t.Fatalf("the panel's headers %v", out.Headers)
				}
			})
			t.Run("a stream", func(t *testing.T) {
				out := runClient(t, node, sdk, u, "stream")
				if out.text(t) == "" || aiSDK && u.record(out.ID)["answer"] != out.text(t) {
					t.Fatalf("streamed %q", out.text(t))
				}
			})
			t.Run("a tool call", func(t *testing.T) {
				u.local.Queue(providertest.Response{ToolCalls: []providertest.ToolCall{{ID: "call_7", Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
				out := runClient(t, node, sdk, u, "tools")
				if len(out.ToolCalls) != 1 || out.ToolCalls[0].Name != "get_weather" || out.ToolCalls[0].Input["city"] != "Paris" || out.ToolCalls[0].ID != "call_7" {
					t.Fatalf("the tool calls %+v", out.ToolCalls)
				}
			})
		})
	}
}
