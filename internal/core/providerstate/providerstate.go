// Package providerstate holds the value types of a provider's published state: the snapshot its actor
// publishes (breaker, limits and their use, counters, the models out of its pool), the limits
// themselves, and what model selection reads of a snapshot. The provider actor writes snapshots; the
// engine, the HTTP API and the metrics read them, without depending on the actor.
package providerstate

import (
	"time"

	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Limits are one provider's limits; zero means unlimited.
type Limits struct {
	RequestsPerMinute int `json:"requests_per_minute"`
	TokensPerMinute   int `json:"tokens_per_minute"`
	Concurrency       int `json:"concurrency"`
}

// Snapshot is an immutable view of a provider, published by its actor.
type Snapshot struct {
	Name    string              `json:"name"`
	Breaker resilience.Snapshot `json:"breaker"`
	Limits  Limits              `json:"limits"`
	// RateLimitUse is the highest share of any limit in use, in [0, 1]; LimitUse is each limit's.
	RateLimitUse float64  `json:"rate_limit_use"`
	LimitUse     LimitUse `json:"limit_use"`
	// SharedLimits says the counts are every controller's (Redis), not only this one's.
	SharedLimits bool `json:"shared_limits"`
	Requests     int  `json:"requests_last_minute"`
	Tokens       int  `json:"tokens_last_minute"`
	InFlight     int  `json:"in_flight"`
	Waiting      int  `json:"waiting"`
	// Reliability is the share of calls without a provider fault over the last 24 hours, with one
	// success and one failure of prior evidence, so an unused provider starts at 0.5 plus its record.
	Reliability float64 `json:"reliability"`
	Calls24h    int64   `json:"calls_24h"`
	Faults24h   int64   `json:"faults_24h"`
	// RoomAt is when a provider at its rate limit has room again (zero when it has room, or when only its
	// concurrency is full).
	RoomAt time.Time `json:"room_at,omitzero"`
	// Models lists the provider's models that are out of the pool, and why: removed (the provider does
	// not know them), ejected (their own breaker is open) or rate_limited (their own 429).
	Models map[string]ModelState `json:"models,omitempty"`
	// Disabled, when not empty, says why the provider takes no call until its key changes.
	Disabled string `json:"disabled,omitempty"`
	// LastFault is the last failure of a call that failed the provider's breaker or one of its models'
	// ("connection_refused: 127.0.0.1:9999"): what a request finding the breaker open is told.
	LastFault string `json:"last_fault,omitempty"`
	// Stopped, when not empty, is the last crash of the provider's actor, which its supervisor stopped
	// for good after too many: the provider takes no call until Conclave restarts.
	Stopped string `json:"stopped,omitempty"`
}

// LimitUse is the share of each limit in use, in [0, 1].
type LimitUse struct {
	Requests    float64 `json:"requests"`
	Tokens      float64 `json:"tokens"`
	Concurrency float64 `json:"concurrency"`
}

// ModelState is why one model is out of its provider's pool, and until when.
type ModelState struct {
	Reason string    `json:"reason"`
	Until  time.Time `json:"until,omitzero"`
}

// Reasons a model is out of the pool.
const (
	ModelRemoved     = "removed"
	ModelEjected     = "ejected"
	ModelRateLimited = "rate_limited"
)

// Status is what model selection needs of the snapshot at now: a breaker whose open period has passed
// admits a probe, so it no longer counts as open.
func (s *Snapshot) Status(now time.Time) bandit.ProviderStatus {
	st := bandit.ProviderStatus{RateLimitUse: s.RateLimitUse, Disabled: s.Disabled != "", Stopped: s.Stopped != "", ModelsOut: len(s.Models) > 0}
	if s.Breaker.State == resilience.Open && now.Before(s.Breaker.OpenUntil) {
		st.BreakerOpen, st.Until, st.Fault = true, s.Breaker.OpenUntil, s.LastFault
	} else if s.RateLimitUse >= 1 {
		st.Until = s.RoomAt
	}
	return st
}

// ModelStatus says why a model cannot be called at now, and until when, or returns zero.
func (s *Snapshot) ModelStatus(model string, now time.Time) (bandit.SkipReason, time.Time) {
	m, ok := s.Models[model]
	switch {
	case !ok:
	case m.Reason == ModelRemoved:
		return bandit.ModelRemoved, time.Time{}
	case !now.Before(m.Until):
		// Its time is over: an ejected model admits a probe, a rate-limited one is free again.
	case m.Reason == ModelEjected:
		return bandit.ModelEjected, m.Until
	case m.Reason == ModelRateLimited:
		return bandit.ModelRateLimited, m.Until
	}
	return 0, time.Time{}
}

// Usage is how much of each limit is in use.
type Usage struct {
	Requests, Tokens, InFlight int
	// Shares of each limit in use, in [0, 1] (zero for a limit that is not set).
	RequestsUse, TokensUse, ConcurrencyUse float64
	// Blocked is how long the provider's own word still blocks every call.
	Blocked time.Duration
	// RoomIn is how long until the window has room for one more call: zero when it has room, or when
	// only concurrency is full.
	RoomIn time.Duration
	// Shared says the counts are every controller's (Redis), not only this one's.
	Shared bool
}

// Use is the highest share of any limit in use; a provider blocked by its own word is fully used.
func (u Usage) Use() float64 {
	if u.Blocked > 0 {
		return 1
	}
	return max(u.RequestsUse, u.TokensUse, u.ConcurrencyUse)
}

// DefaultLimits are the providers' limits unless the configuration says otherwise.
var DefaultLimits = map[string]Limits{
	"openrouter": {RequestsPerMinute: 60, TokensPerMinute: 100_000, Concurrency: 10},
	"anthropic":  {RequestsPerMinute: 50, TokensPerMinute: 80_000, Concurrency: 5},
	"gemini":     {RequestsPerMinute: 60, TokensPerMinute: 120_000, Concurrency: 10},
	"groq":       {RequestsPerMinute: 30, TokensPerMinute: 30_000, Concurrency: 5},
	"cerebras":   {RequestsPerMinute: 30, TokensPerMinute: 60_000, Concurrency: 5},
	"deepseek":   {RequestsPerMinute: 60, TokensPerMinute: 100_000, Concurrency: 10},
}
