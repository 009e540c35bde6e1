package bandit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Candidate is a model that may be selected, with its arm for the request's category.
type Candidate struct {
	Model    string
	Provider string
	// Family is the model's lineage from the catalog (llama, gemini, ...): models of one family share
	// training data and err together.
	Family        string
	ContextWindow int
	Alpha, Beta   float64
	Pulls         int64
}

// ProviderStatus is what selection needs to know of a provider, read from an immutable snapshot.
type ProviderStatus struct {
	BreakerOpen bool
	// Disabled: the provider refused its key (or its account); it takes no call until the key changes.
	Disabled bool
	// Stopped: the provider's actor crashed past its restart limit; it takes no call until Conclave
	// restarts.
	Stopped bool
	// RateLimitUse is the highest share in [0, 1] of any of the provider's rate limits in use.
	RateLimitUse float64
	// Until is when an open breaker admits a probe or an exhausted limit has room again; zero when
	// neither applies or it is not known.
	Until time.Time
	// ModelsOut says some of the provider's models are out of the pool: Query.Unavailable is asked
	// about its models only then (and about those of providers the query does not know).
	ModelsOut bool
	// Fault, with an open breaker, is the provider's last fault: why it is down, for the answer of a
	// request that finds no model to ask. Selection does not read it.
	Fault string
}

// Policy is a selection policy. Thompson Sampling is the production policy; the others are baselines
// for evaluation.
type Policy uint8

// Selection policies.
const (
	Thompson Policy = iota
	UCB1
	EpsilonGreedy
	Uniform
)

