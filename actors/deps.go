package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/bandit"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/catalog"
	"github.com/conclave-ai/conclave/classify"
	"github.com/conclave-ai/conclave/clock"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Deps are what the actors share. They are read-only once the system starts.
type Deps struct {
	Log *zap.Logger
	// Clock is the time that breakers, rate limits and reliability read, so their behaviour can be
	// tested exactly. Deadlines are wall-clock, because the timers that enforce them are.
	Clock      clock.Clock
	Catalog    *catalog.Catalog
	Classifier *classify.Classifier
	Blueprints *blueprints.Set
	Dir        *Directory
	Timers     *scheduler.TimerScheduler
	// Seed derives each request's random source together with its sequence number.
	Seed uint64
	// Policy is the selection policy; Thompson Sampling unless evaluating baselines.
	Policy   bandit.Policy
	Learning bandit.UpdateConfig
	// Reward says how answers are rewarded (timeouts and provider errors always earn beta + 1).
	Reward RewardMode
	Retry  RetryConfig
	// ArbiterTimeout bounds the wait for an arbiter model's verdict.
	ArbiterTimeout time.Duration
	// OutputReserve is the number of tokens reserved for the answer when checking context windows.
	OutputReserve int
	// Dispatcher, when set, runs every actor's turns on a goroutine pool.
	Dispatcher *Dispatcher
	// LeaseGrace overrides DefaultLeaseGrace.
	LeaseGrace time.Duration
	// Breakers and RateLimits configure each provider actor (missing providers get the defaults).
	Breakers   map[string]resilience.Settings
	RateLimits map[string]ratelimit.Limits
}

// RewardMode is the reward signal for answers.
type RewardMode string

// Reward modes.
const (
	// RewardAgreement rewards an answer that contributed to the consensus with 1, any other with 0.
	RewardAgreement RewardMode = "agreement"
	// RewardArbiter rewards an answer with its consensus score (the arbiter's rating under rotating).
	RewardArbiter RewardMode = "arbiter"
	// RewardExternal leaves answers to the feedback API: callers who learn the truth report it.
	RewardExternal RewardMode = "external"
)

// ParseRewardMode reads a reward mode; empty means agreement.
func ParseRewardMode(s string) (RewardMode, error) {
	switch m := RewardMode(s); m {
	case "":
		return RewardAgreement, nil
	case RewardAgreement, RewardArbiter, RewardExternal:
		return m, nil
	}
	return "", fmt.Errorf("unknown reward mode %q (want agreement, arbiter or external)", s)
}

// RetryConfig tunes retries beyond the retry table.
type RetryConfig struct {
	// Scale multiplies every backoff delay of the retry table; 1 is the table itself. Tests use a small
	// scale so that retries happen within milliseconds.
	Scale float64
	// Rounds is the number of quorum-retry rounds after a deadline passes below min_responses; the
	// retry table's worker-timeout row allows 3.
	Rounds int
}

func (d *Deps) now() time.Time { return d.Clock.Now() }

func (d *Deps) leaseGrace() time.Duration {
	if d.LeaseGrace > 0 {
		return d.LeaseGrace
	}
	return DefaultLeaseGrace
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func rateLimitInfo(u *ratelimit.Upstream) *messages.RateLimitInfo {
	return &messages.RateLimitInfo{
		LimitRequests: u.LimitRequests, RemainingRequests: u.RemainingRequests,
		LimitTokens: u.LimitTokens, RemainingTokens: u.RemainingTokens,
		ResetRequestsSeconds: max(u.ResetRequests, u.RetryAfter).Seconds(), ResetTokensSeconds: u.ResetTokens.Seconds(),
	}
}
