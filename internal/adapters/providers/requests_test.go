package providers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// at reads a value of a JSON document by a dotted path ("messages.1.content.0.type").
func at(doc any, path string) (any, bool) {
	for _, key := range strings.Split(path, ".") {
		switch v := doc.(type) {
		case map[string]any:
			var ok bool
			if doc, ok = v[key]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// jsonOf reads JSON text as a value, to compare with what a body holds.
func jsonOf(t *testing.T, text string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return v
}

// Values and parts the request tables share.
var (
	half, one, minusHalf = 0.5, 1.0, -0.5
	seven                = int64(7)
	no                   = false
	weatherSchema        = json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)
	answerSchema         = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}`)
	pixel                = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	photo                = "https://example.com/photos/cat.jpg"
)

func allParams(c *Call) {
	c.Params = Params{Temperature: &half, TopP: &one, Stop: []string{"END"}, Seed: &seven, PresencePenalty: &half, FrequencyPenalty: &minusHalf,
		LogitBias: map[string]int{"50256": -100}, User: "user-42", ParallelToolCalls: &no}
}

func weatherTool(c *Call) {
	c.Tools = []Tool{{Name: "get_weather", Description: "The weather in a city now.", Parameters: weatherSchema, Strict: true}}
}

// toolTurns is a conversation in which the assistant called two tools and both answered.
func toolTurns(c *Call) {
	weatherTool(c)
	c.Messages = []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Weather in Paris and Rome?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_2", Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"temp_c":21}`},
		{Role: "tool", ToolCallID: "call_2", Content: "sunny"},
		{Role: "user", Content: "And tomorrow?"},
	}
}

func images(c *Call) {
	c.Messages[1] = Message{Role: "user", Parts: []Part{{Type: PartText, Text: "What is in these?"}, {Type: PartImage, ImageURL: pixel, Detail: "low"}, {Type: PartImage, ImageURL: photo}}}
}

// requestCase is a call changed one way, and what its body must then hold (a JSON value at a path),
// must not hold, and the parameters the answer names as dropped.
type requestCase struct {
	desc, provider string
	change         func(*Call)
	want           map[string]string
	absent         []string
	dropped        []string
}

