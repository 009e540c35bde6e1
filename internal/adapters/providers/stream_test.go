package providers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// streamOf streams a call through an adapter, keeping every piece.
func streamOf(t *testing.T, b Backend, c Call) (Reply, []Delta, error) {
	t.Helper()
	var deltas []Delta
	reply, err := b.(Streamer).Stream(t.Context(), c, func(d Delta) { deltas = append(deltas, d) })
	return reply, deltas, err
}

// assemble puts pieces together as a caller relaying them would.
func assemble(deltas []Delta) (string, []ToolCall) {
	var text strings.Builder
	var calls toolCalls
	for _, d := range deltas {
		text.WriteString(d.Text)
		for _, c := range d.ToolCalls {
			calls.add(c)
		}
	}
	return text.String(), calls.done()
}

func TestStreamsDeliverPiecesInOrder(t *testing.T) {
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, func(string, string) string { return "The answer is (B)." })
			defer s.Close()
			s.Queue(providertest.Response{InputTokens: 30, OutputTokens: 9})
			reply, deltas, err := streamOf(t, a.backend, call(s, a.provider))
			if err != nil {
				t.Fatal(err)
			}
			text, calls := assemble(deltas)
			want := []string{"The ", "answer ", "is ", "(B)."}
			var got []string
			for _, d := range deltas {
				got = append(got, d.Text)
			}
			if !slices.Equal(got, want) || text != reply.Text || reply.Text != "The answer is (B)." || calls != nil {
				t.Fatalf("pieces %q, reply %+v", got, reply)
			}
			// Usage from the last event: earlier ones count less (Anthropic's message_start, Gemini's chunks).
			if reply.Usage != (Usage{InputTokens: 30, OutputTokens: 9}) || reply.FinishReason == "" || reply.ServedModel == "" || reply.UpstreamRequestID == "" {
				t.Fatalf("reply %+v", reply)
			}
			req := s.Last()
			if strings.Contains(req.Path+req.Query, testKey.Reveal()) {
				t.Fatalf("the key is in the URL %s?%s", req.Path, req.Query)
			}
			doc := jsonOf(t, string(req.Body))
			switch a.format {
			case providertest.OpenAI:
				if v, _ := at(doc, "stream"); v != true {
					t.Fatalf("not a stream: %s", req.Body)
				}
				if v, _ := at(doc, "stream_options.include_usage"); v != true {
					t.Fatalf("usage not asked for: %s", req.Body)
				}
			case providertest.Anthropic:
				if v, _ := at(doc, "stream"); v != true {
					t.Fatalf("not a stream: %s", req.Body)
				}
			case providertest.Gemini:
				if req.Path != "/v1beta/models/vendor/m-1:streamGenerateContent" || req.Query != "alt=sse" {
					t.Fatalf("not a stream: %s?%s", req.Path, req.Query)
				}
			}
		})
	}
}

// The first piece reaches the caller while the server still holds the rest: the stream is relayed as
// it comes, not read whole first.
func TestTheFirstPieceArrivesBeforeTheServerEnds(t *testing.T) {
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, func(string, string) string { return "one two three four" })
			defer s.Close()
			// The events before the first word (OpenAI's role; Anthropic's start, block start and ping) and
			// the first word's may go; the rest wait.
			ahead := map[string]int{providertest.OpenAI: 1, providertest.Anthropic: 3, providertest.Gemini: 0}[a.format]
			pace := make(chan struct{}, ahead)
			for range ahead {
				pace <- struct{}{}
			}
			s.Queue(providertest.Response{Pace: pace})
			first := true
			reply, err := a.backend.(Streamer).Stream(t.Context(), call(s, a.provider), func(d Delta) {
				if first {
					first = false
					if s.Finished() != 0 {
						t.Errorf("the server had finished before the first piece")
					}
					close(pace) // the server sends the rest only now
				}
			})
			if err != nil || reply.Text != "one two three four" || first {
				t.Fatalf("reply %+v, %v", reply, err)
			}
		})
	}
}

