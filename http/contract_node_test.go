//go:build !fuzz

package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
)

// nodeContract is where the OpenAI Node SDK's contract script and its pinned installation live.
var nodeContract = filepath.Join("testdata", "openai-node")

// nodeSDK returns the node binary, once it and the pinned SDK are installed (scripts/services.sh
// installs both; scripts/node-clients.sh the clients alone). Without them the test is Missing: skipped on
// a user's machine, failed in CI.
func nodeSDK(t *testing.T) string {
	t.Helper()
	return pinnedNodeSDK(t, nodeSDKCase{name: "openai", dir: nodeContract, install: "scripts/node-clients.sh"})
}

// nodeOutcome is what the Node script printed: the completions the client got, or its error.
type nodeOutcome struct {
	Completions []json.RawMessage `json:"completions"`
	Error       *struct {
		Class   string `json:"class"`
		Status  int    `json:"status"`
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// runNode runs one case of the contract script against Conclave.
func runNode(t *testing.T, node string, u *upstreams, name string) nodeOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "contract.mjs", name)
	cmd.Dir = nodeContract
	base, checkSpec := specProxy(t, u.srv.URL) // every answer the client is given is checked against the specification
	cmd.Env = append(os.Environ(), "CONCLAVE_BASE_URL="+base+"/v1", "CONCLAVE_API_KEY="+sdkToken, "CONCLAVE_MODEL="+directModel,
		"CONCLAVE_PNG="+pixelPNG)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node contract.mjs %s: %v\n%s", name, err, stderr.String())
	}
	var out nodeOutcome
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node contract.mjs %s printed %q: %v\n%s", name, stdout.String(), err, stderr.String())
	}
	if out.Error == nil && len(out.Completions) == 0 {
		t.Fatalf("node contract.mjs %s printed nothing to check: %s", name, stdout.String())
	}
	checkSpec(out.Error == nil)
	return out
}

// nodeCompletion is a completion as the Node client got it.
type nodeCompletion struct {
	ID      string `json:"id"`
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Conclave map[string]any `json:"conclave"`
}

func completionOf(t *testing.T, raw json.RawMessage) nodeCompletion {
	t.Helper()
	var c nodeCompletion
	if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("completion %s: %v", raw, err)
	}
	return c
}

