// The fuzzing build (make fuzz, -tags fuzz) leaves this file out: the libraries it checks against are
// large, and the fuzzer would instrument them on every cold build.

//go:build !fuzz

package providers

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/testenv"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
)

// The official specifications, read where the repository's neighbour keeps them.
var specs = struct {
	once       sync.Once
	dir        string
	validators map[string]validator.Validator
	models     map[string]*v3.Document
	err        error
}{}

// specValidator returns the validator of one specification file, skipping the test where the
// specifications are absent.
func specValidator(t *testing.T, file string) validator.Validator {
	t.Helper()
	dir := testenv.SharedDir(t, "specs")
	specs.once.Do(func() {
		specs.dir = dir
		specs.validators, specs.models = map[string]validator.Validator{}, map[string]*v3.Document{}
		for f, paths := range map[string][]string{"openai.openapi.yaml": {"/chat/completions", "/models", "/embeddings"}, "anthropic.openapi.json": {"/v1/messages", "/v1/models"}} {
			raw, err := os.ReadFile(filepath.Join(specs.dir, f))
			if err != nil {
				specs.err = err
				return
			}
			doc, err := libopenapi.NewDocument(raw)
			if err != nil {
				specs.err = fmt.Errorf("%s: %w", f, err)
				return
			}
			model, err := doc.BuildV3Model()
			if err != nil {
				specs.err = fmt.Errorf("%s: %w", f, err)
				return
			}
			// Only the operations the adapters call: compiling every schema of the document takes a minute.
			only := orderedmap.New[string, *v3.PathItem]()
			for _, path := range paths {
				only.Set(path, model.Model.Paths.PathItems.GetOrZero(path))
			}
			model.Model.Paths.PathItems = only
			// OpenAI's 3.1 document still says `nullable` here and there; read as plain JSON Schema it is an
			// annotation, which only makes the check stricter.
			specs.validators[f] = validator.NewValidatorFromV3Model(&model.Model, config.WithoutOpenAPIMode())
			specs.models[f] = &model.Model
		}
	})
	if specs.err != nil {
		t.Fatal(specs.err)
	}
	return specs.validators[file]
}

// contract is how one adapter's wire format meets its specification: the file, and the official
// addresses of the operations the adapter calls.
type contract struct {
	provider, format, spec, url, models string
	backend                             Backend
}

const (
	openAIChatURL   = "https://api.openai.com/v1/chat/completions"
	openAIModelsURL = "https://api.openai.com/v1/models"
)

func contracts() []contract {
	var out []contract
	for _, a := range adapters() {
		switch a.format {
		case providertest.OpenAI:
			out = append(out, contract{a.provider, a.format, "openai.openapi.yaml", openAIChatURL, openAIModelsURL, a.backend})
		case providertest.Anthropic:
			out = append(out, contract{a.provider, a.format, "anthropic.openapi.json", "https://api.anthropic.com/v1/messages", "https://api.anthropic.com/v1/models", a.backend})
		}
	}
	// A local server of the configuration's own gets the default profile.
	return append(out, contract{"local", providertest.OpenAI, "openai.openapi.yaml", openAIChatURL, openAIModelsURL, NewOpenAI(NewHTTPClient(), "local")})
}

// atSpec replays a request a loopback server was sent at the operation's official address.
func atSpec(t *testing.T, r providertest.Request, url string) *http.Request {
	t.Helper()
	if r.Query != "" {
		url += "?" + r.Query
	}
	req, err := http.NewRequest(r.Method, url, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.Header.Clone()
	return req
}

func report(ok bool, errs []*vErrors.ValidationError) string {
	if ok {
		return ""
	}
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    %s: %s", s.FieldPath, s.Reason)
		}
	}
	return b.String()
}

