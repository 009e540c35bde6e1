// Package providers owns the calls to language models: the Backend interface that a worker calls, the
// simulated provider of the embedded default, and the adapters for real providers. Errors are classified
// as *resilience.Error so that the control plane can decide on retries and breakers.
package providers

import (
	"context"

	"github.com/conclave-ai/conclave/ratelimit"
)

// Job kinds.
const (
	// KindAnswer asks a model to answer the task.
	KindAnswer = "answer"
	// KindArbiter asks a model to judge candidate answers to the task.
	KindArbiter = "arbiter"
)

// Call is one request to one model.
type Call struct {
	RequestID string
	JobID     string
	Kind      string
	Model     string
	Provider  string
	// Prompt is the task. For an arbiter call the backend builds the judging prompt from the task and
	// the candidates (consensus.ArbiterPrompt), so every backend judges the same way.
	Prompt     string
	Candidates []string
	Category   string
	MaxTokens  int
	Attempt    int
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Reply is a model's answer.
type Reply struct {
	Text  string
	Usage Usage
	// RateLimit is what the provider's headers said about its limits; nil when they said nothing.
	RateLimit *ratelimit.Upstream
}

// Backend calls models. Implementations are safe for concurrent use and honour ctx's deadline.
type Backend interface {
	Complete(ctx context.Context, call Call) (Reply, error)
}