// The official OpenAI Node SDK, run by node, against Conclave over a loopback OpenAI-format upstream:
// the same cases as openai-go's (TestOpenAIGoContract), and an error of an unknown path.
func TestOpenAINodeSDKContract(t *testing.T) {
	node := nodeSDK(t)
	u := contractUpstreams(t)

	t.Run("parameters arrive mapped on a direct call", func(t *testing.T) {
		out := runNode(t, node, u, "parameters")
		if out.Error != nil {
			t.Fatalf("%+v", out.Error)
		}
		c := completionOf(t, out.Completions[0])
		if c.Choices[0].Message.Content == nil || *c.Choices[0].Message.Content == "" || !sameJSON(c.Conclave["models_asked"], []string{directModel}) {
			t.Fatalf("the client got %s", out.Completions[0])
		}
		body := sent(t, u.local)
		if body["temperature"] != 0.1 || body["max_tokens"] != 5.0 {
			t.Fatalf("the upstream received %v", body)
		}
		t.Run("top_p and stop", func(t *testing.T) {
			if body["top_p"] != 0.5 || !sameJSON(body["stop"], []string{"END"}) {
				t.Fatalf("the upstream received %v", body)
			}
		})
	})

	t.Run("a two-turn tool conversation round-trips", func(t *testing.T) {
		u.local.Queue(providertest.Response{Body: toolCallCompletion(directModel, "call_7", "get_weather", `{"city":"Paris"}`)},
			providertest.Response{Body: providertest.ChatCompletion(directModel, "It is 21 C and sunny in Paris.", 30, 9)})
		out := runNode(t, node, u, "tools")
		if out.Error != nil || len(out.Completions) != 2 {
			t.Fatalf("%+v %s", out.Error, out.Completions)
		}
		first, second := completionOf(t, out.Completions[0]), completionOf(t, out.Completions[1])
		if m := first.Choices[0].Message; first.Choices[0].FinishReason != "tool_calls" || m.Content != nil || len(m.ToolCalls) != 1 ||
			m.ToolCalls[0].ID != "call_7" || m.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` {
			t.Fatalf("first answer %s", out.Completions[0])
		}
		if m := second.Choices[0].Message; m.Content == nil || *m.Content != "It is 21 C and sunny in Paris." {
			t.Fatalf("second answer %s", out.Completions[1])
		}
		calls := u.local.Requests()
		var firstBody map[string]any
		_ = json.Unmarshal(calls[len(calls)-2].Body, &firstBody)
		if tools, _ := firstBody["tools"].([]any); len(tools) != 1 {
			t.Fatalf("the upstream received tools %v", firstBody["tools"])
		}
		turns, _ := sent(t, u.local)["messages"].([]any)
		if len(turns) != 3 {
			t.Fatalf("the upstream received %v", turns)
		}
		if a, _ := turns[1].(map[string]any); a["role"] != "assistant" || !sameJSON(a["tool_calls"], []any{map[string]any{"id": "call_7", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}) {
			t.Fatalf("the assistant's turn reached the upstream as %v", a)
		}
		if tool, _ := turns[2].(map[string]any); tool["role"] != "tool" || tool["tool_call_id"] != "call_7" || tool["content"] != "21 C and sunny" {
			t.Fatalf("the tool's turn reached the upstream as %v", tool)
		}
	})

	t.Run("a JSON schema answer validates", func(t *testing.T) {
		u.local.Queue(providertest.Response{Body: providertest.ChatCompletion(directModel, `{"temp_c": 21.5, "city": "Paris"}`, 20, 9)})
		out := runNode(t, node, u, "json_schema")
		if out.Error != nil {
			t.Fatalf("%+v", out.Error)
		}
		c := completionOf(t, out.Completions[0])
		if c.Choices[0].Message.Content == nil {
			t.Fatalf("the client got %s", out.Completions[0])
		}
		validates(t, weatherSchema, *c.Choices[0].Message.Content)
		format, _ := sent(t, u.local)["response_format"].(map[string]any)
		if js, _ := format["json_schema"].(map[string]any); format["type"] != "json_schema" || js["name"] != "weather" || !sameJSON(js["schema"], weatherSchema) {
			t.Fatalf("the upstream received response_format %v", format)
		}
	})

	t.Run("an image part arrives", func(t *testing.T) {
		out := runNode(t, node, u, "image")
		if out.Error != nil {
			t.Fatalf("%+v", out.Error)
		}
		turns, _ := sent(t, u.local)["messages"].([]any)
		if len(turns) != 1 || !sameJSON(turns[0], map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What is in this image?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + pixelPNG, "detail": "low"}},
		}}) {
			t.Fatalf("the upstream received %v", turns)
		}
	})

	t.Run("an unknown path is an error of OpenAI's type", func(t *testing.T) {
		before := len(u.local.Requests())
		out := runNode(t, node, u, "unknown_path")
		if e := out.Error; e == nil || e.Class != "NotFoundError" || e.Status != 404 || e.Type != "not_found_error" || e.Code != "unknown_url" ||
			!strings.Contains(e.Message, "/v1/no-such-endpoint") {
			t.Fatalf("the client got %+v %s", out.Error, out.Completions)
		}
		if len(u.local.Requests()) != before {
			t.Fatal("an unknown path reached the upstream")
		}
	})

	t.Run("a stream's first piece comes before the upstream ends", func(t *testing.T) {
		const answer = "Nitrogen makes up most of the air."
		pace := make(chan struct{}, 1)
		pace <- struct{}{} // the role's event and the first word's go; the rest wait
		finished := u.local.Finished()
		u.local.Queue(providertest.Response{Text: answer, Pace: pace})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "contract.mjs", "stream")
		cmd.Dir = nodeContract
		cmd.Env = append(os.Environ(), "CONCLAVE_BASE_URL="+u.srv.URL+"/v1", "CONCLAVE_API_KEY="+sdkToken, "CONCLAVE_MODEL="+directModel)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		stdin, err1 := cmd.StdinPipe()
		stderr, err2 := cmd.StderrPipe()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		said := bufio.NewScanner(stderr)
		if !said.Scan() || said.Text() != "first" {
			t.Fatalf("the script said %q before its first piece", said.Text())
		}
		if n := u.local.Finished() - finished; n != 0 {
			t.Fatalf("the upstream finished %d calls before the client's first piece", n)
		}
		close(pace)
		fmt.Fprintln(stdin, "go on")
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("node contract.mjs stream: %v", err)
		}
		var out struct {
			Completions []struct {
				ID    string         `json:"id"`
				Text  string         `json:"text"`
				Usage map[string]any `json:"usage"`
			} `json:"completions"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Completions) != 1 {
			t.Fatalf("the script printed %q: %v", stdout.String(), err)
		}
		if c := out.Completions[0]; c.Text != answer || c.Usage["total_tokens"] == nil || u.record(c.ID)["answer"] != answer {
			t.Fatalf("the client got %+v", c)
		}
	})
}