func TestEveryRequestMeetsItsSpecification(t *testing.T) {
	zero, some := 0.0, 0.7
	schema := []byte(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}`)
	calls := []struct {
		desc   string
		change func(*Call)
		stream bool
	}{
		{desc: "a system and a user message at temperature 0", change: func(*Call) {}},
		{desc: "a user message alone, the provider's temperature", change: func(c *Call) { c.Messages = c.Messages[1:]; c.Params.Temperature = nil }},
		{desc: "an arbiter's call with a response schema", change: func(c *Call) {
			c.Kind, c.Params.Temperature = KindArbiter, &some
			c.ResponseFormat = &ResponseFormat{Name: "verdict", Schema: schema}
		}},
		{desc: "no output limit", change: func(c *Call) { c.MaxTokens = 0; c.Params.Temperature = &zero }},
		{desc: "every parameter", change: allParams},
		{desc: "tools, a forced function and no parallel calls", change: func(c *Call) {
			allParams(c)
			weatherTool(c)
			c.ToolChoice = &ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}
		}},
		{desc: "tools the model must use", change: func(c *Call) { weatherTool(c); c.ToolChoice = &ToolChoice{Mode: ToolChoiceRequired} }},
		{desc: "tools it must not use", change: func(c *Call) { weatherTool(c); c.ToolChoice = &ToolChoice{Mode: ToolChoiceNone} }},
		{desc: "a conversation of tool calls and their results", change: toolTurns},
		{desc: "images by data URI and by URL", change: images},
		{desc: "any JSON object", change: func(c *Call) { c.ResponseFormat = &ResponseFormat{Type: FormatJSONObject} }},
		{desc: "a strict JSON schema beside tools", change: func(c *Call) {
			weatherTool(c)
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: schema, Strict: true}
		}},
		{desc: "a stream", change: allParams, stream: true},
		{desc: "a stream of tool turns", change: toolTurns, stream: true},
	}
	for _, k := range contracts() {
		v := specValidator(t, k.spec)
		for _, c := range calls {
			t.Run(k.provider+"/"+c.desc, func(t *testing.T) {
				s := providertest.New(k.format, nil)
				defer s.Close()
				call := call(s, k.provider)
				c.change(&call)
				var err error
				if c.stream {
					_, err = k.backend.(Streamer).Stream(t.Context(), call, func(Delta) {})
				} else {
					_, err = k.backend.Complete(t.Context(), call)
				}
				if err != nil {
					t.Fatal(err)
				}
				if ok, errs := v.ValidateHttpRequest(atSpec(t, s.Last(), k.url)); !ok {
					t.Fatalf("the request breaks %s:%s\n%s", k.spec, report(ok, errs), s.Last().Body)
				}
			})
		}
	}
}

// The loopback servers' own answers, whole and streamed, with text and with tool calls, meet the
// specifications: the adapters are tested against the formats as they are.
func TestComposedAnswersMeetTheirSpecification(t *testing.T) {
	streamSchemas := map[string]string{ // event type -> schema, Anthropic's (OpenAI's are all chunks)
		"message_start": "MessageStartEvent", "content_block_start": "ContentBlockStartEvent", "content_block_delta": "ContentBlockDeltaEvent",
		"content_block_stop": "ContentBlockStopEvent", "message_delta": "MessageDeltaEvent", "message_stop": "MessageStopEvent", "error": "ErrorResponse",
	}
	calls := []providertest.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}, {Name: "get_weather", Arguments: `{"city":"Rome"}`}}
	for _, k := range contracts() {
		if k.provider != "groq" && k.provider != "anthropic" {
			continue // one server per format
		}
		v := specValidator(t, k.spec)
		check := schema_validation.NewSchemaValidator(config.WithoutOpenAPIMode())
		version := float32(3.1)
		if k.format == providertest.OpenAI {
			// OpenAI's chunks are nullable the OpenAPI 3.0 way (finish_reason is null until the last), which
			// its 3.1 document still says: read as 3.0, the keyword counts.
			check, version = schema_validation.NewSchemaValidator(), 3.0
		}
		for _, tc := range []struct {
			desc   string
			stream bool
			resp   providertest.Response
		}{
			{"a text answer", false, providertest.Response{}},
			{"tool calls", false, providertest.Response{ToolCalls: calls}},
			{"text and a tool call", false, providertest.Response{Text: "Looking it up.", ToolCalls: calls[:1]}},
			{"a streamed text", true, providertest.Response{}},
			{"streamed tool calls", true, providertest.Response{Text: "Looking it up.", ToolCalls: calls}},
			{"a stream that fails", true, providertest.Response{Text: "Half an answer", StreamError: &providertest.StreamError{Type: "overloaded_error", Message: "Overloaded"}}},
		} {
			t.Run(k.format+"/"+tc.desc, func(t *testing.T) {
				s := providertest.New(k.format, nil)
				defer s.Close()
				c := call(s, k.provider)
				weatherTool(&c)
				var body []byte
				var err error
				if k.format == providertest.Anthropic {
					body, _, err = k.backend.(*Anthropic).messagesRequest(c, tc.stream)
				} else {
					body, err = k.backend.(*OpenAI).chatRequest(c, tc.stream)
				}
				if err != nil {
					t.Fatal(err)
				}
				s.Queue(tc.resp)
				path := "/chat/completions"
				if k.format == providertest.Anthropic {
					path = "/v1/messages"
				}
				resp, err := http.Post(s.URL+path, "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				raw, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if !tc.stream {
					resp.Body = io.NopCloser(bytes.NewReader(raw))
					if ok, errs := v.ValidateHttpResponse(atSpec(t, s.Last(), k.url), resp); !ok {
						t.Fatalf("the answer breaks %s:%s\n%s", k.spec, report(ok, errs), raw)
					}
					return
				}
				events, n := newSSEReader(bytes.NewReader(raw)), 0
				for {
					ev, err := events.next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					name := "CreateChatCompletionStreamResponse"
					switch {
					case k.format == providertest.Anthropic && ev.name == "ping":
						continue
					case k.format == providertest.Anthropic:
						name = streamSchemas[ev.name]
					case string(ev.data) == "[DONE]":
						continue
					case bytes.HasPrefix(ev.data, []byte(`{"error"`)):
						name = "ErrorResponse"
					}
					schema := specs.models[k.spec].Components.Schemas.GetOrZero(name)
					if schema == nil {
						t.Fatalf("no schema for event %q", ev.name)
					}
					if ok, errs := check.ValidateSchemaStringWithVersion(schema.Schema(), string(ev.data), version); !ok {
						t.Fatalf("event %s breaks %s's %s:%s\n%s", ev.name, k.spec, name, report(ok, errs), ev.data)
					}
					n++
				}
				if n < 3 {
					t.Fatalf("%d events in %s", n, raw)
				}
			})
		}
	}
}

func TestEveryFixtureMeetsItsSpecification(t *testing.T) {
	fixtures := []struct {
		desc, format string
		status       int
		body         string
	}{
		{"a chat completion", providertest.OpenAI, 200, providertest.ChatCompletion("gpt-4o-mini", "4", 12, 7)},
		{"a Messages answer", providertest.Anthropic, 200, providertest.AnthropicMessage("claude-3-5-haiku-20241022", "4", 12, 7)},
		{"an authentication error", providertest.Anthropic, 401, providertest.AnthropicError("authentication_error", "invalid x-api-key")},
		{"a rate-limit error", providertest.Anthropic, 429, providertest.AnthropicError("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")},
		{"an invalid request", providertest.Anthropic, 400, providertest.AnthropicError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")},
	}
	for _, f := range fixtures {
		t.Run(f.desc, func(t *testing.T) {
			var k contract
			for _, c := range contracts() {
				if c.format == f.format {
					k = c
				}
			}
			v := specValidator(t, k.spec)
			s := providertest.New(k.format, nil)
			defer s.Close()
			s.Queue(providertest.Response{Status: f.status, Body: f.body})
			k.backend.Complete(t.Context(), call(s, k.provider))
			resp := &http.Response{StatusCode: f.status, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(f.body))}
			if ok, errs := v.ValidateHttpResponse(atSpec(t, s.Last(), k.url), resp); !ok {
				t.Fatalf("the fixture breaks %s:%s", k.spec, report(ok, errs))
			}
		})
	}
}

// OpenAI's document defines no error answers for chat completions; its error bodies, which OpenRouter,
// Groq, Cerebras and DeepSeek share, meet the ErrorResponse schema.
func TestOpenAIErrorBodiesMeetTheirSchema(t *testing.T) {
	specValidator(t, "openai.openapi.yaml")
	schema := specs.models["openai.openapi.yaml"].Components.Schemas.GetOrZero("ErrorResponse").Schema()
	check := schema_validation.NewSchemaValidator(config.WithoutOpenAPIMode())
	tests := []struct {
		desc, body string
		valid      bool
	}{
		{"a refused key", providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"), true},
		{"a context overflow", providertest.OpenAIError("This model's maximum context length is 8192 tokens.", "invalid_request_error", "context_length_exceeded"), true},
		{"a rate limit", providertest.OpenAIError("Rate limit reached for tokens per minute", "tokens", "rate_limit_exceeded"), true},
		{"no error object: the check is live", `{"message":"nope"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if ok, errs := check.ValidateSchemaString(schema, tt.body); ok != tt.valid {
				t.Fatalf("valid %v, want %v:%s", ok, tt.valid, report(ok, errs))
			}
		})
	}
}

