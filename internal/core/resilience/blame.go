package resilience

// Effect is what one settled call tells a breaker.
type Effect uint8

// The effects on a breaker.
const (
	// Neutral: the call says nothing about this party; its ticket is given back unrecorded, so a
	// half-open breaker is never closed (or reopened) by a call that never reached it.
	Neutral Effect = iota
	Success
	Failure
)

var effectNames = [...]string{"neutral", "success", "failure"}

func (e Effect) String() string {
	if int(e) < len(effectNames) {
		return effectNames[e]
	}
	return "effect(?)"
}

// ArmEffect is what a settled call tells the model's bandit arm.
type ArmEffect uint8

// The effects on an arm.
const (
	// NoReward: the call says nothing about the model (a rate limit, a host or Conclave fault, a call
	// cut by a deadline shorter than the blueprint's, a call never sent).
	NoReward ArmEffect = iota
	// Judged: an answer; consensus (or the caller's feedback) decides its reward.
	Judged
	// Penalty: a fault of the model itself: beta + 1.
	Penalty
)

// Call is a settled call as blame sees it.
type Call struct {
	// Kind is the failure, or "" for an answer.
	Kind  Kind
	Scope Scope
	// FullBudget reports whether the call had at least the time after which a timeout is a fault (the
	// blueprint's full timeout, or the provider's floor). A timeout with less blames nobody.
	FullBudget bool
}

// Verdict says whom a settled call blames or credits: the provider's breaker, the model's breaker
// (outlier ejection), the worker host's breaker and the model's arm, plus what the provider must do
// about the model.
type Verdict struct {
	Provider Effect
	Model    Effect
	Host     Effect
	Arm      ArmEffect
	// BlockModel: a 429 on the model's own quota blocks the model until its reset.
	BlockModel bool
	// BlockProvider: a 429 on the provider's quota blocks the provider until its reset.
	BlockProvider bool
	// RemoveModel: the provider does not know the model; it leaves the pool.
	RemoveModel bool
	// DisableProvider: the provider refused the key or the account; nothing is sent to it until its key
	// changes.
	DisableProvider bool
}

// Blame is the outcome table of the architecture:
//
//	answer (ok)                         arm judged    provider success  model success  host success
//	empty answer                        arm beta + 1  provider success  model success  host success
//	model fault (its 5xx, a full        arm beta + 1  provider neutral  model failure  host success
//	  timeout; an unknown scope counts
//	  as the model's)
//	model not found (404)               arm beta + 1  provider neutral; the model leaves the pool
//	provider-wide fault (connection     arm none      provider failure  model neutral  host success
//	  refused or failed, a 5xx of
//	  provider scope)
//	bad key, no credits (401, 402, 403) arm none      provider failure, and disabled until its key changes
//	429                                 arm none      neutral; the model (or, with provider scope, the
//	                                                  provider) is blocked until its reset
//	timeout without the full budget     nobody        neutral           neutral        host success
//	request refused (400, 413, 422)     nobody        neutral           neutral        host success
//	host fault (refused, host timeout)  nobody        neutral           neutral        host failure
//	cancelled, not sent, internal,      nobody        neutral           neutral        host neutral
//	  worker unavailable
//
// A model fault is also a provider fault when it spreads: the provider actor trips the provider's
// breaker when consecutive model faults span several of its models (see Spread).
func Blame(c Call) Verdict {
	switch c.Kind {
	case "":
		return Verdict{Provider: Success, Model: Success, Host: Success, Arm: Judged}
	case EmptyAnswer:
		return Verdict{Provider: Success, Model: Success, Host: Success, Arm: Penalty}
	case UpstreamTimeout:
		if !c.FullBudget {
			return Verdict{Host: Success}
		}
		return scoped(c.Scope)
	case ProviderUnavailable:
		return scoped(c.Scope)
	case ModelNotFound:
		// The model leaves the pool: its breaker has nothing more to decide, and an unknown model says
		// nothing about the provider's health, so it does not count towards a spread.
		return Verdict{Host: Success, Arm: Penalty, RemoveModel: true}
	case ProviderUnreachable, ConnectionRefused:
		return Verdict{Provider: Failure, Host: Success}
	case InvalidAPIKey, PaymentRequired:
		return Verdict{Provider: Failure, Host: Success, DisableProvider: true}
	case RateLimited:
		if c.Scope == ScopeProvider {
			return Verdict{Host: Success, BlockProvider: true}
		}
		return Verdict{Host: Success, BlockModel: true}
	case RequestTooLarge, MalformedRequest:
		return Verdict{Host: Success}
	case SSHRefused, HostTimeout:
		return Verdict{Host: Failure}
	}
	return Verdict{} // cancelled, not sent, internal, worker unavailable, anything unknown
}

// scoped blames a server-side fault on the model, or on the provider when it says the whole provider
// failed.
func scoped(s Scope) Verdict {
	if s == ScopeProvider {
		return Verdict{Provider: Failure, Host: Success}
	}
	return Verdict{Model: Failure, Host: Success, Arm: Penalty}
}

// Spread tells a fault of several models from faults of one: Threshold consecutive model faults of a
// provider (no success of any of its models in between) that touch at least two models are a
// provider-wide fault, the gateway failing across models. Independent faults of busy models almost
// never line up Threshold times in a row, so a provider serving a flood of calls with a few failing is
// not tripped by their number. The zero value never reports a spread.
type Spread struct {
	threshold int
	run       int
	first     string
	several   bool
}

// NewSpread returns a watcher that reports a spread after threshold consecutive model faults.
func NewSpread(threshold int) Spread { return Spread{threshold: threshold} }

// Fault records a model fault and reports whether the faults now spread across models.
func (s *Spread) Fault(model string) bool {
	if s.run == 0 {
		s.first, s.several = model, false
	} else if model != s.first {
		s.several = true
	}
	s.run++
	return s.threshold > 0 && s.several && s.run >= s.threshold
}

// Success ends the run of faults.
func (s *Spread) Success() { s.run, s.first, s.several = 0, "", false }
