package records

import (
	"context"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
)

// Analyst answers the questions records are kept for (PostgreSQL's views; see migrations/003_views.sql).
type Analyst interface {
	// Models returns the models of a category (every category when empty), most accurate first: by
	// callers' feedback where they gave it, else by agreement with the consensus; then fastest.
	Models(ctx context.Context, category string, limit int) ([]ModelPerformance, error)
	// Cost returns tokens and cost per provider per day and per request per day, for [since, until).
	Cost(ctx context.Context, since, until time.Time) ([]ProviderCost, []RequestCost, error)
	// Trace returns the responses of one request in order, and what each did for the answer.
	Trace(ctx context.Context, requestID string) ([]TraceStep, error)
	// Latency returns the pipeline's phases slowest first, and the providers that time out most first.
	Latency(ctx context.Context) ([]PhaseLatency, []ProviderTimeouts, error)
}

// ModelPerformance is one model in one category: how often its answer agreed with the consensus, what
// callers' feedback gave it, and how fast it answered.
type ModelPerformance struct {
	Category       string    `json:"category"`
	Model          string    `json:"model"`
	Provider       string    `json:"provider"`
	Calls          int64     `json:"calls"`
	Answers        int64     `json:"answers"`
	AgreementRate  *float64  `json:"agreement_rate"`
	FeedbackReward *float64  `json:"feedback_reward"`
	FeedbackCount  int64     `json:"feedback_count"`
	P50LatencyMs   *float64  `json:"p50_latency_ms"`
	P95LatencyMs   *float64  `json:"p95_latency_ms"`
	Cost           money.USD `json:"cost"`
}

// ProviderCost is one provider's calls, tokens and cost on one day.
type ProviderCost struct {
	Day          time.Time `json:"day"`
	Provider     string    `json:"provider"`
	Requests     int64     `json:"requests"`
	Calls        int64     `json:"calls"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	Cost         money.USD `json:"cost"`
}

// RequestCost is the requests of one day, with tokens and cost per request.
type RequestCost struct {
	Day              time.Time `json:"day"`
	Requests         int64     `json:"requests"`
	TokensPerRequest float64   `json:"tokens_per_request"`
	// CostPerRequest is the day's cost over its requests, rounded down to a nano-dollar.
	CostPerRequest money.USD `json:"cost_per_request"`
	InputTokens    int64     `json:"input_tokens"`
	OutputTokens   int64     `json:"output_tokens"`
	Cost           money.USD `json:"cost"`
}

// TraceStep is one response of a request and what it did for the answer.
type TraceStep struct {
	Position      int32   `json:"position"`
	Model         string  `json:"model"`
	Provider      string  `json:"provider"`
	Worker        string  `json:"worker"`
	Attempt       int32   `json:"attempt"`
	Status        string  `json:"status"`
	LatencyMs     float64 `json:"latency_ms"`
	WeightedScore float64 `json:"weighted_score"`
	Contributed   bool    `json:"contributed"`
	// Decider: the response's answer was one of those that decided a majority vote.
	Decider   bool    `json:"decider"`
	Chosen    bool    `json:"chosen"`
	ErrorKind string  `json:"error_kind,omitempty"`
	Strategy  *string `json:"strategy"`
	Arbiter   *string `json:"arbiter"`
	Fallback  *bool   `json:"fallback"`
}

// PhaseLatency is one pipeline phase's durations.
type PhaseLatency struct {
	Phase    string  `json:"phase"`
	Requests int64   `json:"requests"`
	AvgMs    float64 `json:"avg_ms"`
	P50Ms    float64 `json:"p50_ms"`
	P95Ms    float64 `json:"p95_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// ProviderTimeouts is how often one provider's calls timed out.
type ProviderTimeouts struct {
	Provider     string  `json:"provider"`
	Calls        int64   `json:"calls"`
	Timeouts     int64   `json:"timeouts"`
	TimeoutRate  float64 `json:"timeout_rate"`
	HostTimeouts int64   `json:"host_timeouts"`
}