func TestStreamedToolCalls(t *testing.T) {
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, nil)
			defer s.Close()
			s.Queue(providertest.Response{Text: "Looking it up.", ToolCalls: []providertest.ToolCall{
				{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}, {Name: "get_time", Arguments: `{"zone":"Europe/Rome"}`}}})
			c := call(s, a.provider)
			weatherTool(&c)
			c.Tools = append(c.Tools, Tool{Name: "get_time", Parameters: json.RawMessage(`{"type":"object"}`)})
			reply, deltas, err := streamOf(t, a.backend, c)
			if err != nil {
				t.Fatal(err)
			}
			text, calls := assemble(deltas)
			if text != "Looking it up. " && text != "Looking it up." || text != reply.Text {
				t.Fatalf("text %q, reply %q", text, reply.Text)
			}
			if len(calls) != 2 || !slices.Equal(calls, reply.ToolCalls) {
				t.Fatalf("pieces make %+v, the reply has %+v", calls, reply.ToolCalls)
			}
			if calls[0].Name != "get_weather" || !jsonEqual(calls[0].Arguments, `{"city":"Paris","unit":"celsius"}`) || calls[1].Name != "get_time" || calls[0].ID == calls[1].ID {
				t.Fatalf("calls %+v", calls)
			}
			pieces := 0
			for _, d := range deltas {
				for _, p := range d.ToolCalls {
					if p.Index == 0 {
						pieces++
					}
				}
			}
			if a.format != providertest.Gemini && pieces < 3 { // Gemini sends a call whole
				t.Fatalf("the first call came in %d pieces", pieces)
			}
		})
	}
}

func TestMidStreamErrorsAreClassified(t *testing.T) {
	for _, tc := range []struct {
		desc, provider string
		err            providertest.StreamError
		kind           resilience.Kind
		scope          resilience.Scope
	}{
		{"OpenRouter's upstream fails during generation", "openrouter", providertest.StreamError{Code: 502, Message: "Upstream error from Together"}, resilience.ProviderUnavailable, resilience.ScopeModel},
		{"a rate limit during generation", "groq", providertest.StreamError{Code: 429, Type: "tokens", Message: "Rate limit reached"}, resilience.RateLimited, resilience.ScopeModel},
		{"DeepSeek's server error", "deepseek", providertest.StreamError{Type: "server_error", Message: "The server had an error"}, resilience.ProviderUnavailable, resilience.ScopeProvider},
		{"Anthropic overloaded", "anthropic", providertest.StreamError{Type: "overloaded_error", Message: "Overloaded"}, resilience.ProviderUnavailable, resilience.ScopeProvider},
		{"Anthropic's rate limit", "anthropic", providertest.StreamError{Type: "rate_limit_error", Message: "slow down"}, resilience.RateLimited, resilience.ScopeProvider},
		{"Gemini unavailable", "gemini", providertest.StreamError{Code: 503, Type: "UNAVAILABLE", Message: "The model is overloaded."}, resilience.ProviderUnavailable, resilience.ScopeUnknown},
		{"Gemini's quota", "gemini", providertest.StreamError{Code: 429, Type: "RESOURCE_EXHAUSTED", Message: "quota"}, resilience.RateLimited, resilience.ScopeModel},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			a := adapterFor(t, tc.provider)
			s := providertest.New(a.format, func(string, string) string { return "half of an answer" })
			defer s.Close()
			tc.err.Message += " for " + testKey.Reveal()
			s.Queue(providertest.Response{StreamError: &tc.err})
			_, deltas, err := streamOf(t, a.backend, call(s, tc.provider))
			var re *resilience.Error
			if !errors.As(err, &re) || re.Kind != tc.kind || re.Scope != tc.scope {
				t.Fatalf("error %v (%+v), want %s of scope %s", err, re, tc.kind, tc.scope)
			}
			if text, _ := assemble(deltas); text != "half of an answer" {
				t.Fatalf("pieces before the error: %q", text)
			}
			if strings.Contains(err.Error(), testKey.Reveal()) {
				t.Fatal("the key is in the error")
			}
		})
	}
}

func TestAStreamCutOffFails(t *testing.T) {
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, nil)
			defer s.Close()
			s.Queue(providertest.Response{Cut: true})
			_, deltas, err := streamOf(t, a.backend, call(s, a.provider))
			if resilience.KindOf(err) != resilience.ProviderUnavailable || !strings.Contains(err.Error(), "cut off") || len(deltas) == 0 {
				t.Fatalf("error %v after %d pieces", err, len(deltas))
			}
		})
	}
}

