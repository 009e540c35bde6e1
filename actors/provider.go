package actors

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ProviderActor is the shell of one provider's admission (admission.Machine): it turns acquisitions,
// outcomes, the limiter's answers and its timers into the machine's events, and the machine's effects
// into permits, dispatches, limiter calls and wake-ups. It owns the provider's limiter and its
// published snapshot, which model selection reads.
//
// A coordinator acquires and settles in place (ProviderRef.Acquire, ProviderRef.Settle) while the
// actor is up: a permit needs no other actor's state, and a message each way cost two deliveries per
// call. The machine is then guarded by mu, which the actor's own messages take too; everything else
// still goes through the mailbox.
type ProviderActor struct {
	deps *Deps
	ref  *ProviderRef
	log  *zap.Logger
	self *actor.PID
	root *actor.RootContext

	mu sync.Mutex
	m  *admission.Machine
	// limiter is called off the actor (it may be Redis), its answers coming back as messages, unless
	// it is immediate: it never blocks, and is called in place.
	limiter   ratelimit.Limiter
	immediate bool
	usage     ratelimit.Usage
	wake      alarm
	refresh   func()
	// publishedAt is when the last snapshot was published (wall clock).
	publishedAt time.Time
}

// DefaultLeaseGrace is how long after a permit's deadline its outcome may still arrive before the
// permit is presumed abandoned.
const DefaultLeaseGrace = admission.DefaultLeaseGrace

// wakeUp is the provider actor's own timer: expire leases and retry the waiting acquisitions.
type wakeUp struct{}

// reserved is the limiter's answer to a reservation.
type reserved struct {
	jobID    string
	decision ratelimit.Decision
	err      error
}

// limiterUsage is the limiter's answer to a release, an observation or a refresh.
type limiterUsage struct {
	usage    ratelimit.Usage
	released bool
}

// refreshUsage asks the limiter for its use: other controllers spend a shared limit too.
type refreshUsage struct{}

// UsageRefresh is how often a provider actor reads its limiter's use.
const UsageRefresh = time.Second

// limiterTimeout bounds one limiter call (Redis); the fallback answers beyond it.
const limiterTimeout = 2 * time.Second

// NewProviderActor returns the producer of a provider actor.
func NewProviderActor(deps *Deps, ref *ProviderRef) actor.Producer {
	return func() actor.Actor { return &ProviderActor{deps: deps, ref: ref} }
}

// Receive implements actor.Actor.
func (p *ProviderActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.start(ctx)
	case *messages.Acquire:
		p.acquire(m)
	case *messages.Outcome:
		p.settle(m)
	case *messages.PeerBreakerOpened:
		if why := checkPeerOpened(m, p.ref.Name); why != "" {
			p.deps.Drop(KindProvider, why, m)
			return
		}
		p.peerOpened(m)
	case *messages.KeyChanged:
		p.run(func(now, clk time.Time) {
			if p.m.Enable() {
				p.log.Warn("provider enabled: its key changed", zap.String("event", "provider_enabled"))
			}
		})
	case crashed:
		panic(m.reason)
	case wakeUp:
		p.run(func(now, clk time.Time) {
			if p.wake.due() {
				p.m.Wake(now, clk)
			}
		})
	case *reserved:
		p.run(func(now, clk time.Time) { p.m.Reserved(now, clk, m.jobID, answerOf(m.decision, m.err)) })
	case *limiterUsage:
		p.run(func(now, clk time.Time) {
			p.usage = m.usage
			p.m.Usage(now, clk, m.usage.RoomIn, m.released)
		})
	case refreshUsage:
		p.refresh = p.deps.Timers.SendOnce(UsageRefresh, ctx.Self(), refreshUsage{})
		lim := p.limiter
		p.askLimiter(false, func(c context.Context) (ratelimit.Usage, error) { return lim.Usage(c) })
	case *actor.Restarting:
		// Its successor starts its own refresh and wake-ups.
		p.ref.live.Store(nil)
		p.stopTimers()
	case *actor.Stopping:
		p.ref.live.Store(nil)
		p.stopTimers()
		// Stopped for good after repeated crashes (at shutdown nobody waits): the acquisitions still
		// waiting are refused, so their askers go elsewhere instead of waiting for their deadlines.
		p.run(func(now, clk time.Time) { p.m.Stop() })
	default:
		p.deps.unknown(KindProvider, m)
	}
}

