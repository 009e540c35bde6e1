// Package providers owns the calls to language models: the Call and Reply of one model call, the
// Backend interface a worker calls, the registry that routes each call to its provider's adapter with
// its key and base URL and prices the reply, the adapters for real providers (OpenAI-compatible chat
// completions, Anthropic Messages, Gemini generateContent), and the simulated and replay providers.
// Errors are classified as *resilience.Error so that the control plane can decide on retries and
// breakers, and whom to blame.
package providers

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Job kinds.
const (
	// KindAnswer asks a model to answer the task.
	KindAnswer = "answer"
	// KindArbiter asks a model to judge candidate answers to the task.
	KindArbiter = "arbiter"
)

// Message is one turn of a chat.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Content is the turn's text; Parts, when set, are its text and images in order instead.
	Content string `json:"content"`
	Parts   []Part `json:"-"`
	// ToolCalls are an assistant's calls of tools; ToolCallID names the call a tool turn answers.
	ToolCalls  []ToolCall `json:"-"`
	ToolCallID string     `json:"-"`
	Name       string     `json:"-"`
	// CacheControl marks the turn's last block as the end of a prefix to cache (its time to live, 5m
	// or 1h); only Anthropic's format carries it.
	CacheControl string `json:"-"`
}

// Text is the turn's text: its content, or its text parts joined by blank lines.
func (m Message) Text() string {
	if len(m.Parts) == 0 {
		return m.Content
	}
	var texts []string
	for _, p := range m.Parts {
		if p.Type == PartText {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n\n")
}

// Content part types.
const (
	PartText  = "text"
	PartImage = "image_url"
)

// Part is a piece of a turn's content: text, or an image by https URL or data URI. Conclave never
// fetches an image; the provider does.
type Part struct {
	Type     string
	Text     string
	ImageURL string
	// Detail is OpenAI's image detail (low, high, auto); empty lets the provider choose.
	Detail string
	// CacheControl marks the part as the end of a prefix to cache, as Message's does.
	CacheControl string
}

// ToolCall is a model's call of a function, its arguments as JSON text.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Tool is a function a model may call; Parameters is its JSON schema.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
	Strict      bool
	// CacheControl marks the tools up to this one as a prefix to cache, as Message's does.
	CacheControl string
}

// Tool choice modes.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
	ToolChoiceFunction = "function"
)

// ToolChoice says whether the model may, must or must not call tools, or which function it must.
type ToolChoice struct {
	Mode string
	// Name is the function of ToolChoiceFunction.
	Name string
}

// Output formats.
const (
	FormatText       = "text"
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
)

// ResponseFormat constrains the answer: any JSON object, or JSON of a schema. A provider that cannot
// constrain its output gets the schema in the prompt only.
type ResponseFormat struct {
	// Type is json_schema (the default when a schema is given) or json_object.
	Type   string
	Name   string
	Schema json.RawMessage
	Strict bool
}

// Params are the caller's sampling parameters, each nil (or empty) when the caller left it to the
// provider. The output limit is Call.MaxTokens.
type Params struct {
	Temperature       *float64
	TopP              *float64
	Stop              []string
	Seed              *int64
	PresencePenalty   *float64
	FrequencyPenalty  *float64
	LogitBias         map[string]int
	User              string
	ParallelToolCalls *bool
	// Logprobs asks for the answer's log probabilities, TopLogprobs for the likeliest tokens too.
	Logprobs    *bool
	TopLogprobs *int
}

// Parameter names, as the caller writes them and as an answer names those a provider could not carry.
const (
	ParamTemperature       = "temperature"
	ParamTopP              = "top_p"
	ParamMaxTokens         = "max_tokens"
	ParamStop              = "stop"
	ParamSeed              = "seed"
	ParamPresencePenalty   = "presence_penalty"
	ParamFrequencyPenalty  = "frequency_penalty"
	ParamLogitBias         = "logit_bias"
	ParamUser              = "user"
	ParamParallelToolCalls = "parallel_tool_calls"
	ParamLogprobs          = "logprobs"
	ParamTopLogprobs       = "top_logprobs"
)