// A failure before the stream begins is classified exactly as Complete classifies it.
func TestStreamFailuresBeforeTheFirstByte(t *testing.T) {
	for _, tt := range failureCases() {
		t.Run(tt.desc, func(t *testing.T) {
			a := adapterFor(t, tt.provider)
			s := providertest.New(tt.format, nil)
			defer s.Close()
			s.Queue(tt.resp, tt.resp)
			_, completeErr := a.backend.Complete(context.Background(), call(s, tt.provider))
			_, deltas, err := streamOf(t, a.backend, call(s, tt.provider))
			var re, ce *resilience.Error
			if !errors.As(err, &re) || !errors.As(completeErr, &ce) {
				t.Fatalf("errors %v and %v, want classified ones", err, completeErr)
			}
			if re.Kind != tt.want.kind || re.Scope != tt.want.scope || re.RetryAfter != tt.want.retryAfter || re.Status != ce.Status || len(deltas) != 0 {
				t.Fatalf("streamed: %s (scope %q, retry after %v, status %d), complete: %v", re.Kind, re.Scope, re.RetryAfter, re.Status, completeErr)
			}
		})
	}
}

// A server that answers a request for a stream with one JSON body (a gateway that does not stream) is
// read whole, and its answer reported as one piece.
func TestAnAnswerThatIsNoStreamIsOnePiece(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	defer s.Close()
	s.Queue(providertest.Response{Body: providertest.ChatCompletion("m", "all at once", 3, 2)})
	reply, deltas, err := streamOf(t, NewOpenAI(NewHTTPClient(), "local"), call(s, "local"))
	if err != nil || len(deltas) != 1 || deltas[0].Text != "all at once" || reply.Usage != (Usage{InputTokens: 3, OutputTokens: 2}) {
		t.Fatalf("%+v %+v %v", reply, deltas, err)
	}
}

func TestAnEchoedKeyIsStruckFromStreams(t *testing.T) {
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, func(string, string) string { return "your key is " + testKey.Reveal() })
			defer s.Close()
			reply, deltas, err := streamOf(t, a.backend, call(s, a.provider))
			text, _ := assemble(deltas)
			if err != nil || strings.Contains(text, testKey.Reveal()) || strings.Contains(reply.Text, testKey.Reveal()) || !strings.Contains(reply.Text, "your key is") {
				t.Fatalf("pieces %q, reply %q, %v", text, reply.Text, err)
			}
		})
	}
}

// endless is a stream that never ends: the same bytes over and over.
type endless struct {
	unit []byte
	at   int
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.unit[e.at%len(e.unit)]
		e.at++
	}
	return len(p), nil
}

func TestStreamsAreBounded(t *testing.T) {
	ctx := context.Background()
	oa := &OpenAI{Provider: "groq", Profile: ProfileOf("groq")}
	tests := []struct {
		desc string
		read func() (Reply, error)
	}{
		{"an event larger than the bound", func() (Reply, error) {
			return oa.ReadChatStream(ctx, "m", 200, http.Header{}, io.MultiReader(strings.NewReader("data: "), &endless{unit: []byte("x")}), func(Delta) {})
		}},
		{"a stream larger than the bound", func() (Reply, error) {
			return oa.ReadChatStream(ctx, "m", 200, http.Header{}, &endless{unit: []byte("data: {\"choices\":[]}\n\n")}, func(Delta) {})
		}},
		{"a comment that never ends a line", func() (Reply, error) {
			return (&Anthropic{Provider: "anthropic"}).ReadMessageStream(ctx, "m", "", 200, http.Header{}, io.MultiReader(strings.NewReader(": "), &endless{unit: []byte("keep-alive")}), func(Delta) {})
		}},
		{"more tool calls than the bound", func() (Reply, error) {
			return oa.ReadChatStream(ctx, "m", 200, http.Header{}, strings.NewReader(`data: {"choices":[{"delta":{"tool_calls":[{"index":100000,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}`+"\n\n"), func(Delta) {})
		}},
		{"a Gemini stream that ends without a finish reason", func() (Reply, error) {
			return (&Gemini{Provider: "gemini"}).ReadGenerateStream(ctx, "m", 200, http.Header{}, strings.NewReader(`data: {"candidates":[{"content":{"parts":[{"text":"half"}]}}]}`+"\n\n"), func(Delta) {})
		}},
		{"an Anthropic stream without message_stop", func() (Reply, error) {
			return (&Anthropic{Provider: "anthropic"}).ReadMessageStream(ctx, "m", "", 200, http.Header{}, strings.NewReader("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"), func(Delta) {})
		}},
		{"an OpenAI stream without [DONE] or a finish reason", func() (Reply, error) {
			return oa.ReadChatStream(ctx, "m", 200, http.Header{}, strings.NewReader(`data: {"choices":[{"delta":{"content":"half"}}]}`+"\n\n"), func(Delta) {})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := tt.read()
			if resilience.KindOf(err) != resilience.ProviderUnavailable {
				t.Fatalf("error %v, want provider_unavailable", err)
			}
		})
	}
}

