package providers

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
)

// A two-turn tool conversation through each adapter and its loopback server: the model calls two
// tools, the caller answers both, the model answers from the results. The servers refuse a result that
// answers no call of the turn before (as the APIs do), so the second turn passes only if the calls
// round-trip: ids for OpenAI and Anthropic, names and order (and a thought signature) for Gemini.
func TestATwoTurnToolConversationRoundTrips(t *testing.T) {
	finish := map[string]string{providertest.OpenAI: "tool_calls", providertest.Anthropic: "tool_use", providertest.Gemini: "STOP"}
	for _, streamed := range []bool{false, true} {
		for _, a := range adapters() {
			name := a.provider
			if streamed {
				name += "/streamed"
			}
			t.Run(name, func(t *testing.T) {
				s := providertest.New(a.format, func(model, prompt string) string { return "From the tools: " + prompt })
				defer s.Close()
				first := call(s, a.provider)
				weatherTool(&first)
				first.Messages[1].Content = "Weather in Paris and Rome?"
				calls := providertest.Response{ToolCalls: []providertest.ToolCall{
					{Name: "get_weather", Arguments: `{"city":"Paris"}`, Signature: "c2lnLTE="},
					{Name: "get_weather", Arguments: `{"city":"Rome"}`},
				}}
				s.Queue(calls, calls)
				complete := func(c Call) (Reply, error) {
					if streamed {
						return a.backend.(Streamer).Stream(t.Context(), c, func(Delta) {})
					}
					return a.backend.Complete(t.Context(), c)
				}
				reply, err := complete(first)
				if err != nil {
					t.Fatal(err)
				}
				if len(reply.ToolCalls) != 2 || reply.FinishReason != finish[a.format] || reply.Text != "" {
					t.Fatalf("first turn %+v", reply)
				}
				for i, city := range []string{"Paris", "Rome"} {
					c := reply.ToolCalls[i]
					if c.ID == "" || c.Name != "get_weather" || !jsonEqual(c.Arguments, `{"city":"`+city+`"}`) {
						t.Fatalf("call %d: %+v", i, c)
					}
				}
				if reply.ToolCalls[0].ID == reply.ToolCalls[1].ID {
					t.Fatalf("two calls, one id: %+v", reply.ToolCalls)
				}
				// The same answer gets the same ids, synthetic ones (Gemini's) included.
				if again, err := complete(first); err != nil || !slices.Equal(again.ToolCalls, reply.ToolCalls) {
					t.Fatalf("the same answer read twice: %+v, then %+v (%v)", reply.ToolCalls, again.ToolCalls, err)
				}

				second := first
				second.Messages = append(append([]Message(nil), first.Messages...),
					Message{Role: "assistant", Content: reply.Text, ToolCalls: reply.ToolCalls},
					Message{Role: "tool", ToolCallID: reply.ToolCalls[0].ID, Content: `{"temp_c":21}`},
					Message{Role: "tool", ToolCallID: reply.ToolCalls[1].ID, Content: `{"temp_c":25}`})
				final, err := complete(second)
				if err != nil {
					t.Fatalf("second turn: %v\n%s", err, s.Last().Body)
				}
				if !strings.Contains(final.Text, `{"temp_c":21}`) || !strings.Contains(final.Text, `{"temp_c":25}`) || final.ToolCalls != nil {
					t.Fatalf("second turn %+v", final)
				}
				if a.format == providertest.Gemini && !strings.Contains(string(s.Last().Body), `"thoughtSignature":"c2lnLTE="`) {
					t.Fatalf("the thought signature did not come back: %s", s.Last().Body)
				}
			})
		}
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	ra, _ := json.Marshal(x)
	rb, _ := json.Marshal(y)
	return string(ra) == string(rb)
}

// A response format answered through Anthropic's forced tool is the reply's text, not a tool call; the
// other formats answer it as text anyway.
func TestStructuredAnswersAreText(t *testing.T) {
	verdict := `{"answer":"B"}`
	for _, streamed := range []bool{false, true} {
		for _, a := range adapters() {
			t.Run(a.provider, func(t *testing.T) {
				s := providertest.New(a.format, func(string, string) string { return verdict })
				defer s.Close()
				c := call(s, a.provider)
				c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: answerSchema, Strict: true}
				var pieces strings.Builder
				var reply Reply
				var err error
				if streamed {
					reply, err = a.backend.(Streamer).Stream(t.Context(), c, func(d Delta) {
						if len(d.ToolCalls) > 0 {
							t.Errorf("a piece of a tool call: %+v", d)
						}
						pieces.WriteString(d.Text)
					})
				} else {
					reply, err = a.backend.Complete(t.Context(), c)
					pieces.WriteString(reply.Text)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !jsonEqual(reply.Text, verdict) || pieces.String() != reply.Text || reply.ToolCalls != nil {
					t.Fatalf("reply %+v, pieces %q", reply, pieces.String())
				}
				if a.format == providertest.Anthropic && reply.FinishReason != "end_turn" {
					t.Fatalf("the format's tool ended the turn as %q", reply.FinishReason)
				}
			})
		}
	}
}