// Given lists the parameters set, in a fixed order.
func (p Params) Given() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(p.Temperature != nil, ParamTemperature)
	add(p.TopP != nil, ParamTopP)
	add(len(p.Stop) > 0, ParamStop)
	add(p.Seed != nil, ParamSeed)
	add(p.PresencePenalty != nil, ParamPresencePenalty)
	add(p.FrequencyPenalty != nil, ParamFrequencyPenalty)
	add(len(p.LogitBias) > 0, ParamLogitBias)
	add(p.User != "", ParamUser)
	add(p.ParallelToolCalls != nil, ParamParallelToolCalls)
	add(p.Logprobs != nil && *p.Logprobs, ParamLogprobs)
	add(p.TopLogprobs != nil, ParamTopLogprobs)
	return out
}

// Insisted lists the parameters the caller reads in the answer, which a model must carry to be asked
// at all, strict_parameters or not: the log probabilities.
func (p Params) Insisted() []string {
	var out []string
	if p.Logprobs != nil && *p.Logprobs {
		out = append(out, ParamLogprobs)
	}
	if p.TopLogprobs != nil {
		out = append(out, ParamTopLogprobs)
	}
	return out
}

// Call is one request to one model.
type Call struct {
	RequestID string
	// KeyID is the API key the call is charged to ("" for the admin token): never sent upstream.
	KeyID    string
	JobID    string
	Kind     string
	Provider string
	// Model is the catalog's id; UpstreamModel the id as the provider names it (empty: Model).
	Model         string
	UpstreamModel string
	// Messages are what the model is sent: an optional system message, then the conversation.
	Messages []Message
	// MaxTokens is the output limit: the caller's max_tokens, or the reserve the model allows.
	MaxTokens int
	Params    Params
	// Tools, when set, are the functions the model may call, as ToolChoice says.
	Tools      []Tool
	ToolChoice *ToolChoice
	// ResponseFormat, when set, constrains the answer to JSON (of a schema).
	ResponseFormat *ResponseFormat
	// Key and BaseURL are the provider's, set by the registry from configuration (never from a request).
	Key     secret.String
	BaseURL string
	// Task is the task itself, and Candidates the answers an arbiter call judges: what simulated and
	// replayed providers decide on. Real adapters send Messages.
	Task       string
	Candidates []string
	Category   string
	Attempt    int
}

// Upstream is the model id to send.
func (c Call) Upstream() string {
	if c.UpstreamModel != "" {
		return c.UpstreamModel
	}
	return c.Model
}

// Usage counts tokens. Estimated says Conclave counted them (the provider reported none: the call was
// cut before its usage came).
type Usage struct {
	// InputTokens counts every input token; CacheReadTokens and CacheWriteTokens those among them the
	// provider read from or wrote to its prompt cache, priced apart.
	InputTokens      int
	CacheReadTokens  int
	CacheWriteTokens int
	OutputTokens     int
	Estimated        bool
}

// Tokens is the usage as it is priced.
func (u Usage) Tokens() money.Tokens {
	return money.Tokens{In: int64(u.InputTokens), CacheRead: int64(u.CacheReadTokens), CacheWrite: int64(u.CacheWriteTokens), Out: int64(u.OutputTokens)}
}

// Reply is a model's answer.
type Reply struct {
	Text string
	// ToolCalls are the model's calls of tools, when it made any (its FinishReason then says so).
	ToolCalls []ToolCall
	// Dropped names the call's parameters its provider's wire format cannot carry, left out of it.
	Dropped []string
	// FinishReason is the provider's reason for ending (stop, length, ...), as it names it.
	FinishReason string
	// ServedModel is the model that actually answered, when the provider says (a gateway may route).
	ServedModel string
	Usage       Usage
	// Cost is the call's price, from the catalog's prices and the usage.
	Cost money.USD
	// UpstreamRequestID is the provider's id of the request, for asking its support.
	UpstreamRequestID string
	// RateLimit is what the provider's headers said about its limits; nil when they said nothing.
	RateLimit *ratelimit.Upstream
	// Latency is the provider's own round trip, as the registry measured it.
	Latency time.Duration
	// Logprobs are the answer's log probabilities as OpenAI's format writes a choice's, when asked for.
	Logprobs json.RawMessage
}

// Backend calls models. Implementations are safe for concurrent use and honour ctx's deadline.
type Backend interface {
	Complete(ctx context.Context, call Call) (Reply, error)
}

// UserPrompt returns the messages of a task without a system prompt.
func UserPrompt(task string) []Message { return []Message{{Role: "user", Content: task}} }
