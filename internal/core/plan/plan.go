// Package plan owns steps 2 to 5 of a request: classify the task, choose and adjust its blueprint, set
// its deadlines, select models by Thompson Sampling and assign them to workers. It decides from
// immutable snapshots of the world and a seeded random source and does no I/O, so a plan can be
// tested, replayed and benchmarked on its own; the coordinator applies it.
package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Settings are what planning decides with; they do not change while the system runs.
type Settings struct {
	Classifier *classify.Classifier
	Blueprints *blueprints.Set
	Catalog    *catalog.Live
	Policy     bandit.Policy
	// OutputReserve is the number of tokens reserved for the answer when checking context windows.
	OutputReserve int
	// Rounds is the number of quorum-retry rounds a request may run.
	Rounds int
	// ArbiterTimeout bounds the wait for an arbiter model's verdict.
	ArbiterTimeout time.Duration
	// MaxQueue bounds how long a request waits for providers' rate limits, from its receipt
	// (rate_limits.max_queue_seconds); zero means admission.DefaultMaxQueue.
	MaxQueue time.Duration
	// TimeoutFloors are, per provider, the least time a call must have had before its timeout counts as
	// a fault, when that is longer than the blueprint's timeout.
	TimeoutFloors map[string]time.Duration
	// Carries says whether a provider's wire format has a field for a sampling parameter; nil carries
	// every parameter.
	Carries func(provider, param string) bool
	// NeedsOutputLimit says whether a provider's wire format requires an output limit on every call
	// (Anthropic's max_tokens); nil requires none.
	NeedsOutputLimit func(provider string) bool
}

// World is the read-only view of the system that a plan decides on: snapshots published by the actors
// that own the state, read at the present moment. Implementations are safe for concurrent use.
type World interface {
	// Now is the time of the clock the snapshots' times are on (breakers' open periods, blocks).
	Now() time.Time
	// Candidates returns every model with its arm in a category, in a buffer to give back with Release.
	Candidates(category string) *[]bandit.Candidate
	Release(*[]bandit.Candidate)
	// TotalPulls is the number of rewards a category's arms received (for UCB1).
	TotalPulls(category string) int64
	// Provider is a provider's status for selection at now.
	Provider(name string, now time.Time) bandit.ProviderStatus
	// Model says why a model cannot be called at now (removed, ejected, rate limited) and until when.
	Model(model, provider string, now time.Time) (bandit.SkipReason, time.Time)
	Workers() []assign.Worker
}

// Request is what planning needs of a request.
type Request struct {
	Task string
	// Category names a blueprint and skips classification; empty lets the classifier choose.
	Category string
	// Classified is the category a classifying model gave the task (config classify.model), and
	// ClassifiedBy that model: it replaces the classifier's category, whose confidence is kept.
	Classified, ClassifiedBy string
	// Models, when set, restricts selection to these models.
	Models    []string
	Overrides blueprints.Overrides
	// AnswerKind is the request's metadata.answer_kind; empty lets the task's text decide.
	AnswerKind string
	// Timeout is how long the caller waits; zero means the bound the blueprint gives (see Bound).
	Timeout    time.Duration
	ReceivedAt time.Time
	// Direct asks Models[0] alone, then each of Fallbacks in turn (see Plan.Direct).
	Direct    bool
	Fallbacks []string
	// Images says the conversation holds images: only models that see them are selected.
	Images bool
	// StrictParams are the parameters the request insists on (strict_parameters, or the answer's log
	// probabilities, which its caller reads): only models whose provider carries every one are
	// selected. Strict says it was strict_parameters, which a refusal then names; else it names them.
	StrictParams []string
	Strict       bool
	// Allowed are the caller's key's model globs: only models one of them matches are selected (none:
	// every model).
	Allowed []string
	// PricedOnly selects only models with a price (the key has a budget; no default price).
	PricedOnly bool
	// PromptTokens is the task's size counted by the tokenizer (0: estimated from its bytes).
	PromptTokens int
}