// Refusals of a provider actor that name no breaker or limit.
const (
	// PermitModelUnknown refuses an acquisition for a model that is not in the catalog, or not this
	// provider's.
	PermitModelUnknown = "model_unknown"
	// PermitProviderStopped refuses an acquisition whose provider actor is stopped for good.
	PermitProviderStopped = admission.ReasonStopped
)

// stopTimers ends the usage refresh and the wake-up.
func (p *ProviderActor) stopTimers() {
	if p.refresh != nil {
		p.refresh()
	}
	p.mu.Lock()
	p.wake.stop()
	p.mu.Unlock()
}

// start builds the machine, resuming from the last published snapshot after a restart.
func (p *ProviderActor) start(ctx actor.Context) {
	p.log = p.deps.Log.With(zap.String("provider", p.ref.Name))
	p.self, p.root = ctx.Self(), ctx.ActorSystem().Root
	p.wake = newAlarm(p.root, p.self, wakeUp{})
	settings, ok := p.deps.Breakers[p.ref.Name]
	if !ok {
		settings = resilience.ProviderBreakerSettings(p.ref.Name)
	}
	settings.Name = p.ref.Name
	settings.Clock = p.deps.Clock
	settings.OnStateChange = func(t resilience.Transition) {
		p.deps.Metrics.BreakerTransition(p.ref.Name, t.To.String())
		if t.To == resilience.Open && p.deps.BreakerOpened != nil {
			p.deps.BreakerOpened(p.ref.Name, t.At.Add(p.m.BreakerSettings().OpenFor))
		}
		p.log.Info("provider breaker transition", zap.String("event", "breaker_transition"),
			zap.String("kind", "provider"), zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	p.m = admission.New(admission.Config{Breaker: settings, ModelBreaker: p.modelBreaker, MaxQueue: p.deps.maxQueue(),
		LeaseGrace: p.deps.leaseGrace()}, *p.ref.Snapshot())
	p.limiter = p.deps.limiter(p.ref.Name)
	p.immediate = ratelimit.Immediate(p.limiter)
	p.refresh = p.deps.Timers.SendOnce(UsageRefresh, p.self, refreshUsage{})
	p.publish()
	p.ref.live.Store(p)
}

// modelBreaker returns a model's breaker settings.
func (p *ProviderActor) modelBreaker(id string) resilience.Settings {
	s, ok := p.deps.ModelBreakers[p.ref.Name]
	if !ok {
		s = resilience.ModelBreakerSettings(id)
	}
	s.Name = id
	s.Clock = p.deps.Clock
	s.OnStateChange = func(t resilience.Transition) {
		p.log.Info("model breaker transition", zap.String("event", "breaker_transition"), zap.String("kind", "model"),
			zap.String("model", id), zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	return s
}

// crashed carries a panic that happened in place, on another actor's goroutine, to the actor whose
// state it hit: the actor crashes with it, so that its supervisor restarts it from its published state.
type crashed struct{ reason any }

// crashOnPanic, deferred by an acquisition or a settlement made in place on the asker's goroutine,
// makes a panic there the provider actor's crash too (crashed), whose state it may have half changed,
// before it goes on up to the asker.
func (p *ProviderActor) crashOnPanic() {
	if v := recover(); v != nil {
		p.ref.live.CompareAndSwap(p, nil) // no more calls in place until it is restarted
		p.root.Send(p.self, crashed{reason: v})
		panic(v)
	}
}

// run applies one event to the machine under its lock, carries out its effects and publishes.
func (p *ProviderActor) run(event func(now, clk time.Time)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now, clk := time.Now(), p.deps.now()
	event(now, clk)
	for effects := p.m.Effects(); len(effects) > 0; effects = p.m.Effects() {
		for _, e := range effects {
			p.do(now, clk, e)
		}
	}
	p.publishAt(clk, now)
}

// acquire checks an acquisition and gives it to the machine. A well-formed one for a model this
// provider does not serve (one discovery just took out of the catalog) is refused, rather than left
// waiting for its deadline.
func (p *ProviderActor) acquire(a *messages.Acquire) {
	if why := checkAcquire(a, p.ref.Name, p.deps.catalog(), time.Now()); why != "" {
		p.deps.Drop(KindProvider, why, a)
		if why == DropUnknownModel || why == DropOtherProvider {
			p.deny(a, PermitModelUnknown, 0)
		}
		return
	}
	p.run(func(now, clk time.Time) {
		p.m.Acquire(now, clk, admission.Request{ID: a.JobId, Model: a.Model, Tokens: int(a.Tokens),
			Deadline: timeOf(a.Deadline), QueueBy: timeOf(a.QueueBy), Ask: a})
	})
}

// settle checks an outcome and gives it to the machine; one naming another model than its lease's is
// dropped.
func (p *ProviderActor) settle(o *messages.Outcome) {
	if why := checkOutcome(o); why != "" {
		p.deps.Drop(KindProvider, why, o)
		return
	}
	p.run(func(now, clk time.Time) {
		if model, held := p.m.Leased(o.JobId); held && o.Model != "" && o.Model != model {
			p.deps.Drop(KindProvider, DropWrongTarget, o)
			return
		}
		p.m.Settle(now, clk, outcomeOf(o))
	})
}

// outcomeOf is an Outcome message as the machine's event. What the provider said of its own limits
// blocks the provider (or, for a model's own limits, the model) until their reset; the limiter hears
// of the provider's after the call's release (Words).
func outcomeOf(o *messages.Outcome) admission.Outcome {
	e := admission.Outcome{ID: o.JobId, ProviderEffect: effectOf(o.ProviderEffect), ModelEffect: effectOf(o.ModelEffect),
		Tokens: int(o.Tokens), RemoveModel: o.RemoveModel, Stop: o.Stop, ModelWait: seconds(o.BlockModelSeconds),
		ProviderWait: seconds(o.BlockProviderSeconds)}
	var words []ratelimit.Upstream
	if rl := o.RateLimit; rl != nil {
		if u := fleet.UpstreamOf(rl); !u.PerModel {
			words = append(words, u)
			e.ProviderWait = max(e.ProviderWait, u.Exhausted())
		} else {
			e.ModelWait = max(e.ModelWait, u.Exhausted())
		}
	}
	if o.BlockProviderSeconds > 0 {
		words = append(words, ratelimit.Upstream{RetryAfter: seconds(o.BlockProviderSeconds), RemainingRequests: -1, RemainingTokens: -1})
	}
	e.Words = words
	if o.Fault != "" {
		e.Fault = problems.Clip(o.Fault, maxDisabledBecause)
	}
	if o.DisableProvider {
		e.Disable = problems.Clip(o.DisabledBecause, maxDisabledBecause)
		if e.Disable == "" {
			e.Disable = "its key was refused"
		}
	}
	return e
}

// do carries out one of the machine's effects.
func (p *ProviderActor) do(now, clk time.Time, e admission.Effect) {
	switch e.Kind {
	case admission.Grant:
		a := e.Ask.(*messages.Acquire)
		if d := a.Dispatch; d != nil && a.DispatchTo != nil {
			// The asker hears of the grant from the worker: one message less per call.
			if e.Probe {
				d = &messages.Dispatch{Job: d.Job, ReplyTo: d.ReplyTo, Probe: true}
			}
			p.root.Send(a.DispatchTo, d)
		} else {
			p.root.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Granted: true, Probe: e.Probe})
		}
	case admission.Deny:
		p.deny(e.Ask.(*messages.Acquire), e.Reason, e.RetryAfter)
	case admission.Reserve:
		if p.immediate {
			d, err := p.limiter.Reserve(context.Background(), e.ID, e.Tokens)
			p.usage = d.Usage
			p.m.Reserved(now, clk, e.ID, answerOf(d, err))
			return
		}
		p.reserve(e.ID, e.Tokens)
	case admission.Release:
		words, _ := e.Words.([]ratelimit.Upstream)
		p.release(now, clk, e.ID, e.Tokens, words)
	case admission.Cancel:
		// Its asker stopped waiting before hearing the job had started: after the dispatch, so the
		// worker gets the two in order.
		if a := e.Ask.(*messages.Acquire); a.DispatchTo != nil {
			p.root.Send(a.DispatchTo, &messages.CancelJob{JobId: a.JobId})
		}
	case admission.Wake:
		p.wake.by(e.At)
	case admission.Idle:
		p.wake.stop() // no lease to expire, nobody waiting: no idle wake-up
	case admission.Expired:
		p.log.Warn("permit expired without an outcome", zap.String("event", "permit_expired"), zap.String("job_id", e.ID))
	case admission.Duplicate:
		p.deps.Drop(KindProvider, DropDuplicate, e.Ask.(*messages.Acquire))
	case admission.LimiterDown:
		p.log.Warn("rate limiter unavailable", zap.String("event", "limiter_error"), zap.Error(e.Err))
	case admission.Limited:
		p.log.Debug("rate limited", zap.String("event", "rate_limited"), zap.String("reason", e.Reason),
			zap.Duration("retry_after", e.RetryAfter), zap.Int("waiting", p.m.Waiting()))
	case admission.Disabled:
		p.log.Error("provider disabled until its key changes", zap.String("event", "provider_disabled"), zap.String("because", e.Reason))
	case admission.Removed:
		p.log.Warn("model removed from the pool", zap.String("event", "model_removed"), zap.String("model", e.Model))
	}
}

// answerOf is a limiter's answer as the machine's event.
func answerOf(d ratelimit.Decision, err error) admission.Answer {
	a := admission.Answer{Allowed: d.Allowed, RetryAfter: d.RetryAfter, Reason: d.Reason, RoomIn: d.Usage.RoomIn}
	switch {
	case errors.Is(err, ratelimit.ErrTooLarge):
		a.TooLarge = true
	case err != nil:
		a.Failed = err
	}
	return a
}

// reserve asks a limiter that may block for a reservation, off the actor.
func (p *ProviderActor) reserve(id string, tokens int) {
	self, root, limiter := p.self, p.root, p.limiter
	go func() {
		c, cancel := context.WithTimeout(context.Background(), limiterTimeout)
		defer cancel()
		d, err := limiter.Reserve(c, id, tokens)
		root.Send(self, &reserved{jobID: id, decision: d, err: err})
	}()
}

// release gives a call's reservation back to the limiter, with the tokens it used (-1: unknown), then
// tells it what the provider said of its limits (words). An immediate limiter is called in place.
func (p *ProviderActor) release(now, clk time.Time, id string, tokens int, words []ratelimit.Upstream) {
	if p.immediate {
		p.usage, _ = p.limiter.Release(context.Background(), id, tokens)
		for _, w := range words {
			p.usage, _ = p.limiter.Observe(context.Background(), w)
		}
		p.m.Usage(now, clk, p.usage.RoomIn, true) // a slot the queue may wait for came back
		return
	}
	lim := p.limiter
	p.askLimiter(true, func(c context.Context) (ratelimit.Usage, error) {
		u, err := lim.Release(c, id, tokens)
		for _, w := range words {
			u, err = lim.Observe(c, w)
		}
		return u, err
	})
}

// askLimiter runs a limiter call that answers with usage off the actor, its answer coming back as a
// message; a limiter that never blocks is called in place.
func (p *ProviderActor) askLimiter(released bool, call func(context.Context) (ratelimit.Usage, error)) {
	if p.immediate { // a refresh: releases of an immediate limiter are made in place (release)
		p.run(func(now, clk time.Time) {
			p.usage, _ = call(context.Background())
			p.m.Usage(now, clk, p.usage.RoomIn, false)
		})
		return
	}
	self, root, log := p.self, p.root, p.log
	go func() {
		c, cancel := context.WithTimeout(context.Background(), limiterTimeout)
		defer cancel()
		u, err := call(c)
		if err != nil {
			log.Debug("rate limiter call failed", zap.String("event", "limiter_error"), zap.Error(err))
		}
		root.Send(self, &limiterUsage{usage: u, released: released})
	}()
}

// peerOpened opens the breaker because another controller's opened.
func (p *ProviderActor) peerOpened(m *messages.PeerBreakerOpened) {
	p.run(func(now, clk time.Time) {
		until := m.GetOpenUntil().AsTime()
		if !p.m.PeerOpened(now, clk, until) {
			return
		}
		p.deps.Metrics.BreakerTransition(p.ref.Name, resilience.Open.String())
		p.log.Warn("provider breaker opened by another controller", zap.String("event", "breaker_peer_open"), zap.String("node", m.Node),
			zap.Time("open_until", p.m.Breaker().OpenUntil))
	})
}

func (p *ProviderActor) deny(a *messages.Acquire, reason string, retryAfter time.Duration) {
	p.root.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Reason: reason, RetryAfterSeconds: max(retryAfter, 0).Seconds()})
}