func TestRequestBodies(t *testing.T) {
	cases := []requestCase{
		// OpenAI's chat completions.
		{desc: "every parameter is carried", provider: "groq", change: allParams,
			want: map[string]string{"temperature": "0.5", "top_p": "1", "stop": `["END"]`, "seed": "7", "presence_penalty": "0.5", "frequency_penalty": "-0.5",
				"logit_bias": `{"50256":-100}`, "user": `"user-42"`, "max_completion_tokens": "64", "stream": "false"},
			absent: []string{"max_tokens", "parallel_tool_calls", "stream_options"}},
		{desc: "the output limit under OpenRouter's field", provider: "openrouter", change: func(*Call) {}, want: map[string]string{"max_tokens": "64"},
			absent: []string{"max_completion_tokens", "top_p", "tools"}},
		{desc: "tools, a forced function and no parallel calls", provider: "openrouter", change: func(c *Call) {
			allParams(c)
			weatherTool(c)
			c.ToolChoice = &ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}
		}, want: map[string]string{"tools.0.type": `"function"`, "tools.0.function.name": `"get_weather"`, "tools.0.function.parameters": string(weatherSchema),
			"tools.0.function.strict": "true", "tools.0.function.description": `"The weather in a city now."`,
			"tool_choice": `{"type":"function","function":{"name":"get_weather"}}`, "parallel_tool_calls": "false"}},
		{desc: "tool choice as a word", provider: "groq", change: func(c *Call) { weatherTool(c); c.ToolChoice = &ToolChoice{Mode: ToolChoiceRequired} },
			want: map[string]string{"tool_choice": `"required"`}},
		{desc: "tool turns", provider: "deepseek", change: toolTurns,
			want: map[string]string{"messages.2.role": `"assistant"`, "messages.2.tool_calls.1": `{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}`,
				"messages.3": `{"role":"tool","content":"{\"temp_c\":21}","tool_call_id":"call_1"}`, "messages.4.tool_call_id": `"call_2"`, "messages.5.content": `"And tomorrow?"`},
			absent: []string{"messages.2.content"}},
		{desc: "image parts", provider: "openrouter", change: images,
			want: map[string]string{"messages.1.content": `[{"type":"text","text":"What is in these?"},{"type":"image_url","image_url":{"url":"` + pixel + `","detail":"low"}},` +
				`{"type":"image_url","image_url":{"url":"` + photo + `"}}]`}},
		{desc: "a strict JSON schema", provider: "cerebras", change: func(c *Call) {
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: answerSchema, Strict: true}
		}, want: map[string]string{"response_format": `{"type":"json_schema","json_schema":{"name":"answer","schema":` + string(answerSchema) + `,"strict":true}}`,
			"messages.0.content": `"Be brief."`}},
		{desc: "any JSON object", provider: "groq", change: func(c *Call) { c.ResponseFormat = &ResponseFormat{Type: FormatJSONObject} },
			want: map[string]string{"response_format": `{"type":"json_object"}`}},
		{desc: "a schema where only json_object is constrained goes in the system prompt too", provider: "deepseek", change: func(c *Call) {
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: answerSchema, Strict: true}
		}, want: map[string]string{"response_format": `{"type":"json_object"}`,
			"messages.0.content": strconv.Quote("Be brief.\n\nReply with one JSON object that satisfies this JSON schema, and nothing else:\n" + string(answerSchema))}},

		// Anthropic's Messages.
		{desc: "Anthropic's parameters, the rest dropped", provider: "anthropic", change: allParams,
			want: map[string]string{"max_tokens": "64", "temperature": "0.5", "top_p": "1", "stop_sequences": `["END"]`, "metadata": `{"user_id":"user-42"}`,
				"system": `"Be brief."`},
			absent:  []string{"seed", "presence_penalty", "frequency_penalty", "logit_bias", "user", "stop", "tool_choice", "stream"},
			dropped: []string{"seed", "presence_penalty", "frequency_penalty", "logit_bias"}},
		{desc: "Anthropic's tools, without parallel calls", provider: "anthropic", change: func(c *Call) { allParams(c); weatherTool(c) },
			want: map[string]string{"tools": `[{"name":"get_weather","description":"The weather in a city now.","input_schema":` + string(weatherSchema) + `,"strict":true}]`,
				"tool_choice": `{"type":"auto","disable_parallel_tool_use":true}`},
			dropped: []string{"seed", "presence_penalty", "frequency_penalty", "logit_bias"}},
		{desc: "Anthropic's required tool is any", provider: "anthropic", change: func(c *Call) { weatherTool(c); c.ToolChoice = &ToolChoice{Mode: ToolChoiceRequired} },
			want: map[string]string{"tool_choice": `{"type":"any"}`}},
		{desc: "Anthropic's forced function is a tool", provider: "anthropic", change: func(c *Call) {
			weatherTool(c)
			c.ToolChoice = &ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}
		}, want: map[string]string{"tool_choice": `{"type":"tool","name":"get_weather"}`}},
		{desc: "Anthropic's none", provider: "anthropic", change: func(c *Call) { weatherTool(c); c.ToolChoice = &ToolChoice{Mode: ToolChoiceNone} },
			want: map[string]string{"tool_choice": `{"type":"none"}`}},
		{desc: "Anthropic's tool turns: calls as tool_use, results merged in one user turn with the next question", provider: "anthropic", change: toolTurns,
			want: map[string]string{
				"messages.1": `{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},` +
					`{"type":"tool_use","id":"call_2","name":"get_weather","input":{"city":"Rome"}}]}`,
				"messages.2": `{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"{\"temp_c\":21}"}]},` +
					`{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"And tomorrow?"}]}`},
			absent: []string{"messages.3"}},
		{desc: "Anthropic's images: base64 from a data URI, url from https", provider: "anthropic", change: images,
			want: map[string]string{"messages.0.content": `[{"type":"text","text":"What is in these?"},` +
				`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + strings.TrimPrefix(pixel, "data:image/png;base64,") + `"}},` +
				`{"type":"image","source":{"type":"url","url":"` + photo + `"}}]`}},
		{desc: "Anthropic's JSON schema is a forced tool", provider: "anthropic", change: func(c *Call) {
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: answerSchema, Strict: true}
		}, want: map[string]string{"tools.0.name": `"answer"`, "tools.0.input_schema": string(answerSchema), "tool_choice": `{"type":"tool","name":"answer"}`}},
		{desc: "Anthropic's JSON object is a forced tool of any object", provider: "anthropic", change: func(c *Call) {
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONObject}
		}, want: map[string]string{"tools.0.name": `"json_answer"`, "tools.0.input_schema": `{"type":"object"}`, "tool_choice": `{"type":"tool","name":"json_answer"}`}},
		{desc: "Anthropic's format beside tools: call one of them or answer through the format", provider: "anthropic", change: func(c *Call) {
			weatherTool(c)
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "get_weather", Schema: answerSchema}
		}, want: map[string]string{"tools.0.name": `"get_weather"`, "tools.1.name": `"get_weather_"`, "tool_choice": `{"type":"any"}`}},

		// Gemini's generateContent.
		{desc: "Gemini's generationConfig, the rest dropped", provider: "gemini", change: allParams,
			want: map[string]string{"generationConfig": `{"maxOutputTokens":64,"temperature":0.5,"topP":1,"stopSequences":["END"],"seed":7,"presencePenalty":0.5,"frequencyPenalty":-0.5}`,
				"systemInstruction": `{"parts":[{"text":"Be brief."}]}`},
			absent:  []string{"logitBias", "user", "toolConfig"},
			dropped: []string{"logit_bias", "user", "parallel_tool_calls"}},
		{desc: "Gemini's tools and a forced function", provider: "gemini", change: func(c *Call) {
			weatherTool(c)
			c.ToolChoice = &ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}
		}, want: map[string]string{"tools": `[{"functionDeclarations":[{"name":"get_weather","description":"The weather in a city now.","parametersJsonSchema":` + string(weatherSchema) + `}]}]`,
			"toolConfig": `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}`}},
		{desc: "Gemini's auto and none", provider: "gemini", change: func(c *Call) { weatherTool(c); c.ToolChoice = &ToolChoice{Mode: ToolChoiceNone} },
			want: map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"NONE"}}`}},
		{desc: "Gemini's tool turns: calls and responses by name, results in one turn", provider: "gemini", change: toolTurns,
			want: map[string]string{
				"contents.1": `{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"skip_thought_signature_validator"},` +
					`{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}]}`,
				"contents.2": `{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"temp_c":21}}},` +
					`{"functionResponse":{"name":"get_weather","response":{"output":"sunny"}}},{"text":"And tomorrow?"}]}`},
			absent: []string{"contents.3"}},
		{desc: "Gemini's images: inlineData from a data URI, fileData from a URL", provider: "gemini", change: images,
			want: map[string]string{"contents.0.parts": `[{"text":"What is in these?"},{"inlineData":{"mimeType":"image/png","data":"` + strings.TrimPrefix(pixel, "data:image/png;base64,") + `"}},` +
				`{"fileData":{"mimeType":"image/jpeg","fileUri":"` + photo + `"}}]`}},
		{desc: "Gemini's JSON schema", provider: "gemini", change: func(c *Call) {
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: answerSchema, Strict: true}
		}, want: map[string]string{"generationConfig.responseMimeType": `"application/json"`, "generationConfig.responseJsonSchema": string(answerSchema)}},
		{desc: "Gemini's JSON object", provider: "gemini", change: func(c *Call) { c.ResponseFormat = &ResponseFormat{Type: FormatJSONObject} },
			want: map[string]string{"generationConfig.responseMimeType": `"application/json"`}, absent: []string{"generationConfig.responseJsonSchema"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			a := adapterFor(t, tc.provider)
			s := providertest.New(a.format, nil)
			defer s.Close()
			c := call(s, tc.provider)
			tc.change(&c)
			reply, err := a.backend.Complete(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(reply.Dropped, tc.dropped) {
				t.Fatalf("dropped %v, want %v", reply.Dropped, tc.dropped)
			}
			body := s.Last().Body
			doc := jsonOf(t, string(body))
			for path, want := range tc.want {
				got, ok := at(doc, path)
				if !ok || !reflect.DeepEqual(got, jsonOf(t, want)) {
					raw, _ := json.Marshal(got)
					t.Fatalf("%s is %s, want %s\nbody %s", path, raw, want, body)
				}
			}
			for _, path := range tc.absent {
				if got, ok := at(doc, path); ok {
					t.Fatalf("%s is %v, want nothing\nbody %s", path, got, body)
				}
			}
		})
	}
}

func adapterFor(t *testing.T, provider string) adapterCase {
	t.Helper()
	for _, a := range adapters() {
		if a.provider == provider {
			return a
		}
	}
	t.Fatalf("no adapter for %s", provider)
	return adapterCase{}
}

// What the dropped parameters are reported with: an answer and a failure alike.
func TestDroppedParametersAreNamedOnFailureToo(t *testing.T) {
	for _, tc := range []struct {
		desc, provider string
		fail           providertest.Response
		want           []string
	}{
		{"Anthropic overloaded", "anthropic", providertest.Response{Status: 529, Body: providertest.AnthropicError("overloaded_error", "Overloaded")},
			[]string{"seed", "presence_penalty", "frequency_penalty", "logit_bias"}},
		{"Gemini unavailable", "gemini", providertest.Response{Status: 503, Body: providertest.GeminiError(503, "UNAVAILABLE", "overloaded")},
			[]string{"logit_bias", "user", "parallel_tool_calls"}},
		{"OpenAI's format drops nothing", "groq", providertest.Response{Status: 500, Body: providertest.OpenAIError("oops", "server_error", nil)}, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			a := adapterFor(t, tc.provider)
			s := providertest.New(a.format, nil)
			defer s.Close()
			c := call(s, tc.provider)
			allParams(&c)
			s.Queue(tc.fail)
			reply, err := a.backend.Complete(t.Context(), c)
			if err == nil || !slices.Equal(reply.Dropped, tc.want) {
				t.Fatalf("dropped %v (%v), want %v", reply.Dropped, err, tc.want)
			}
			s.Queue(tc.fail)
			reply, err = a.backend.(Streamer).Stream(t.Context(), c, func(Delta) {})
			if err == nil || !slices.Equal(reply.Dropped, tc.want) {
				t.Fatalf("streamed: dropped %v (%v), want %v", reply.Dropped, err, tc.want)
			}
		})
	}
}

// Gemini publishes no OpenAPI document: its requests are checked against fixtures written from the
// generateContent reference and the function-calling guide (testdata/gemini).
func TestGeminiRequestsMatchTheDocumentedShapes(t *testing.T) {
	for _, tc := range []struct {
		desc, fixture string
		change        func(*Call)
	}{
		{"sampling parameters and a JSON schema", "generation_config.json", func(c *Call) {
			allParams(c)
			c.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, Name: "answer", Schema: answerSchema}
		}},
		{"a function call, its response and an image", "function_calling.json", func(c *Call) {
			weatherTool(c)
			c.Tools[0].Strict = false
			c.ToolChoice = &ToolChoice{Mode: ToolChoiceAuto}
			c.Params.Temperature = nil
			c.MaxTokens = 0
			c.Messages = []Message{
				{Role: "user", Parts: []Part{{Type: PartText, Text: "What is the weather where this was taken?"}, {Type: PartImage, ImageURL: pixel}}},
				{Role: "assistant", ToolCalls: []ToolCall{{ID: geminiCallID("resp-1", 0, &geminiFunctionCall{Name: "get_weather", Args: json.RawMessage(`{"city":"Paris"}`)}, "c2lnbmF0dXJl"),
					Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
				{Role: "tool", ToolCallID: geminiCallID("resp-1", 0, &geminiFunctionCall{Name: "get_weather", Args: json.RawMessage(`{"city":"Paris"}`)}, "c2lnbmF0dXJl"),
					Content: `{"temp_c":21,"sky":"clear"}`},
			}
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c := Call{Model: "gemini-2.5-flash", Messages: []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "2+2?"}}, MaxTokens: 64}
			tc.change(&c)
			body, err := (&Gemini{}).GenerateRequest(c)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", "gemini", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(jsonOf(t, string(body)), jsonOf(t, string(want))) {
				t.Fatalf("the request\n%s\ndiffers from the documented shape\n%s", body, want)
			}
		})
	}
}

// What a format cannot carry as the caller wrote it is refused by name, never sent.
func TestCallsAFormatCannotCarryAreRefused(t *testing.T) {
	for _, tc := range []struct {
		desc, provider string
		change         func(*Call)
	}{
		{"a tool call whose arguments are not an object, to Anthropic", "anthropic", func(c *Call) {
			c.Messages = append(c.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: "[1]"}}})
		}},
		{"an image type Anthropic does not take", "anthropic", func(c *Call) {
			c.Messages[1].Parts = []Part{{Type: PartImage, ImageURL: "data:image/tiff;base64,AAAA"}}
		}},
		{"a data URI that is not an image, to Gemini", "gemini", func(c *Call) {
			c.Messages[1].Parts = []Part{{Type: PartImage, ImageURL: "data:text/plain;base64,AAAA"}}
		}},
		{"a tool result answering no call, to Gemini", "gemini", func(c *Call) {
			c.Messages = append(c.Messages, Message{Role: "tool", ToolCallID: "nobody", Content: "42"})
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			a := adapterFor(t, tc.provider)
			s := providertest.New(a.format, nil)
			defer s.Close()
			c := call(s, tc.provider)
			tc.change(&c)
			_, err := a.backend.Complete(t.Context(), c)
			if kindOf(err) != "malformed_request" || len(s.Requests()) != 0 {
				t.Fatalf("error %v after %d requests, want a malformed request never sent", err, len(s.Requests()))
			}
		})
	}
}

func kindOf(err error) string { return string(resilience.KindOf(err)) }
