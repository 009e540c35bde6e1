package providers

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

const testKey = secret.String("sk-test-0123456789abcdef")

// adapterCase is one provider on loopback with the adapter that speaks to it.
type adapterCase struct {
	provider string
	format   string
	backend  Backend
}

func adapters() []adapterCase {
	client := NewHTTPClient()
	var out []adapterCase
	for _, p := range []string{"openrouter", "groq", "cerebras", "deepseek"} {
		out = append(out, adapterCase{p, providertest.OpenAI, NewOpenAI(client, p)})
	}
	return append(out, adapterCase{"anthropic", providertest.Anthropic, NewAnthropic(client, "anthropic")},
		adapterCase{"gemini", providertest.Gemini, NewGemini(client, "gemini")})
}

func call(s *providertest.Server, provider string) Call {
	zero := 0.0
	return Call{Kind: KindAnswer, Provider: provider, Model: "m-1", UpstreamModel: "vendor/m-1", Key: testKey, BaseURL: s.URL,
		Messages: []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "2+2?"}}, MaxTokens: 64, Params: Params{Temperature: &zero}}
}

func TestAdaptersSpeakTheirWireFormat(t *testing.T) {
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, func(model, prompt string) string { return "4 (" + model + ", " + prompt + ")" })
			defer s.Close()
			reply, err := a.backend.Complete(context.Background(), call(s, a.provider))
			if err != nil {
				t.Fatal(err)
			}
			if reply.Text != "4 (vendor/m-1, 2+2?)" || reply.Usage != (Usage{InputTokens: 12, OutputTokens: 7}) || reply.FinishReason == "" || reply.ServedModel == "" || reply.UpstreamRequestID == "" {
				t.Fatalf("reply %+v", reply)
			}
			req := s.Last()
			if strings.Contains(req.Path+req.Query, testKey.Reveal()) {
				t.Fatalf("the key is in the URL %s?%s", req.Path, req.Query)
			}
			var body map[string]any
			if err := json.Unmarshal(req.Body, &body); err != nil {
				t.Fatal(err)
			}
			switch a.format {
			case providertest.OpenAI:
				if req.Path != "/chat/completions" || req.Header.Get("Authorization") != "Bearer "+testKey.Reveal() || body["model"] != "vendor/m-1" ||
					len(body["messages"].([]any)) != 2 || body["temperature"] != 0.0 {
					t.Fatalf("request %s %v %s", req.Path, req.Header, req.Body)
				}
				if field := ProfileOf(a.provider).MaxTokensField; body[field] != 64.0 {
					t.Fatalf("%s: no %s in %s", a.provider, field, req.Body)
				}
			case providertest.Anthropic:
				if req.Path != "/v1/messages" || req.Header.Get("x-api-key") != testKey.Reveal() || req.Header.Get("anthropic-version") != AnthropicVersion ||
					body["system"] != "Be brief." || body["max_tokens"] != 64.0 || len(body["messages"].([]any)) != 1 {
					t.Fatalf("request %s %v %s", req.Path, req.Header, req.Body)
				}
			case providertest.Gemini:
				if req.Path != "/v1beta/models/vendor/m-1:generateContent" || req.Header.Get("x-goog-api-key") != testKey.Reveal() ||
					body["systemInstruction"] == nil || body["generationConfig"].(map[string]any)["maxOutputTokens"] != 64.0 {
					t.Fatalf("request %s %v %s", req.Path, req.Header, req.Body)
				}
			}
		})
	}
}

