package fleet

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/messages"
)

// A call travels to an agent as a job and comes back the same call: conversation, parts, tool calls,
// tools, output format and every parameter.
func TestACallSurvivesTheJourneyToAnAgent(t *testing.T) {
	temp, topP, seed, parallel := 0.1, 0.9, int64(7), false
	call := providers.Call{RequestID: "r", JobID: "r/0", Kind: providers.KindAnswer, Provider: "openai", Model: "gpt-4o", UpstreamModel: "gpt-4o-2024",
		MaxTokens: 5, Task: "What is in the picture?", Category: "general", Attempt: 1,
		Messages: []providers.Message{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Parts: []providers.Part{{Type: providers.PartText, Text: "What is in"}, {Type: providers.PartImage, ImageURL: "https://example.com/cat.png", Detail: "low"}}},
			{Role: "assistant", ToolCalls: []providers.ToolCall{{ID: "call_1", Name: "look", Arguments: `{"at":"cat"}`}}},
			{Role: "tool", ToolCallID: "call_1", Content: "a cat"},
		},
		Params: providers.Params{Temperature: &temp, TopP: &topP, Stop: []string{"\n"}, Seed: &seed, LogitBias: map[string]int{"50256": -100},
			User: "u-1", ParallelToolCalls: &parallel},
		Tools:          []providers.Tool{{Name: "look", Description: "Look at a thing", Parameters: json.RawMessage(`{"type":"object"}`), Strict: true}},
		ToolChoice:     &providers.ToolChoice{Mode: providers.ToolChoiceFunction, Name: "look"},
		ResponseFormat: &providers.ResponseFormat{Type: providers.FormatJSONSchema, Name: "answer", Schema: json.RawMessage(`{"type":"object"}`), Strict: true},
	}
	if got := CallOf(JobOf(call, time.Now())); !reflect.DeepEqual(got, call) {
		t.Fatalf("the call changed on its way:\n got %+v\nwant %+v", got, call)
	}
}

// An arbiter's job, written by the coordinator with a system message, a prompt and a schema, is the
// call it always was.
func TestAnArbitersJobIsItsCall(t *testing.T) {
	zero := 0.0
	job := &messages.Job{Kind: providers.KindArbiter, Model: "m", System: "Judge.", Prompt: "Which?", Temperature: &zero,
		ResponseSchema: `{"type":"object"}`, ResponseName: "verdict", MaxTokens: 64}
	call := CallOf(job)
	if len(call.Messages) != 2 || call.Messages[0].Content != "Judge." || call.Messages[1].Content != "Which?" || *call.Params.Temperature != 0 ||
		call.ResponseFormat == nil || call.ResponseFormat.Type != providers.FormatJSONSchema || call.ResponseFormat.Name != "verdict" || call.Task != "Which?" {
		t.Fatalf("%+v", call)
	}
}