// maxDisabledBecause bounds the reason a disabled provider publishes and logs (the provider's own
// message, which may be long).
const maxDisabledBecause = 1024

// Settlement is the Outcome that settles a call's permit with its verdict: the effects on the
// provider's and the model's breakers, the block a 429 asks for (its Retry-After, or a second without
// one), the model's removal, and what the reply said of the provider's limits. r may be nil.
func Settlement(jobID, model string, v resilience.Verdict, retryAfter time.Duration, r *messages.JobResult) *messages.Outcome {
	o := &messages.Outcome{JobId: jobID, Model: model, ProviderEffect: effect(v.Provider), ModelEffect: effect(v.Model), RemoveModel: v.RemoveModel,
		DisableProvider: v.DisableProvider}
	block := time.Second.Seconds()
	if retryAfter > 0 {
		block = retryAfter.Seconds()
	}
	if v.BlockModel {
		o.BlockModelSeconds = block
	}
	if v.BlockProvider {
		o.BlockProviderSeconds = block
	}
	if r != nil {
		o.RateLimit = r.RateLimit
		if v.DisableProvider {
			o.DisabledBecause = r.ErrorKind + ": " + r.ErrorMessage
		}
		if !r.Ok && (v.Provider == resilience.Failure || v.Model == resilience.Failure) {
			o.Fault = execution.Cause(resilience.Kind(r.ErrorKind), r)
		}
		if r.Usage != nil {
			o.Tokens = r.Usage.InputTokens + r.Usage.OutputTokens
		}
	}
	return o
}