func TestResponseFormats(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"choice":{"type":"integer"}},"required":["choice"],"additionalProperties":false}`)
	tests := []struct {
		provider, format, want string
	}{
		{"openrouter", providertest.OpenAI, `"response_format":{"json_schema":{"name":"verdict_rotating","schema":{"type":"object"`},
		{"deepseek", providertest.OpenAI, `"response_format":{"type":"json_object"}`},
		{"gemini", providertest.Gemini, `"responseJsonSchema":{"type":"object"`},
		{"anthropic", providertest.Anthropic, `"tool_choice":{"type":"tool","name":"verdict_rotating"},"tools":[{"name":"verdict_rotating"`},
	}
	for _, tt := range tests {
		for _, a := range adapters() {
			if a.provider != tt.provider {
				continue
			}
			s := providertest.New(tt.format, nil)
			c := call(s, tt.provider)
			c.ResponseFormat = &ResponseFormat{Name: "verdict_rotating", Schema: schema}
			if _, err := a.backend.Complete(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			body := string(s.Last().Body)
			if !strings.Contains(body, tt.want) {
				t.Fatalf("%s: %s lacks %s", tt.provider, body, tt.want)
			}
			s.Close()
		}
	}
}

// failureCase is a provider's failure and how it must be classified.
type failureCase struct {
	desc     string
	provider string
	format   string
	resp     providertest.Response
	want     failureClass
}

type failureClass struct {
	kind       resilience.Kind
	scope      resilience.Scope
	retryAfter time.Duration
}

// failureCases are the failures each wire format answers with, before any answer.
func failureCases() []failureCase {
	type want = failureClass
	oa := func(status int, msg, typ string, code any, header map[string]string) providertest.Response {
		return providertest.Response{Status: status, Body: providertest.OpenAIError(msg, typ, code), Header: header}
	}
	return []failureCase{
		{"a bad key", "groq", providertest.OpenAI, oa(401, "Invalid API Key", "invalid_request_error", "invalid_api_key", nil), want{resilience.InvalidAPIKey, resilience.ScopeProvider, 0}},
		{"no credits", "openrouter", providertest.OpenAI, oa(402, "Insufficient credits", "", 402, nil), want{resilience.PaymentRequired, resilience.ScopeProvider, 0}},
		{"an unknown model", "openrouter", providertest.OpenAI, oa(404, "No endpoints found for vendor/m-1.", "", 404, nil), want{resilience.ModelNotFound, resilience.ScopeModel, 0}},
		{"a model's 429 with Retry-After", "openrouter", providertest.OpenAI, oa(429, "Rate limit exceeded: free-models-per-min", "", 429, map[string]string{"Retry-After": "7"}),
			want{resilience.RateLimited, resilience.ScopeModel, 7 * time.Second}},
		{"a 429 spending the minute's tokens", "groq", providertest.OpenAI, oa(429, "Rate limit reached for tokens per minute", "tokens", "rate_limit_exceeded",
			map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-requests": "10"}),
			want{resilience.RateLimited, resilience.ScopeModel, 6 * time.Minute}},
		{"DeepSeek overloaded", "deepseek", providertest.OpenAI, oa(503, "Server overloaded", "", "", nil), want{resilience.ProviderUnavailable, resilience.ScopeProvider, 0}},
		{"DeepSeek's invalid parameters", "deepseek", providertest.OpenAI, oa(422, "Invalid parameters", "", "", nil), want{resilience.MalformedRequest, resilience.ScopeUnknown, 0}},
		{"OpenRouter's model down", "openrouter", providertest.OpenAI, oa(502, "Provider returned error", "", 502, nil), want{resilience.ProviderUnavailable, resilience.ScopeModel, 0}},
		{"OpenRouter's error inside a 200", "openrouter", providertest.OpenAI, providertest.Response{Body: `{"id":"gen-1","error":{"code":502,"message":"Upstream error from Together"}}`},
			want{resilience.ProviderUnavailable, resilience.ScopeModel, 0}},
		{"OpenRouter's error in a choice", "openrouter", providertest.OpenAI,
			providertest.Response{Body: `{"id":"gen-2","model":"x","choices":[{"finish_reason":"error","message":{"content":""},"error":{"code":429,"message":"rate limited upstream"}}]}`},
			want{resilience.RateLimited, resilience.ScopeModel, 0}},
		{"a context too long", "groq", providertest.OpenAI, oa(400, "This model's maximum context length is 8192 tokens.", "invalid_request_error", "context_length_exceeded", nil),
			want{resilience.RequestTooLarge, resilience.ScopeUnknown, 0}},
		{"a gateway's HTML page", "cerebras", providertest.OpenAI, providertest.Response{Status: 502, Body: "<html>Bad Gateway</html>"}, want{resilience.ProviderUnavailable, resilience.ScopeUnknown, 0}},
		{"a body cut short", "groq", providertest.OpenAI, providertest.Response{Body: providertest.ChatCompletion("m", "a long answer that stops in the middle", 1, 1), Cut: true},
			want{resilience.ProviderUnavailable, resilience.ScopeUnknown, 0}},
		{"Anthropic overloaded", "anthropic", providertest.Anthropic, providertest.Response{Status: 529, Body: providertest.AnthropicError("overloaded_error", "Overloaded")},
			want{resilience.ProviderUnavailable, resilience.ScopeProvider, 0}},
		{"Anthropic's limits", "anthropic", providertest.Anthropic, providertest.Response{Status: 429, Body: providertest.AnthropicError("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
			Header: map[string]string{"retry-after": "30", "anthropic-ratelimit-tokens-remaining": "0"}}, want{resilience.RateLimited, resilience.ScopeProvider, 30 * time.Second}},
		{"Anthropic's prompt too long", "anthropic", providertest.Anthropic, providertest.Response{Status: 400, Body: providertest.AnthropicError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")},
			want{resilience.RequestTooLarge, resilience.ScopeUnknown, 0}},
		{"Anthropic's bad key", "anthropic", providertest.Anthropic, providertest.Response{Status: 401, Body: providertest.AnthropicError("authentication_error", "invalid x-api-key")},
			want{resilience.InvalidAPIKey, resilience.ScopeProvider, 0}},
		{"Gemini's quota", "gemini", providertest.Gemini, providertest.Response{Status: 429, Body: providertest.GeminiError(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).",
			`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"31s"}`)}, want{resilience.RateLimited, resilience.ScopeModel, 31 * time.Second}},
		{"Gemini's bad key", "gemini", providertest.Gemini, providertest.Response{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
			`{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}`)}, want{resilience.InvalidAPIKey, resilience.ScopeProvider, 0}},
		{"Gemini unavailable", "gemini", providertest.Gemini, providertest.Response{Status: 503, Body: providertest.GeminiError(503, "UNAVAILABLE", "The model is overloaded.")},
			want{resilience.ProviderUnavailable, resilience.ScopeUnknown, 0}},
	}
}

func TestAdaptersClassifyFailures(t *testing.T) {
	tests := failureCases()
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var backend Backend
			for _, a := range adapters() {
				if a.provider == tt.provider {
					backend = a.backend
				}
			}
			s := providertest.New(tt.format, nil)
			defer s.Close()
			s.Queue(tt.resp)
			_, err := backend.Complete(context.Background(), call(s, tt.provider))
			var re *resilience.Error
			if !errors.As(err, &re) {
				t.Fatalf("error %v, want a classified one", err)
			}
			if re.Kind != tt.want.kind || re.Scope != tt.want.scope || re.RetryAfter != tt.want.retryAfter {
				t.Fatalf("got %s (scope %q, retry after %v), want %s (scope %q, retry after %v): %v", re.Kind, re.Scope, re.RetryAfter,
					tt.want.kind, tt.want.scope, tt.want.retryAfter, err)
			}
			if strings.Contains(err.Error(), testKey.Reveal()) {
				t.Fatal("the key is in the error")
			}
		})
	}
}

func TestDeepSeeksKeepAliveLinesAreSkipped(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	defer s.Close()
	s.Queue(providertest.Response{KeepAlive: 3, Body: ": keep-alive\n\n" + providertest.ChatCompletion("deepseek-chat", "4", 5, 1)})
	reply, err := NewOpenAI(NewHTTPClient(), "deepseek").Complete(context.Background(), call(s, "deepseek"))
	if err != nil || reply.Text != "4" {
		t.Fatalf("%+v %v", reply, err)
	}
}

func TestRateLimitHeaders(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc   string
		header map[string]string
		check  func(t *testing.T, reqs, toks int64, resetReq, resetTok, retry time.Duration)
	}{
		{"OpenAI's", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-limit-tokens": "6000", "x-ratelimit-remaining-tokens": "5800", "x-ratelimit-reset-tokens": "2m59.56s"},
			func(t *testing.T, reqs, toks int64, rr, rt, _ time.Duration) {
				if reqs != 59 || toks != 5800 || rr != time.Second || rt != 2*time.Minute+59560*time.Millisecond {
					t.Fatal(reqs, toks, rr, rt)
				}
			}},
		{"Cerebras' per day and per minute", map[string]string{"x-ratelimit-limit-requests-day": "14400", "x-ratelimit-remaining-requests-day": "14398",
			"x-ratelimit-reset-requests-day": "33011.382", "x-ratelimit-limit-tokens-minute": "60000", "x-ratelimit-remaining-tokens-minute": "0",
			"x-ratelimit-reset-tokens-minute": "11.38"},
			func(t *testing.T, reqs, toks int64, rr, rt, _ time.Duration) {
				if reqs != 14398 || toks != 0 || rr < 9*time.Hour || rt != 11380*time.Millisecond {
					t.Fatal(reqs, toks, rr, rt)
				}
			}},
		{"Anthropic's", map[string]string{"anthropic-ratelimit-requests-remaining": "49", "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:20Z",
			"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "2026-01-01T00:01:00Z", "retry-after": "20"},
			func(t *testing.T, reqs, toks int64, rr, rt, retry time.Duration) {
				if reqs != 49 || toks != 0 || rr != 20*time.Second || rt != time.Minute || retry != 20*time.Second {
					t.Fatal(reqs, toks, rr, rt, retry)
				}
			}},
		{"OpenRouter's", map[string]string{"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1767225615000"},
			func(t *testing.T, reqs, _ int64, rr, _, _ time.Duration) {
				if reqs != 0 || rr != 15*time.Second {
					t.Fatal(reqs, rr)
				}
			}},
		{"a reset in epoch seconds", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1767225630"},
			func(t *testing.T, reqs, _ int64, rr, _, _ time.Duration) {
				if reqs != 0 || rr != 30*time.Second {
					t.Fatal(reqs, rr)
				}
			}},
		{"figures past any real limit are bounded", map[string]string{"x-ratelimit-remaining-requests": "1e30", "x-ratelimit-remaining-tokens": "-7",
			"x-ratelimit-reset-requests": "876000h", "retry-after-ms": "1e15"},
			func(t *testing.T, reqs, toks int64, rr, _, retry time.Duration) {
				if reqs != ratelimit.MaxUpstreamCount || toks != -1 || rr != ratelimit.MaxUpstreamWait || retry != ratelimit.MaxUpstreamWait {
					t.Fatal(reqs, toks, rr, retry)
				}
			}},
		{"retry-after-ms beats Retry-After", map[string]string{"retry-after-ms": "1500", "Retry-After": "9"},
			func(t *testing.T, _, _ int64, _, _, retry time.Duration) {
				if retry != 1500*time.Millisecond {
					t.Fatal(retry)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			u := limitHeaders(h, now)
			if u == nil {
				t.Fatal("no limits read")
			}
			tt.check(t, u.RemainingRequests, u.RemainingTokens, u.ResetRequests, u.ResetTokens, u.RetryAfter)
		})
	}
	if limitHeaders(http.Header{"Content-Type": {"application/json"}}, now) != nil {
		t.Fatal("limits read from no limit header")
	}
}

func TestSlowAndUnreachableProviders(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	s.Queue(providertest.Response{Delay: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := NewOpenAI(NewHTTPClient(), "groq").Complete(ctx, call(s, "groq")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a slow answer past the deadline: %v", err)
	}
	s.Close()
	host := strings.TrimPrefix(s.URL, "http://")
	// A server that takes the connection and drops it, answering nothing.
	drop, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer drop.Close()
	go func() {
		for {
			c, err := drop.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tests := []struct {
		desc    string
		baseURL string
		kind    resilience.Kind
		// says is the error's message past its kind, provider and model.
		says string
	}{
		{"nothing listens: refused, and the host named", s.URL, resilience.ConnectionRefused, host},
		// EOF or a reset, as the timing has it.
		{"the connection dropped before an answer", "http://" + drop.Addr().String(), resilience.ProviderUnreachable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c := call(s, "groq")
			c.BaseURL = tt.baseURL
			_, err := NewOpenAI(NewHTTPClient(), "groq").Complete(context.Background(), c)
			var e *resilience.Error
			if !errors.As(err, &e) || e.Kind != tt.kind || e.Scope != resilience.ScopeProvider || !strings.Contains(e.Err.Error(), tt.says) {
				t.Fatalf("a provider that is down: %v, want %s saying %q", err, tt.kind, tt.says)
			}
			if strings.Contains(err.Error(), testKey.Reveal()) {
				t.Fatalf("the key in %v", err)
			}
		})
	}
}

func TestRegistryRoutesKeysAndPrices(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	defer s.Close()
	up := NewUpstream("local", "openai", s.URL, NewOpenAI(NewHTTPClient(), "local"), "k-1")
	prices := func(model string) (money.Rates, bool) {
		return money.Rates{In: 2 * money.PerMillionDollar, Out: 10 * money.PerMillionDollar}, model == "m-1"
	}
	r := NewRegistry(prices, nil, up)
	reply, err := r.Complete(context.Background(), Call{Provider: "local", Model: "m-1", Messages: UserPrompt("hi")})
	if err != nil || reply.Cost != (12*2+7*10)*money.Dollar/1e6 {
		t.Fatalf("%+v %v", reply, err)
	}
	if got := s.Last().Header.Get("Authorization"); got != "Bearer k-1" {
		t.Fatalf("authorization %q", got)
	}
	if !up.SetKey("k-2") || up.SetKey("k-2") {
		t.Fatal("SetKey must report a change once")
	}
	r.Complete(context.Background(), Call{Provider: "local", Model: "m-1", Messages: UserPrompt("hi")})
	if got := s.Last().Header.Get("Authorization"); got != "Bearer k-2" {
		t.Fatalf("authorization %q after the key changed", got)
	}
	if _, err := r.Complete(context.Background(), Call{Provider: "nowhere", Model: "m"}); resilience.KindOf(err) != resilience.Internal {
		t.Fatalf("a provider without an upstream: %v", err)
	}
}

func TestAnEchoedKeyIsStruck(t *testing.T) {
	echo := "Incorrect API key provided: " + testKey.Reveal()
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, func(string, string) string { return "your key is " + testKey.Reveal() })
			defer s.Close()
			var bad providertest.Response
			switch a.format {
			case providertest.OpenAI:
				bad = providertest.Response{Status: 401, Body: providertest.OpenAIError(echo, "invalid_request_error", "invalid_api_key")}
			case providertest.Anthropic:
				bad = providertest.Response{Status: 401, Body: providertest.AnthropicError("authentication_error", echo)}
			case providertest.Gemini:
				bad = providertest.Response{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT", echo)}
			}
			s.Queue(bad)
			_, err := a.backend.Complete(context.Background(), call(s, a.provider))
			if err == nil || strings.Contains(err.Error(), testKey.Reveal()) || !strings.Contains(err.Error(), "Incorrect API key") {
				t.Fatalf("error %v", err)
			}
			reply, err := a.backend.Complete(context.Background(), call(s, a.provider))
			if err != nil || strings.Contains(reply.Text, testKey.Reveal()) || !strings.Contains(reply.Text, "your key is") {
				t.Fatalf("reply %q, %v", reply.Text, err)
			}
		})
	}
}