// Server-sent events as every provider writes them: CRLF line ends, data over several lines, comments,
// an event name, and a last event without its blank line.
func TestServerSentEvents(t *testing.T) {
	in := ": keep-alive\r\n\r\nevent: one\r\ndata: a\r\ndata: b\r\n\r\ndata:c\n\n\n\ndata: {\"last\":true}"
	r := newSSEReader(strings.NewReader(in))
	var got []string
	for {
		ev, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.name+"|"+string(ev.data))
	}
	if want := []string{"one|a\nb", "|c", `|{"last":true}`}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

func TestRegistryStreamsWithKeysAndPrices(t *testing.T) {
	s := providertest.New(providertest.Anthropic, nil)
	defer s.Close()
	up := NewUpstream("anthropic", KindAnthropic, s.URL, NewAnthropic(NewHTTPClient(), "anthropic"), "k-1")
	prices := func(model string) (money.Rates, bool) {
		return money.Rates{In: 2 * money.PerMillionDollar, Out: 10 * money.PerMillionDollar}, model == "m-1"
	}
	r := NewRegistry(prices, nil, up)
	var pieces []string
	reply, err := r.Stream(t.Context(), Call{Provider: "anthropic", Model: "m-1", Messages: UserPrompt("hi")}, func(d Delta) { pieces = append(pieces, d.Text) })
	if err != nil || reply.Cost != (12*2+7*10)*money.Dollar/1e6 || strings.Join(pieces, "") != reply.Text || len(pieces) < 2 {
		t.Fatalf("%+v %q %v", reply, pieces, err)
	}
	if got := s.Last().Header.Get("x-api-key"); got != "k-1" {
		t.Fatalf("x-api-key %q", got)
	}
	if _, err := r.Stream(t.Context(), Call{Provider: "nowhere", Model: "m"}, func(Delta) {}); resilience.KindOf(err) != resilience.Internal {
		t.Fatalf("a provider without an upstream: %v", err)
	}
}

// completeOnly is a backend that cannot stream.
type completeOnly struct{}

func (completeOnly) Complete(context.Context, Call) (Reply, error) {
	return Reply{Text: "whole", ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}}, nil
}

func TestABackendThatCannotStreamAnswersInOnePiece(t *testing.T) {
	var deltas []Delta
	reply, err := NewRegistry(nil, completeOnly{}).Stream(t.Context(), Call{Provider: "x", Model: "m"}, func(d Delta) { deltas = append(deltas, d) })
	if err != nil || len(deltas) != 1 || deltas[0].Text != "whole" || len(deltas[0].ToolCalls) != 1 || deltas[0].ToolCalls[0].ID != "c1" || reply.Text != "whole" {
		t.Fatalf("%+v %+v %v", reply, deltas, err)
	}
}

func TestTheSimulatedProviderStreamsItsAnswer(t *testing.T) {
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sim := NewSim(cat.All(), SimConfig{Seed: 3})
	m := cat.All()[0]
	c := Call{Kind: KindAnswer, Provider: m.Provider, Model: m.ID, Task: "Explain how caching interacts with invalidation in distributed systems.", Category: "explanation"}
	whole, err := sim.Complete(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	reply, deltas, err := streamOf(t, sim, c)
	text, _ := assemble(deltas)
	if err != nil || len(deltas) < 2 || text != whole.Text || reply.Text != whole.Text || reply.Usage != whole.Usage {
		t.Fatalf("%d pieces making %q, reply %+v, whole %q, %v", len(deltas), text, reply, whole.Text, err)
	}
}