// Plan is the decision of steps 2 to 5.
type Plan struct {
	Category       string
	Classification classify.Result
	// Explicit is true when the request named its category.
	Explicit bool
	// ClassifiedBy is the classifying model whose category the plan took ("" for the classifier's own).
	ClassifiedBy string
	AnswerKind   consensus.Kind
	// Heavy tasks prefer tier-1 workers.
	Heavy bool
	// ContextTokens is the context a call needs: the task plus the reserved answer.
	ContextTokens int
	Blueprint     blueprints.Blueprint
	// Overrides names the blueprint fields the request changed.
	Overrides []string
	Selection bandit.Selection
	// Workers[i] serves Selection.Picks[i].
	Workers []string
	// Rejected are the workers assignment left out, and why.
	Rejected []assign.Rejection
	// Deadline is when the answer is due; CollectBy is when collection ends at the latest, which leaves
	// the arbiter its time before the deadline.
	Deadline  time.Time
	CollectBy time.Time
	// QueueBy is when the request stops waiting for rate limits: its receipt plus MaxQueue, at most
	// CollectBy. A call whose provider's window frees later is refused at once.
	QueueBy time.Time
	s       *Settings
	// requested is the request's models list, which replacements keep to as well.
	requested map[string]bool
	// allowed says whether the caller's key may call a model; nil when it may call any.
	allowed func(model string) bool
	// lacks says what a model lacks that the request needs; nil when it needs nothing special.
	lacks func(model, provider string) bandit.SkipReason
	// direct is a direct call's model and fallbacks, in the order they are asked.
	direct []string
}

// New returns an empty plan to make with the steps, in order: Classify, ChooseBlueprint, Select and
// Assign. The coordinator times and logs each step.
func New(s *Settings) *Plan { return &Plan{s: s} }

// HeavyTokens is the task size from which a task counts as compute-heavy even when its wording is simple.
const HeavyTokens = 2000

// MaxRecordedSkips bounds the skipped models a plan keeps for the record and the log.
const MaxRecordedSkips = 50

