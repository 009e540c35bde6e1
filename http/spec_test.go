// The fuzzing build (make fuzz, -tags fuzz) leaves this file out: the libraries it checks against are
// large, and the fuzzer would instrument them on every cold build.

//go:build !fuzz

package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/conclave-ai/conclave/internal/testenv"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
)

// OpenAI's specification, read where the repository's neighbour keeps it, for the answers Conclave
// gives on the paths it shares with OpenAI.
var openAISpec = struct {
	once      sync.Once
	validator validator.Validator
	model     *v3.Document
	// schemas checks JSON against one schema, keeping what it compiled for the next check.
	schemas schema_validation.SchemaValidator
	// nullables checks JSON against a schema as OpenAPI 3.0 reads it, `nullable` included.
	nullables schema_validation.SchemaValidator
	err       error
}{}

// openAI returns the specification's validator and model, skipping the test where it is absent.
func openAI(t *testing.T) (validator.Validator, *v3.Document) {
	t.Helper()
	dir := testenv.SharedDir(t, "specs")
	openAISpec.once.Do(func() {
		raw, err := os.ReadFile(filepath.Join(dir, "openai.openapi.yaml"))
		if err != nil {
			openAISpec.err = err
			return
		}
		doc, err := libopenapi.NewDocument(recursionAs2020(raw))
		if err != nil {
			openAISpec.err = err
			return
		}
		model, err := doc.BuildV3Model()
		if err != nil {
			openAISpec.err = err
			return
		}
		// Only the operations checked here: compiling every schema of the document takes a minute.
		only := orderedmap.New[string, *v3.PathItem]()
		for _, path := range []string{"/responses", "/embeddings", "/chat/completions"} {
			only.Set(path, model.Model.Paths.PathItems.GetOrZero(path))
		}
		model.Model.Paths.PathItems = only
		// OpenAI's 3.1 document still says `nullable` here and there; read as plain JSON Schema it is an
		// annotation, which only makes the check stricter.
		openAISpec.validator = validator.NewValidatorFromV3Model(&model.Model, config.WithoutOpenAPIMode())
		openAISpec.model = &model.Model
		openAISpec.schemas = schema_validation.NewSchemaValidator(config.WithoutOpenAPIMode())
		openAISpec.nullables = schema_validation.NewSchemaValidator(config.WithOpenAPIMode())
	})
	if openAISpec.err != nil {
		t.Fatal(openAISpec.err)
	}
	return openAISpec.validator, openAISpec.model
}

// recursionAs2020 writes the document's recursive schemas (CompoundFilter and its twin, in draft
// 2019-09's $recursiveAnchor and $recursiveRef, which the 2020-12 metaschema of an OpenAPI 3.1 document
// refuses) as plain references to themselves, which mean the same for a schema without dynamic scope.
func recursionAs2020(raw []byte) []byte {
	lines := strings.Split(string(raw), "\n")
	out := lines[:0]
	schema := ""
	for _, line := range lines {
		if name, ok := strings.CutPrefix(line, "    "); ok && len(name) > 0 && name[0] != ' ' && strings.HasSuffix(name, ":") {
			schema = strings.TrimSuffix(name, ":")
		}
		switch trimmed := strings.TrimSpace(line); {
		case trimmed == "$recursiveAnchor: true":
			continue
		case strings.HasSuffix(trimmed, `$recursiveRef: "#"`):
			line = strings.Replace(line, `$recursiveRef: "#"`, `$ref: "#/components/schemas/`+schema+`"`, 1)
		}
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}

func specReport(errs []*vErrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    %s: %s", s.FieldPath, s.Reason)
		}
	}
	return b.String()
}

// specProblems says how an answer of POST /v1{path} breaks the operation's answer in the
// specification, or "".
func specProblems(t *testing.T, path string, status int, body string) string {
	t.Helper()
	v, _ := openAI(t)
	req, _ := http.NewRequest(http.MethodPost, "https://api.openai.com/v1"+path, bytes.NewReader([]byte("{}")))
	req.Header.Set("Content-Type", "application/json")
	resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}
	if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
		return specReport(errs)
	}
	return ""
}

// meetsSpec checks an answer of POST /v1{path} against the specification.
func meetsSpec(t *testing.T, path string, status int, body string) {
	t.Helper()
	if p := specProblems(t, path, status, body); p != "" {
		t.Fatalf("the answer breaks the specification of %s:%s\n%.2000s", path, p, body)
	}
}

// eventSchemas are the specification's schemas of the Responses stream's events Conclave sends.
var eventSchemas = map[string]string{
	"response.created": "ResponseCreatedEvent", "response.in_progress": "ResponseInProgressEvent",
	"response.output_item.added": "ResponseOutputItemAddedEvent", "response.output_item.done": "ResponseOutputItemDoneEvent",
	"response.content_part.added": "ResponseContentPartAddedEvent", "response.content_part.done": "ResponseContentPartDoneEvent",
	"response.output_text.delta": "ResponseTextDeltaEvent", "response.output_text.done": "ResponseTextDoneEvent",
	"response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
	"response.function_call_arguments.done":  "ResponseFunctionCallArgumentsDoneEvent",
	"response.completed":                     "ResponseCompletedEvent", "response.incomplete": "ResponseIncompleteEvent",
	"response.failed": "ResponseFailedEvent", "error": "ResponseErrorEvent",
}