// effectOf is a breaker effect as the core names it.
func effectOf(e messages.Effect) resilience.Effect {
	switch e {
	case messages.Effect_EFFECT_SUCCESS:
		return resilience.Success
	case messages.Effect_EFFECT_FAILURE:
		return resilience.Failure
	}
	return resilience.Neutral
}

// timeOf is a message's time, zero when it has none.
func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func (p *ProviderActor) publish() { p.publishAt(p.deps.now(), time.Now()) }

// publishAt publishes the snapshot at clk on the injected clock, wall being the time on the real one.
func (p *ProviderActor) publishAt(clk, wall time.Time) {
	calls, faults := p.m.Calls24h(clk)
	u := p.usage
	snap := providerstate.Snapshot{
		Name:         p.ref.Name,
		Breaker:      p.m.Breaker(),
		Limits:       p.deps.RateLimits[p.ref.Name],
		RateLimitUse: u.Use(),
		LimitUse:     providerstate.LimitUse{Requests: u.RequestsUse, Tokens: u.TokensUse, Concurrency: u.ConcurrencyUse},
		SharedLimits: u.Shared,
		Requests:     u.Requests,
		Tokens:       u.Tokens,
		InFlight:     u.InFlight,
		Waiting:      p.m.Waiting(),
		Reliability:  float64(calls-faults+1) / float64(calls+2),
		Calls24h:     calls,
		Faults24h:    faults,
		Disabled:     p.m.Disabled(),
		LastFault:    p.m.LastFault(),
	}
	if snap.RateLimitUse >= 1 {
		if wait := max(u.RoomIn, u.Blocked); wait > 0 {
			snap.RoomAt = clk.Add(wait)
		}
	}
	prev := p.ref.snap.Load()
	if models, changed := p.m.OutOfPool(clk); changed {
		snap.Models = models
	} else if snap.Models = prev.Models; !decisionsDiffer(prev, &snap) && wall.Sub(p.publishedAt) < StatsEvery {
		return // only the counters moved: they wait for the next publication
	}
	p.publishedAt = wall
	published := snap // only a snapshot that is published leaves the stack
	p.ref.snap.Store(&published)
}

// StatsEvery is how often at most a provider publishes a snapshot in which only its counters moved
// (calls, tokens and calls in flight, reliability): a request changes them several times, and
// publishing a snapshot for each was a fifth of the provider's cost. What selection decides on is
// published at once; the counters at the latest with the next usage refresh.
const StatsEvery = 100 * time.Millisecond

// decisionsDiffer reports whether two snapshots differ in what selection and admission read: the
// breaker, the limits' use, when a full limit has room, a disabled key, waiting acquisitions.
func decisionsDiffer(a, b *providerstate.Snapshot) bool {
	return a.Breaker != b.Breaker || a.RateLimitUse != b.RateLimitUse || !a.RoomAt.Equal(b.RoomAt) || a.Disabled != b.Disabled ||
		a.Waiting != b.Waiting || a.SharedLimits != b.SharedLimits || a.LastFault != b.LastFault
}