// A broken request fails the check: the contract tests above could not pass by accident.
func TestTheSpecificationCatchesABrokenRequest(t *testing.T) {
	tests := []struct{ desc, spec, url, body string }{
		{"a chat completion without messages", "openai.openapi.yaml", "https://api.openai.com/v1/chat/completions", `{"model":"gpt-4o-mini","temperature":"hot"}`},
		{"a Messages call without max_tokens", "anthropic.openapi.json", "https://api.anthropic.com/v1/messages", `{"model":"claude-3-5-haiku-20241022","messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			v := specValidator(t, tt.spec)
			r := providertest.Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(tt.body)}
			if ok, _ := v.ValidateHttpRequest(atSpec(t, r, tt.url)); ok {
				t.Fatal("a broken request passed")
			}
		})
	}
}

func TestEveryListingMeetsItsSpecification(t *testing.T) {
	for _, k := range contracts() {
		t.Run(k.provider, func(t *testing.T) {
			v := specValidator(t, k.spec)
			s := providertest.New(k.format, nil)
			defer s.Close()
			s.SetModels(providertest.Model{ID: "alpha", Context: 131072, MaxOutput: 8192}, providertest.Model{ID: "beta"}, providertest.Model{ID: "gamma"})
			if _, err := k.backend.(Lister).ListModels(t.Context(), s.URL, testKey); err != nil {
				t.Fatal(err)
			}
			for i, r := range s.Listings() {
				req := atSpec(t, r, k.models)
				if ok, errs := v.ValidateHttpRequest(req); !ok {
					t.Fatalf("listing request %d breaks %s:%s", i, k.spec, report(ok, errs))
				}
				// The answer the server gave, asked again.
				body := s.ListingAnswer(r)
				resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}
				if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
					t.Fatalf("listing page %d breaks %s:%s\n%s", i, k.spec, report(ok, errs), body)
				}
			}
		})
	}
}

// The OpenAI-format embeddings call meets its specification, and so does the loopback server's answer.
func TestEmbeddingsMeetTheSpecification(t *testing.T) {
	v := specValidator(t, "openai.openapi.yaml")
	tests := []struct {
		desc   string
		change func(*EmbedCall)
	}{
		{"two inputs", func(*EmbedCall) {}},
		{"shortened vectors for an end user", func(c *EmbedCall) { c.Dimensions, c.User = 256, "u-42" }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := providertest.New(providertest.OpenAI, nil)
			defer s.Close()
			call := embedCall(s, "local")
			tt.change(&call)
			if _, err := NewOpenAI(NewHTTPClient(), "local").Embed(t.Context(), call); err != nil {
				t.Fatal(err)
			}
			req := atSpec(t, s.Last(), "https://api.openai.com/v1/embeddings")
			if ok, errs := v.ValidateHttpRequest(req); !ok {
				t.Fatalf("the request breaks the specification:%s\n%s", report(ok, errs), s.Last().Body)
			}
			// The server's answer to the same request, asked again.
			again, err := http.Post(s.URL+"/embeddings", "application/json", bytes.NewReader(s.Last().Body))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(again.Body)
			again.Body.Close()
			answer := string(raw)
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(answer))}
			if ok, errs := v.ValidateHttpResponse(atSpec(t, s.Last(), "https://api.openai.com/v1/embeddings"), resp); !ok {
				t.Fatalf("the answer breaks the specification:%s\n%s", report(ok, errs), answer)
			}
		})
	}
}