var policyNames = [...]string{"thompson", "ucb1", "epsilon_greedy", "uniform"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy reads a policy name.
func ParsePolicy(name string) (Policy, error) {
	for i, n := range policyNames {
		if n == name {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown selection policy %q (want thompson, ucb1, epsilon_greedy or uniform)", name)
}

// Query says what to select.
type Query struct {
	// N is how many models to pick.
	N int
	// ContextTokens is the context the task needs; models with a smaller window are skipped.
	ContextTokens int
	// Requested, when not empty, is the request's explicit models list: every other model is skipped.
	Requested map[string]bool
	// Allowed, when set, says whether the caller's key may call a model: every other model is skipped.
	Allowed func(model string) bool
	// Unavailable, when set, says why a model cannot be called now (ModelRemoved, ModelEjected or
	// ModelRateLimited) and until when, or returns zero for a model that can.
	Unavailable func(model, provider string) (SkipReason, time.Time)
	// Providers holds provider snapshots; a provider that is absent counts as healthy.
	Providers map[string]ProviderStatus
	Policy    Policy
	// Epsilon is the exploration rate of EpsilonGreedy; zero means 0.1.
	Epsilon float64
	// TotalPulls is the number of updates across the category's arms, for UCB1.
	TotalPulls int64
	// Tried holds models a request already used, when it selects replacements.
	Tried map[string]bool
	// Refused holds providers whose host refused a connection during the request, when it selects
	// replacements: nothing listens there, so none of their models is asked.
	Refused map[string]bool
	// Lacks, when set, says what a model lacks that the request needs (NoVision for its images,
	// ParametersUnsupported for the parameters it insists on), or 0. Nil for a request that needs
	// nothing special, which costs nothing.
	Lacks func(model, provider string) SkipReason
}

// SkipReason says why a model was not eligible.
type SkipReason uint8

// Skip reasons, in the order the filters run.
const (
	NotRequested SkipReason = iota + 1
	ContextTooSmall
	BreakerOpen
	RateLimitExhausted
	ModelRemoved
	AlreadyTried
	ModelEjected
	ModelRateLimited
	ProviderDisabled
	ProviderStopped
	NoVision
	ParametersUnsupported
	ConnectionRefused
	NotAllowed
	// FamilyMajority: eligible and drawn among the best, but its family already holds as many places
	// as a panel gives one family (the plan's NoFamilyMajority).
	FamilyMajority
)

var skipNames = [...]string{"", "not_in_requested_models", "context_window_too_small", "provider_breaker_open", "provider_rate_limit_exhausted",
	"model_removed", "already_tried", "model_ejected", "model_rate_limited", "provider_disabled", "provider_stopped", "no_vision",
	"parameters_unsupported", "provider_connection_refused", "not_allowed_by_key", "family_majority"}

func (r SkipReason) String() string {
	if int(r) < len(skipNames) && r > 0 {
		return skipNames[r]
	}
	return fmt.Sprintf("skip(%d)", uint8(r))
}

// MarshalText renders the reason by name.
func (r SkipReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Skip records a model that was left out and why.
type Skip struct {
	Model    string     `json:"model"`
	Provider string     `json:"provider"`
	Reason   SkipReason `json:"reason"`
	// Until is when the reason is expected to pass (an open breaker, an exhausted limit, an ejection);
	// zero when it will not pass by itself.
	Until time.Time `json:"until,omitzero"`
}

// Pick is a selected model.
type Pick struct {
	Model    string `json:"model"`
	Provider string `json:"provider"`
	Family   string `json:"family,omitempty"`
	// Sampled is the policy's raw value for the arm (a Beta draw for Thompson Sampling).
	Sampled float64 `json:"sampled"`
	// Score is the value the ranking used: Sampled, damped when the provider is near its rate limit.
	Score         float64 `json:"score"`
	Deprioritised bool    `json:"deprioritised,omitempty"`
	Explored      bool    `json:"explored,omitempty"` // chosen by epsilon-greedy's random exploration
	// Alpha and Beta are the arm the policy drew from.
	Alpha float64 `json:"alpha"`
	Beta  float64 `json:"beta"`
}

// Selection is the outcome of Select.
type Selection struct {
	Picks    []Pick
	Skipped  []Skip
	Eligible int
}

// SkipCounts summarises the skip reasons.
func (s Selection) SkipCounts() map[string]int {
	if len(s.Skipped) == 0 {
		return nil
	}
	counts := make(map[string]int, 4)
	for _, sk := range s.Skipped {
		counts[sk.Reason.String()]++
	}
	return counts
}

// DeprioritiseAbove is the rate-limit share above which a provider's models are deprioritised.
const DeprioritiseAbove = 0.8

// RateLimitDamping is the deprioritisation rule: a model whose provider has used more than 80% of a rate
// limit ranks by its sampled value times (1 - use) / 0.2, falling linearly from full value at 80% to zero
// at 100% (where the filter skips it outright). Near-limit providers are still chosen when their models
// are clearly best, but lose close contests.
func RateLimitDamping(use float64) float64 {
	if use <= DeprioritiseAbove {
		return 1
	}
	return max(0, (1-use)/(1-DeprioritiseAbove))
}

// reject runs the eligibility filters in order and returns the first reason to skip c, or 0, with when
// the reason passes. known says the query holds c's provider's status.
func (q *Query) reject(c *Candidate, status ProviderStatus, known bool) (SkipReason, time.Time) {
	if r := q.rejectForRequest(c); r != 0 {
		return r, time.Time{}
	}
	return q.rejectForProvider(c, status, known)
}

// rejectForRequest runs the filters of the request itself and returns the first reason to skip c, or
// 0: a model it did not ask for, does not allow or tried already, a provider that refused its
// connections, a context window too small for it, or a capability the model lacks.
func (q *Query) rejectForRequest(c *Candidate) SkipReason {
	switch {
	case len(q.Requested) > 0 && !q.Requested[c.Model]:
		return NotRequested
	case q.Allowed != nil && !q.Allowed(c.Model):
		return NotAllowed
	case q.Tried[c.Model]:
		return AlreadyTried
	case q.Refused[c.Provider]:
		return ConnectionRefused
	case c.ContextWindow < q.ContextTokens:
		return ContextTooSmall
	case q.Lacks != nil:
		return q.Lacks(c.Model, c.Provider)
	}
	return 0
}

// rejectForProvider runs the filters of c's provider's status (known says the query holds it) and
// returns the first reason to skip c, or 0, with when the reason passes.
func (q *Query) rejectForProvider(c *Candidate, status ProviderStatus, known bool) (SkipReason, time.Time) {
	switch {
	case status.Stopped:
		return ProviderStopped, time.Time{}
	case status.Disabled:
		return ProviderDisabled, time.Time{}
	case status.BreakerOpen:
		return BreakerOpen, status.Until
	case status.RateLimitUse >= 1:
		return RateLimitExhausted, status.Until
	case q.Unavailable != nil && (status.ModelsOut || !known):
		return q.Unavailable(c.Model, c.Provider)
	}
	return 0, time.Time{}
}

// Select ranks the eligible candidates by the query's policy and returns the top min(N, eligible), with
// a Skip for every ineligible candidate. Ties are broken by model id, so a seeded source gives the same
// selection every time.
func Select(rng *rand.Rand, cands []Candidate, q Query) Selection {
	n := max(q.N, 0)
	sel := Selection{Picks: make([]Pick, 0, n)}
	var logTotal float64
	if q.Policy == UCB1 {
		logTotal = math.Log(float64(q.TotalPulls) + 1)
	}
	var statuses providerStatuses
	for i := range cands {
		c := &cands[i]
		status, known := statuses.get(q.Providers, c.Provider)
		if reason, until := q.reject(c, status, known); reason != 0 {
			sel.Skipped = append(sel.Skipped, Skip{Model: c.Model, Provider: c.Provider, Reason: reason, Until: until})
			continue
		}
		sel.Eligible++
		if n == 0 {
			continue
		}
		var v float64
		switch q.Policy {
		case Thompson:
			v = SampleBeta(rng, c.Alpha, c.Beta)
		case UCB1:
			v = c.Alpha/(c.Alpha+c.Beta) + math.Sqrt(2*logTotal/float64(c.Pulls+1)) + 1e-9*rng.Float64()
		case EpsilonGreedy:
			v = c.Alpha/(c.Alpha+c.Beta) + 1e-9*rng.Float64()
		default: // Uniform
			v = rng.Float64()
		}
		damp := RateLimitDamping(status.RateLimitUse)
		if score := v * damp; len(sel.Picks) < n || score >= sel.Picks[n-1].Score { // most candidates miss the top n
			insertTop(&sel.Picks, n, Pick{Model: c.Model, Provider: c.Provider, Family: c.Family, Sampled: v, Score: score, Deprioritised: damp < 1, Alpha: c.Alpha, Beta: c.Beta})
		}
	}
	if q.Policy == EpsilonGreedy {
		explore(rng, cands, &q, &sel)
	}
	return sel
}

// providerStatuses remembers the statuses of the few providers a selection meets, so that each of
// its candidates costs a comparison of names instead of a map lookup.
type providerStatuses struct {
	names    [8]string
	statuses [8]ProviderStatus
	known    [8]bool
	n        int
}

func (ps *providerStatuses) get(all map[string]ProviderStatus, name string) (ProviderStatus, bool) {
	for i := range ps.n {
		if ps.names[i] == name {
			return ps.statuses[i], ps.known[i]
		}
	}
	st, known := all[name]
	if ps.n < len(ps.names) {
		ps.names[ps.n], ps.statuses[ps.n], ps.known[ps.n] = name, st, known
		ps.n++
	}
	return st, known
}

// insertTop keeps picks sorted by descending score (then model id) and at most n long.
func insertTop(picks *[]Pick, n int, p Pick) {
	ps := *picks
	if len(ps) == n && !better(p, ps[n-1]) {
		return
	}
	i := len(ps)
	if i < n {
		ps = append(ps, p)
	} else {
		i = n - 1
	}
	for ; i > 0 && better(p, ps[i-1]); i-- {
		ps[i] = ps[i-1]
	}
	ps[i] = p
	*picks = ps
}

func better(a, b Pick) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Model < b.Model
}

// explore replaces each greedy pick, with probability epsilon, by an eligible model chosen uniformly at
// random from those not already picked.
func explore(rng *rand.Rand, cands []Candidate, q *Query, sel *Selection) {
	eps := q.Epsilon
	if eps <= 0 {
		eps = 0.1
	}
	if sel.Eligible <= len(sel.Picks) {
		return
	}
	picked := make(map[string]bool, len(sel.Picks))
	for _, p := range sel.Picks {
		picked[p.Model] = true
	}
	for i := range sel.Picks {
		if rng.Float64() >= eps {
			continue
		}
		// Reservoir-sample one eligible, unpicked candidate.
		var chosen *Candidate
		seen := 0
		for j := range cands {
			c := &cands[j]
			if picked[c.Model] {
				continue
			}
			status, known := q.Providers[c.Provider]
			if reason, _ := q.reject(c, status, known); reason != 0 {
				continue
			}
			seen++
			if rng.IntN(seen) == 0 {
				chosen = c
			}
		}
		if chosen == nil {
			return
		}
		delete(picked, sel.Picks[i].Model)
		picked[chosen.Model] = true
		mean := chosen.Alpha / (chosen.Alpha + chosen.Beta)
		damp := RateLimitDamping(q.Providers[chosen.Provider].RateLimitUse)
		sel.Picks[i] = Pick{Model: chosen.Model, Provider: chosen.Provider, Family: chosen.Family, Sampled: mean, Score: mean * damp, Deprioritised: damp < 1, Explored: true,
			Alpha: chosen.Alpha, Beta: chosen.Beta}
	}
}
