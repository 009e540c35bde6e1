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
	"time"

	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/secret"
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
	// Role is system, user or assistant.
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ResponseFormat asks for JSON matching a schema (the arbiter's verdict). Providers that cannot
// constrain their output get the schema in the prompt only.
type ResponseFormat struct {
	Name   string
	Schema json.RawMessage
}

// Call is one request to one model.
type Call struct {
	RequestID string
	JobID     string
	Kind      string
	Provider  string
	// Model is the catalog's id; UpstreamModel the id as the provider names it (empty: Model).
	Model         string
	UpstreamModel string
	// Messages are what the model is sent: an optional system message, then the user's.
	Messages    []Message
	MaxTokens   int
	Temperature *float64
	// ResponseFormat, when set, constrains the answer to JSON of a schema.
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

// Usage counts tokens.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Reply is a model's answer.
type Reply struct {
	Text string
	// FinishReason is the provider's reason for ending (stop, length, ...), as it names it.
	FinishReason string
	// ServedModel is the model that actually answered, when the provider says (a gateway may route).
	ServedModel string
	Usage       Usage
	// Cost is the call's price in US dollars, from the catalog's prices and the usage.
	Cost float64
	// UpstreamRequestID is the provider's id of the request, for asking its support.
	UpstreamRequestID string
	// RateLimit is what the provider's headers said about its limits; nil when they said nothing.
	RateLimit *ratelimit.Upstream
	// Latency is the provider's own round trip, as the registry measured it.
	Latency time.Duration
}

// Backend calls models. Implementations are safe for concurrent use and honour ctx's deadline.
type Backend interface {
	Complete(ctx context.Context, call Call) (Reply, error)
}

// UserPrompt returns the messages of a task without a system prompt.
func UserPrompt(task string) []Message { return []Message{{Role: "user", Content: task}} }