// Failure is a request that cannot be planned, with the kind of failure it answers.
type Failure struct {
	Kind resilience.Kind
	Err  error
	// RetryAfter, when positive, is the wait that should cure the failure.
	RetryAfter time.Duration
	// Causes name, when no model could be selected, why each model was left out (model, reason).
	Causes problems.Errors
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Problems lists the validation problems behind the failure, if any, then the models' causes.
func (f *Failure) Problems() problems.Errors { return append(problems.Of(f.Err), f.Causes...) }

// Make plans a request received at now (wall-clock, the time of deadlines): steps 2 to 5 at once.
func Make(s *Settings, w World, req Request, now time.Time, rng *rand.Rand) (*Plan, *Failure) {
	p := New(s)
	for _, step := range []func() *Failure{
		func() *Failure { return p.Classify(req) },
		func() *Failure { return p.ChooseBlueprint(req, now) },
		func() *Failure { return p.Select(w, req, rng) },
		func() *Failure { return p.Assign(w) },
	} {
		if f := step(); f != nil {
			return p, f
		}
	}
	return p, nil
}

// Classify is step 2: the category (the request's, or the classifier's), the task's metadata and the
// kind of answer it asks for.
func (p *Plan) Classify(req Request) *Failure {
	s := p.s
	if req.Category != "" {
		c := classify.Category(req.Category)
		p.Category, p.Explicit = req.Category, true
		p.Classification = classify.Result{Category: c, Best: c, Confidence: 1, Metadata: classify.ExtractMetadata(req.Task), Priority: classify.PriorityOf(c)}
	} else {
		p.Classification = s.Classifier.Classify(req.Task)
		if c := classify.Category(req.Classified); req.ClassifiedBy != "" && slices.Contains(classify.Categories, c) {
			r := &p.Classification
			r.Category, r.Fallback, r.Priority = c, false, classify.PriorityOf(c)
			p.ClassifiedBy = req.ClassifiedBy
		}
		p.Category = string(p.Classification.Category)
	}
	p.size(req.PromptTokens)
	md := p.Classification.Metadata
	kind := req.AnswerKind
	if kind == "" {
		kind = md.AnswerKind
	}
	k, err := consensus.ParseKind(kind)
	if err != nil {
		return &Failure{Kind: resilience.MalformedRequest, Err: problems.Errors{{Field: "metadata.answer_kind", Message: err.Error()}}}
	}
	p.AnswerKind = k
	return nil
}

// ChooseBlueprint is step 3: the category's blueprint with the request's overrides, and the deadlines.
func (p *Plan) ChooseBlueprint(req Request, now time.Time) *Failure {
	s := p.s
	bp, err := s.Blueprints.Get(p.Category)
	if err != nil {
		return &Failure{Kind: resilience.UnknownBlueprint, Err: err}
	}
	if bp, err = bp.Apply(req.Overrides); err != nil {
		return &Failure{Kind: resilience.MalformedRequest, Err: err}
	}
	if len(req.Models) > 0 && req.Overrides.MinResponses == nil {
		// An explicit models list caps the workers; the quorum follows unless the request set it.
		bp.Workers = min(bp.Workers, len(req.Models))
		bp.MinResponses = min(bp.MinResponses, bp.Workers)
	}
	p.Blueprint, p.Overrides = bp, req.Overrides.Changed()
	p.deadlines(req, now)
	return nil
}

// Bound is how long a request waits without a caller's timeout: every quorum round at the blueprint's
// full timeout, plus the arbiter's time when the strategy asks one (rotating, weighted, pairwise).
func Bound(bp blueprints.Blueprint, rounds int, arbiter time.Duration) time.Duration {
	d := time.Duration(1+max(rounds, 0)) * bp.Timeout()
	if asksArbiter(bp) {
		d += arbiter
	}
	return d
}

func asksArbiter(bp blueprints.Blueprint) bool {
	return consensus.AsksArbiter(bp.Strategy) && bp.Workers > 1
}

// deadlines sets when the answer is due (the caller's timeout from the request's receipt, or the
// blueprint's bound) and when collection ends: early enough to leave the arbiter its time, a quarter of
// the caller's timeout at most.
func (p *Plan) deadlines(req Request, now time.Time) {
	s := p.s
	start := req.ReceivedAt
	if start.IsZero() || start.After(now) {
		start = now
	}
	budget, reserve := req.Timeout, time.Duration(0)
	switch {
	case budget <= 0:
		budget = Bound(p.Blueprint, p.Rounds(), s.ArbiterTimeout)
		if asksArbiter(p.Blueprint) {
			reserve = s.ArbiterTimeout
		}
	case asksArbiter(p.Blueprint):
		reserve = min(s.ArbiterTimeout, budget/4)
	}
	p.Deadline = start.Add(budget)
	p.CollectBy = p.Deadline.Add(-reserve)
	maxQueue := s.MaxQueue
	if maxQueue <= 0 {
		maxQueue = admission.DefaultMaxQueue
	}
	p.QueueBy = start.Add(maxQueue)
	if p.CollectBy.Before(p.QueueBy) {
		p.QueueBy = p.CollectBy
	}
}

// FaultAfter is how long a call to a provider must have had before its timeout counts as a fault: the
// blueprint's timeout, or the provider's floor when that is longer.
func (p *Plan) FaultAfter(provider string) time.Duration {
	return max(p.Blueprint.Timeout(), p.s.TimeoutFloors[provider])
}

// Select is step 4: Thompson Sampling (or the configured policy) over the category's eligible arms.
func (p *Plan) Select(w World, req Request, rng *rand.Rand) *Failure {
	if len(req.Models) > 0 {
		p.requested = make(map[string]bool, len(req.Models))
		for _, m := range req.Models {
			p.requested[m] = true
		}
	}
	p.lacks = p.needs(req)
	if globs := req.Allowed; len(globs) > 0 || req.PricedOnly {
		cat := p.s.Catalog.Load()
		p.allowed = func(model string) bool {
			if len(globs) > 0 && !keys.Matches(globs, model) {
				return false
			}
			m, ok := cat.Get(model)
			return !req.PricedOnly || (ok && !m.Unpriced)
		}
	}
	// A fixed panel votes at once: twice the panel is drawn, so that a family over its share leaves its
	// place to the next best. An adaptive quorum's answer is mostly its first wave's, which no family
	// may fill by itself.
	adaptive, n := p.Blueprint.Adaptive(), p.Blueprint.Workers
	if !adaptive {
		n *= 2
	}
	cands := w.Candidates(p.Category)
	sel := bandit.Select(rng, *cands, p.query(w, n))
	w.Release(cands)
	if adaptive {
		sel.Picks = AcrossFamilies(sel.Picks, p.Blueprint.MinResponses)
	} else {
		var capped []bandit.Pick
		sel.Picks, capped = NoFamilyMajority(sel.Picks, p.Blueprint.Workers)
		for _, c := range capped {
			sel.Skipped = append(sel.Skipped, bandit.Skip{Model: c.Model, Provider: c.Provider, Reason: bandit.FamilyMajority})
		}
	}
	p.Selection = sel
	if len(sel.Picks) > 0 {
		return nil
	}
	return withCauses(noModel(sel, len(req.Models) > 0, req, w.Now()), sel.Skipped, w)
}

// withCauses names in a failure to select why each model was left out, the provider's last fault with
// an open breaker ("provider_breaker_open after connection_refused: 127.0.0.1:9999"). The models a
// request did not name are not listed, nor are causes added to a request refused for what it asks
// (400): its details are its own problems.
func withCauses(f *Failure, skipped []bandit.Skip, w World) *Failure {
	if f.Kind == resilience.MalformedRequest {
		return f
	}
	var out problems.Errors
	now := w.Now()
	for _, s := range skipped {
		if s.Reason == bandit.NotRequested || s.Reason == bandit.NotAllowed {
			continue
		}
		cause := s.Reason.String()
		if s.Reason == bandit.BreakerOpen {
			if f := w.Provider(s.Provider, now).Fault; f != "" {
				cause += " after " + f
			}
		}
		out.Add(s.Model, cause)
	}
	f.Causes = out.Capped()
	return f
}

// needs is what a model must have for the request beyond a context window: sight for its images, a
// provider that carries each parameter it insists on.
func (p *Plan) needs(req Request) func(model, provider string) bandit.SkipReason {
	carries := p.s.Carries
	if !req.Images && (len(req.StrictParams) == 0 || carries == nil) {
		return nil
	}
	cat := p.s.Catalog.Load()
	return func(model, provider string) bandit.SkipReason {
		if req.Images {
			if m, ok := cat.Get(model); !ok || !m.Has("vision") {
				return bandit.NoVision
			}
		}
		if carries != nil {
			for _, param := range req.StrictParams {
				if !carries(provider, param) {
					return bandit.ParametersUnsupported
				}
			}
		}
		return 0
	}
}

// DirectBlueprint names the blueprint of a direct call.
const DirectBlueprint = "direct"

// DirectTimeout is the budget of each model a direct call asks, when the caller's timeout does not
// say: the longest a blueprint gives one call.
const DirectTimeout = 120 * time.Second

// size sets how large the task is: its context length (the tokenizer's count of the prompt when the
// request has one, else the classifier's estimate), whether it is heavy, and the tokens a call needs.
func (p *Plan) size(promptTokens int) {
	md := &p.Classification.Metadata
	if promptTokens > 0 {
		md.ContextLength = promptTokens
	}
	p.Heavy = md.Complexity == classify.ComplexityHigh || md.ContextLength > HeavyTokens
	p.ContextTokens = md.ContextLength + p.s.OutputReserve
}

// Direct plans a direct call in place of steps 2 to 4: the request's model, or the first of its
// fallbacks that can be called now, through one worker. Nothing is classified, no bandit chooses, and
// no consensus will merge: the call keeps the breakers, limits, retries, records and metrics, and a
// model's or provider's fault moves it to the next fallback (Replace).
func (p *Plan) Direct(w World, req Request, now time.Time) *Failure {
	p.Explicit, p.AnswerKind = true, consensus.Text
	p.Classification = classify.Result{Metadata: classify.ExtractMetadata(req.Task), Confidence: 1}
	p.size(req.PromptTokens)
	timeout := DirectTimeout
	if req.Timeout > 0 {
		timeout = min(timeout, req.Timeout)
	}
	p.Blueprint = blueprints.Blueprint{Name: DirectBlueprint, Workers: 1, MinResponses: 1, TimeoutSeconds: timeout.Seconds(), Strategy: blueprints.Majority}
	p.direct = append(append(make([]string, 0, 1+len(req.Fallbacks)), req.Models...), req.Fallbacks...)
	p.requested = make(map[string]bool, len(p.direct))
	for _, m := range p.direct {
		p.requested[m] = true
	}
	p.lacks = p.needs(req)
	p.deadlines(req, now)
	p.Selection = p.next(w, nil, nil)
	if len(p.Selection.Picks) > 0 {
		return nil
	}
	return withCauses(noModel(p.Selection, true, req, w.Now()), p.Selection.Skipped, w)
}

// Rounds is how many quorum rounds may replace failed models: the configured number, or, for a direct
// call, one for each fallback.
func (p *Plan) Rounds() int {
	if p.IsDirect() {
		return len(p.direct) - 1
	}
	return p.s.Rounds
}

// IsDirect reports whether the plan is a direct call's.
func (p *Plan) IsDirect() bool { return p.direct != nil }

// next selects the first of a direct call's models, in order, that was not tried, whose provider did
// not refuse the request's connections and that can be called now, with a skip for each one passed over.
func (p *Plan) next(w World, tried, refused map[string]bool) bandit.Selection {
	q := p.query(w, 1)
	q.Tried, q.Refused = tried, refused
	cat := p.s.Catalog.Load()
	rng := rand.New(rand.NewPCG(0, 0)) // a draw ranks nothing among one candidate; Select wants one
	var sel bandit.Selection
	for _, model := range p.direct {
		m, ok := cat.Get(model)
		if !ok {
			continue // gone from the catalog since the request came
		}
		one := bandit.Select(rng, []bandit.Candidate{{Model: m.ID, Provider: m.Provider, ContextWindow: m.ContextWindow, Alpha: 1, Beta: 1}}, q)
		sel.Skipped = append(sel.Skipped, one.Skipped...)
		if len(one.Picks) > 0 {
			sel.Picks, sel.Eligible = one.Picks, 1
			return sel
		}
	}
	return sel
}

// Assign is step 5: a worker for each pick, tier 1 first for heavy tasks, evenly otherwise.
func (p *Plan) Assign(w World) *Failure {
	now := w.Now()
	workers, rejected, err := assign.Jobs(w.Workers(), len(p.Selection.Picks), p.Heavy, now, nil)
	p.Rejected = rejected
	if err != nil {
		return &Failure{Kind: resilience.AllWorkersOffline, Err: err, RetryAfter: workersBack(w.Workers(), now)}
	}
	p.Workers = workers
	return nil
}

func (p *Plan) query(w World, n int) bandit.Query {
	now := w.Now() // once per selection, not once per candidate
	status := map[string]bandit.ProviderStatus{}
	for _, name := range p.s.Catalog.Load().ProviderNames() {
		status[name] = w.Provider(name, now)
	}
	return bandit.Query{
		N: n, ContextTokens: p.ContextTokens, Providers: status, Policy: p.s.Policy, TotalPulls: w.TotalPulls(p.Category),
		Requested: p.requested, Allowed: p.allowed, Lacks: p.lacks,
		Unavailable: func(model, provider string) (bandit.SkipReason, time.Time) { return w.Model(model, provider, now) },
	}
}

// Replace selects up to n models a quorum round asks in place of models whose provider is down, none of
// those the request already tried nor of the providers that refused its connections and, when the
// request named its models, only among them; each with a worker.
func (p *Plan) Replace(w World, n int, tried, refused map[string]bool, rng *rand.Rand) ([]bandit.Pick, []string) {
	var sel bandit.Selection
	if p.IsDirect() {
		sel = p.next(w, tried, refused) // a direct call's next fallback
	} else {
		q := p.query(w, n)
		q.Tried, q.Refused = tried, refused
		cands := w.Candidates(p.Category)
		sel = bandit.Select(rng, *cands, q)
		w.Release(cands)
	}
	if len(sel.Picks) == 0 {
		return nil, nil
	}
	workers, _, err := assign.Jobs(w.Workers(), len(sel.Picks), p.Heavy, w.Now(), nil)
	if err != nil {
		return nil, nil
	}
	return sel.Picks, workers
}

// Worker assigns one worker to a retry, avoiding the workers in avoid when any other can take it.
func (p *Plan) Worker(w World, avoid []string) (string, bool) {
	exclude := func(name string) bool { return slices.Contains(avoid, name) }
	workers, _, err := assign.Jobs(w.Workers(), 1, p.Heavy, w.Now(), exclude)
	if err != nil && len(avoid) > 0 {
		workers, _, err = assign.Jobs(w.Workers(), 1, p.Heavy, w.Now(), nil) // the same worker beats none
	}
	if err != nil {
		return "", false
	}
	return workers[0], true
}

// SkipsToRecord returns the skipped models worth recording (every reason but not being requested or
// allowed), at most MaxRecordedSkips.
func (p *Plan) SkipsToRecord() []bandit.Skip {
	var out []bandit.Skip
	for _, s := range p.Selection.Skipped {
		if s.Reason != bandit.NotRequested && s.Reason != bandit.NotAllowed && len(out) < MaxRecordedSkips {
			out = append(out, s)
		}
	}
	return out
}

// noModel explains an empty selection: a task too large for every model is 413; providers or models
// that are down or at their limits are 503, with the wait that cures it when one is known (rate limits
// say so with their own kind); requested models that are all excluded otherwise are 503 as well.
func noModel(sel bandit.Selection, explicit bool, req Request, now time.Time) *Failure {
	t := tallySkips(sel.Skipped)
	switch {
	case t.blind+t.strict > 0 && t.limited+t.down+t.disabled+t.stopped == 0:
		// What the request asks, no model can do: waiting cures nothing.
		return t.unsupported(req)
	case t.stopped > 0 && t.limited+t.down+t.disabled == 0:
		// No wait cures it: the actors stay stopped until Conclave restarts.
		return &Failure{Kind: resilience.AllProvidersDown, Err: fmt.Errorf("no eligible model: the providers of %d models are stopped "+
			"after repeated crashes (GET /providers says why)", t.stopped)}
	case t.disabled > 0 && t.limited+t.down == 0:
		return &Failure{Kind: resilience.InvalidAPIKey, Err: fmt.Errorf("no eligible model: the providers of %d models refused their keys (or asked for payment); "+
			"they take calls again once their keys change", t.disabled)}
	case t.tooLarge > 0 && t.limited+t.down == 0:
		return &Failure{Kind: resilience.RequestTooLarge, Err: errors.New("the task does not fit the context window of any eligible model")}
	case t.limited > 0 && t.down == 0:
		return &Failure{Kind: resilience.RateLimited, RetryAfter: t.wait(now),
			Err: fmt.Errorf("no eligible model: %d models are at their rate limit", t.limited)}
	case t.limited+t.down > 0:
		return &Failure{Kind: resilience.AllProvidersDown, RetryAfter: t.wait(now),
			Err: fmt.Errorf("no eligible model: the providers of %d models are down or at their rate limit", t.limited+t.down)}
	case explicit:
		return &Failure{Kind: resilience.AllProvidersDown, Err: errors.New("none of the requested models is available")}
	}
	return &Failure{Kind: resilience.AllProvidersDown, Err: errors.New("no eligible model")}
}

// skipTally counts the models an empty selection skipped, by what would let them answer.
type skipTally struct {
	limited  int // at a rate limit
	down     int // behind an open breaker, or ejected
	disabled int // their provider refused its key
	stopped  int // their provider's actor stopped
	blind    int // they cannot see the request's images
	strict   int // their provider cannot carry every parameter given
	tooLarge int // the task does not fit their context window
	// soonest is the earliest time a limited or down model is expected back (zero: unknown).
	soonest time.Time
}

// tallySkips counts the skipped models by reason.
func tallySkips(skipped []bandit.Skip) skipTally {
	var t skipTally
	for _, s := range skipped {
		switch s.Reason {
		case bandit.NoVision:
			t.blind++
		case bandit.ParametersUnsupported:
			t.strict++
		case bandit.ProviderDisabled:
			t.disabled++
		case bandit.ProviderStopped:
			t.stopped++
		case bandit.ContextTooSmall:
			t.tooLarge++
		case bandit.RateLimitExhausted, bandit.ModelRateLimited:
			t.limited++
			t.expectBack(s.Until)
		case bandit.BreakerOpen, bandit.ModelEjected:
			t.down++
			t.expectBack(s.Until)
		}
	}
	return t
}

// expectBack notes that a model is expected back at until (zero: unknown).
func (t *skipTally) expectBack(until time.Time) {
	if !until.IsZero() && (t.soonest.IsZero() || until.Before(t.soonest)) {
		t.soonest = until
	}
}

// wait is how long a client should wait before trying again: until the first model is expected back,
// and at least a second.
func (t *skipTally) wait(now time.Time) time.Duration {
	wait := t.soonest.Sub(now)
	if t.soonest.IsZero() || wait < time.Second {
		wait = time.Second // the window is moving: come back in a second
	}
	return wait
}

// unsupported is the failure of a request that no model can do as asked: it holds images none of them
// sees, or parameters none of their providers carries.
func (t *skipTally) unsupported(req Request) *Failure {
	var problems problems.Errors
	if t.blind > 0 {
		problems.Add("messages", fmt.Sprintf("hold images, and none of %d models that could answer sees images (the vision capability)", t.blind))
	}
	switch {
	case t.strict > 0 && (req.Strict || len(req.StrictParams) == 0):
		problems.Add("strict_parameters", fmt.Sprintf("the providers of %d models that could answer cannot carry every parameter given", t.strict))
	case t.strict > 0:
		problems.Add(req.StrictParams[0], fmt.Sprintf("the providers of %d models that could answer cannot carry %s (their formats return no "+
			"log probabilities)", t.strict, strings.Join(req.StrictParams, " and ")))
	}
	return &Failure{Kind: resilience.MalformedRequest, Err: problems}
}

// workersBack is when the first worker whose breaker is open admits a probe again.
func workersBack(ws []assign.Worker, now time.Time) time.Duration {
	var soonest time.Time
	for _, w := range ws {
		if u := w.Breaker.OpenUntil; !u.IsZero() && (soonest.IsZero() || u.Before(soonest)) {
			soonest = u
		}
	}
	return max(soonest.Sub(now), time.Second)
}