// eventProblems says how one event of a Responses stream breaks its schema, or "".
func eventProblems(t *testing.T, typ, data string) string {
	t.Helper()
	_, model := openAI(t)
	name, ok := eventSchemas[typ]
	if !ok {
		return fmt.Sprintf("an event of type %q, which Conclave does not send", typ)
	}
	schema := model.Components.Schemas.GetOrZero(name).Schema()
	if ok, errs := openAISpec.schemas.ValidateSchemaString(schema, data); !ok {
		return name + ":" + specReport(errs)
	}
	return ""
}

// chunkProblems says how one chunk of a streamed chat completion breaks the specification's schema, or "".
func chunkProblems(t *testing.T, data string) string {
	t.Helper()
	_, model := openAI(t)
	schema := model.Components.Schemas.GetOrZero("CreateChatCompletionStreamResponse").Schema()
	// The chunk's schema says which fields may be null with OpenAPI 3.0's `nullable`, so it is read
	// as 3.0 reads it: a plain JSON Schema reading would refuse the null finish_reason of every chunk
	// but the last, which the specification allows.
	if ok, errs := openAISpec.nullables.ValidateSchemaStringWithVersion(schema, data, 3.0); !ok {
		return "CreateChatCompletionStreamResponse:" + specReport(errs)
	}
	return ""
}

// chunkMeetsSpec checks one chunk of a streamed chat completion against the specification's schema.
func chunkMeetsSpec(t *testing.T, data string) {
	t.Helper()
	if p := chunkProblems(t, data); p != "" {
		t.Fatalf("a chunk breaks %s\n%.2000s", p, data)
	}
}

// specProxy is a validating proxy in front of a server: every successful answer of POST
// /v1/chat/completions, /v1/embeddings and /v1/responses that passes through, whole or streamed, is
// checked against OpenAI's specification, and every whole answer of POST /v1/messages, errors
// included, against Anthropic's, as a validating proxy (Prism's) checks what a client is given. A stream reaches the client once it has ended. check fails the test for every answer that
// breaks the specification, and, when the client was answered, for none checked.
func specProxy(t *testing.T, target string) (url string, check func(answered bool)) {
	t.Helper()
	openAI(t) // built here, on the test's goroutine: the proxy's only read them
	anthropicSpec(t)
	to, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var problems []string
	checked := 0
	proxy := httputil.NewSingleHostReverseProxy(to)
	proxy.ModifyResponse = func(resp *http.Response) error {
		path := strings.TrimPrefix(resp.Request.URL.Path, "/v1")
		anthropic := path == "/messages" && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
		openai := resp.StatusCode == http.StatusOK && slices.Contains([]string{"/chat/completions", "/embeddings", "/responses"}, path)
		if resp.Request.Method != http.MethodPost || !anthropic && !openai {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var found string
		if anthropic { // its answers and its errors, which its specification describes
			found = anthropicProblems(t, resp.Request.URL.Path, resp.StatusCode, string(body))
		} else {
			found = answerProblems(t, path, resp.Header.Get("Content-Type"), string(body))
		}
		mu.Lock()
		defer mu.Unlock()
		checked++
		if found != "" {
			problems = append(problems, fmt.Sprintf("POST /v1%s:%s\n%.1000s", path, found, body))
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL, func(answered bool) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if answered && checked == 0 {
			t.Fatal("no answer passed the validating proxy")
		}
		if len(problems) > 0 {
			t.Fatalf("%d of %d answers break the specification:\n%s", len(problems), checked, strings.Join(problems, "\n"))
		}
	}
}

// answerProblems says how an answer of POST /v1{path}, whole or a stream of server-sent events, breaks
// the specification, or "".
func answerProblems(t *testing.T, path, contentType, body string) string {
	if !strings.HasPrefix(contentType, "text/event-stream") {
		return specProblems(t, path, http.StatusOK, body)
	}
	var out strings.Builder
	event := ""
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && line != "data: [DONE]":
			data := strings.TrimPrefix(line, "data: ")
			if path == "/responses" {
				out.WriteString(eventProblems(t, event, data))
			} else {
				out.WriteString(chunkProblems(t, data))
			}
		}
	}
	return out.String()
}

// eventMeetsSpec checks one event of a Responses stream against its schema.
func eventMeetsSpec(t *testing.T, typ, data string) {
	t.Helper()
	if p := eventProblems(t, typ, data); p != "" {
		t.Fatalf("the %s event breaks %s\n%.2000s", typ, p, data)
	}
}

// A broken answer and a broken event fail the checks: the contract tests could not pass by accident.
func TestTheSpecificationCatchesABrokenAnswer(t *testing.T) {
	tests := []struct {
		desc    string
		problem func(t *testing.T) string
	}{
		{"a response without its output", func(t *testing.T) string {
			return specProblems(t, "/responses", 200, `{"id":"resp_1","object":"response","created_at":1,"model":"m","status":"completed"}`)
		}},
		{"an embedding whose vector is a word", func(t *testing.T) string {
			return specProblems(t, "/embeddings", 200, `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":"many"}],"usage":{"prompt_tokens":1,"total_tokens":1}}`)
		}},
		{"a text delta without its item", func(t *testing.T) string {
			return eventProblems(t, "response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":3,"delta":"Hi"}`)
		}},
		{"a streamed chunk without its choices, as the proxy reads a stream", func(t *testing.T) string {
			return answerProblems(t, "/chat/completions", "text/event-stream", "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\"}\n\ndata: [DONE]\n\n")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if tt.problem(t) == "" {
				t.Fatal("a broken answer passed")
			}
		})
	}
}
