package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
	"go.uber.org/zap"
)

// ProviderActor owns one provider's circuit breaker, a breaker per model (outlier ejection), the
// models' own rate-limit blocks, its rate-limit view and its 24-hour reliability. Coordinators ask it
// for a permit before every call (Acquire) and settle every permit with the call's verdict (Outcome).
// A permit is a lease holding the call's breaker tickets: if its outcome never comes (the asker
// stopped first), it is given back when its deadline has passed, so no capacity leaks. It publishes a
// snapshot after each change for model selection to read.
type ProviderActor struct {
	deps    *Deps
	ref     *ProviderRef
	log     *zap.Logger
	breaker *resilience.Breaker
	spread  resilience.Spread
	limiter *ratelimit.Window
	models  map[string]*modelState
	// modelsChanged says the published list of models out of the pool is stale.
	modelsChanged bool
	// disabled, when not empty, is why the provider takes no call until its key changes.
	disabled string
	waiting  []*messages.Acquire
	leases   map[string]lease
	wake     func()
	wakeAt   time.Time
	hours    [24]hourBucket
}

// modelState is what the provider knows of one of its models.
type modelState struct {
	breaker      *resilience.Breaker
	blockedUntil time.Time // its own 429, until its reset
	removed      bool      // the provider does not know it
}

type lease struct {
	model       string
	until       time.Time
	ticket      resilience.Ticket
	modelTicket resilience.Ticket
}

// DefaultLeaseGrace is how long after a permit's deadline its outcome may still arrive before the
// permit is presumed abandoned.
const DefaultLeaseGrace = 5 * time.Second

type hourBucket struct {
	hour          int64
	calls, faults int64
}

// wakeUp is the provider actor's own timer: retry the waiting acquisitions.
type wakeUp struct{}

// NewProviderActor returns the producer of a provider actor.
func NewProviderActor(deps *Deps, ref *ProviderRef) actor.Producer {
	return func() actor.Actor { return &ProviderActor{deps: deps, ref: ref} }
}

// Receive implements actor.Actor.
func (p *ProviderActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.start()
	case *messages.Acquire:
		if m.ReplyTo == nil {
			// A bug in the sender, not an expected failure: let supervision restart this actor.
			panic("provider: acquire without a reply address")
		}
		p.waiting = append(p.waiting, m)
		p.serve(ctx)
	case *messages.Outcome:
		p.outcome(m)
		p.serve(ctx)
	case *messages.KeyChanged:
		if p.disabled != "" {
			p.disabled = ""
			p.log.Warn("provider enabled: its key changed", zap.String("event", "provider_enabled"))
			p.publish()
		}
	case wakeUp:
		p.wake, p.wakeAt = nil, time.Time{}
		p.expireLeases()
		p.serve(ctx)
		p.rearm(ctx)
	case *actor.Stopping:
		if p.wake != nil {
			p.wake()
		}
	}
}

// start builds the actor's state, resuming from its last published snapshot after a restart: the
// breakers keep their state in a newer generation, the models out of the pool stay out.
func (p *ProviderActor) start() {
	p.log = p.deps.Log.With(zap.String("provider", p.ref.Name))
	settings, ok := p.deps.Breakers[p.ref.Name]
	if !ok {
		settings = resilience.ProviderBreakerSettings(p.ref.Name)
	}
	settings.Name = p.ref.Name
	settings.Clock = p.deps.Clock
	settings.OnStateChange = func(t resilience.Transition) {
		p.log.Info("provider breaker transition", zap.String("event", "breaker_transition"),
			zap.String("kind", "provider"), zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	prev := p.ref.Snapshot()
	p.breaker = resilience.ResumeBreaker(settings, prev.Breaker)
	p.spread = resilience.NewSpread(p.breaker.Settings().Threshold)
	p.limiter = ratelimit.NewWindow(p.deps.RateLimits[p.ref.Name], p.deps.Clock)
	p.leases = map[string]lease{}
	p.models = map[string]*modelState{}
	for id, st := range prev.Models {
		m := p.model(id)
		switch st.Reason {
		case ModelRemoved:
			m.removed = true
		case ModelRateLimited:
			m.blockedUntil = st.Until
		case ModelEjected:
			m.breaker = resilience.ResumeBreaker(m.breaker.Settings(), resilience.Snapshot{State: resilience.Open, OpenUntil: st.Until})
		}
	}
	p.modelsChanged = true
	p.publish()
}

// model returns a model's state, creating it on first use.
func (p *ProviderActor) model(id string) *modelState {
	if m, ok := p.models[id]; ok {
		return m
	}
	s, ok := p.deps.ModelBreakers[p.ref.Name]
	if !ok {
		s = resilience.ModelBreakerSettings(id)
	}
	s.Name = id
	s.Clock = p.deps.Clock
	s.OnStateChange = func(t resilience.Transition) {
		p.modelsChanged = true
		p.log.Info("model breaker transition", zap.String("event", "breaker_transition"), zap.String("kind", "model"),
			zap.String("model", id), zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	m := &modelState{breaker: resilience.NewBreaker(s)}
	p.models[id] = m
	return m
}

// serve answers waiting acquisitions in arrival order. A refusal (a removed or ejected model, the
// provider's breaker) is answered at once. An acquisition for a model blocked by its own 429 waits for
// the model's reset when its deadline allows, without holding up the others; when the rate limit says
// no, that acquisition and every later one wait for the window, in order.
func (p *ProviderActor) serve(ctx actor.Context) {
	now := time.Now() // deadlines and leases are wall-clock; breakers, blocks and limits read the injected clock
	clk := p.deps.now()
	var next time.Time
	full := false
	kept := p.waiting[:0]
	for _, a := range p.waiting {
		if a.Deadline != nil && !now.Before(a.Deadline.AsTime()) {
			p.deny(ctx, a, "rate_limited", p.limiter.Wait())
			continue
		}
		if full {
			kept = append(kept, a)
			continue
		}
		m := p.model(a.Model)
		switch {
		case p.disabled != "":
			p.deny(ctx, a, "provider_disabled", 0)
			continue
		case m.removed:
			p.deny(ctx, a, "model_removed", 0)
			continue
		case clk.Before(m.blockedUntil):
			wait := m.blockedUntil.Sub(clk)
			if a.Deadline != nil && now.Add(wait).After(a.Deadline.AsTime()) {
				p.deny(ctx, a, "model_rate_limited", wait)
				continue
			}
			kept = append(kept, a)
			next = soonest(next, now.Add(wait))
			continue
		}
		ticket, err := p.breaker.Allow()
		if err != nil {
			p.refuse(ctx, a, "", err, p.breaker, clk)
			continue
		}
		modelTicket, err := m.breaker.Allow()
		if err != nil {
			p.breaker.Release(ticket)
			p.refuse(ctx, a, "model_", err, m.breaker, clk)
			continue
		}
		if d := p.limiter.Reserve(int(a.Tokens)); !d.Allowed {
			p.breaker.Release(ticket)
			m.breaker.Release(modelTicket)
			full = true
			kept = append(kept, a)
			if d.RetryAfter > 0 {
				next = soonest(next, now.Add(d.RetryAfter))
			}
			if a.Deadline != nil {
				next = soonest(next, a.Deadline.AsTime())
			}
			p.log.Debug("rate limited", zap.String("event", "rate_limited"), zap.String("reason", d.Reason),
				zap.Duration("retry_after", d.RetryAfter), zap.Int("waiting", len(p.waiting)))
			continue
		}
		until := now.Add(time.Minute)
		if a.Deadline != nil {
			until = a.Deadline.AsTime()
		}
		until = until.Add(p.deps.leaseGrace())
		p.leases[a.JobId] = lease{model: a.Model, until: until, ticket: ticket, modelTicket: modelTicket}
		p.wakeBy(ctx, until)
		ctx.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Granted: true, Probe: ticket.Probe() || modelTicket.Probe()})
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	if !next.IsZero() {
		p.wakeBy(ctx, next)
	}
	p.publish()
}

// refuse answers an acquisition a breaker refused: open (until its open period ends) or half-open with
// its probe out.
func (p *ProviderActor) refuse(ctx actor.Context, a *messages.Acquire, prefix string, err error, b *resilience.Breaker, clk time.Time) {
	if err == resilience.ErrProbeInFlight {
		p.deny(ctx, a, prefix+"probe_in_flight", time.Second)
		return
	}
	reason := "breaker_open"
	if prefix != "" {
		reason = "model_ejected"
	}
	p.deny(ctx, a, reason, b.Snapshot().OpenUntil.Sub(clk))
}

// wakeBy makes sure the actor wakes up no later than at.
func (p *ProviderActor) wakeBy(ctx actor.Context, at time.Time) {
	if !p.wakeAt.IsZero() && !at.Before(p.wakeAt) {
		return
	}
	if p.wake != nil {
		p.wake()
	}
	p.wakeAt = at
	p.wake = p.deps.Timers.SendOnce(max(time.Until(at), 0), ctx.Self(), wakeUp{})
}

// rearm keeps a wake-up pending for the earliest lease.
func (p *ProviderActor) rearm(ctx actor.Context) {
	for _, l := range p.leases {
		p.wakeBy(ctx, l.until)
	}
}

// expireLeases gives back the permits whose outcome never came.
func (p *ProviderActor) expireLeases() {
	now := time.Now()
	for id, l := range p.leases {
		if !now.Before(l.until) {
			p.release(id, l)
			p.log.Warn("permit expired without an outcome", zap.String("event", "permit_expired"), zap.String("job_id", id))
		}
	}
}

// release ends a lease without recording anything on the breakers.
func (p *ProviderActor) release(id string, l lease) {
	delete(p.leases, id)
	p.limiter.Release()
	p.breaker.Release(l.ticket)
	p.model(l.model).breaker.Release(l.modelTicket)
}

func (p *ProviderActor) deny(ctx actor.Context, a *messages.Acquire, reason string, retryAfter time.Duration) {
	ctx.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Reason: reason, RetryAfterSeconds: max(retryAfter, 0).Seconds()})
}

// outcome settles a job: an acquisition still waiting is withdrawn; a leased permit ends with the
// call's verdict on the provider's breaker and the model's, the model's or the provider's block on a
// 429, the model's removal on a 404, and the upstream's rate-limit headers.
func (p *ProviderActor) outcome(o *messages.Outcome) {
	for i, a := range p.waiting {
		if a.JobId == o.JobId {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			return
		}
	}
	l, held := p.leases[o.JobId]
	if !held {
		return // expired, or given back already
	}
	delete(p.leases, o.JobId)
	p.limiter.Release()
	m := p.model(l.model)
	now := p.deps.now()
	if rl := o.RateLimit; rl != nil {
		if u := upstream(rl); !u.PerModel {
			p.limiter.Observe(u)
		} else if wait := u.Exhausted(); wait > 0 { // the model's own limits, spent until their reset
			m.blockedUntil = later(m.blockedUntil, now.Add(wait))
			p.modelsChanged = true
		}
	}
	record(p.breaker, l.ticket, o.ProviderEffect)
	record(m.breaker, l.modelTicket, o.ModelEffect)
	switch {
	case o.ModelEffect == messages.Effect_EFFECT_FAILURE:
		if p.spread.Fault(l.model) {
			// Consecutive faults across several models: the provider itself is failing.
			p.breaker.Trip()
		}
	case o.ProviderEffect == messages.Effect_EFFECT_SUCCESS:
		p.spread.Success()
	}
	if o.BlockModelSeconds > 0 {
		m.blockedUntil = later(m.blockedUntil, now.Add(seconds(o.BlockModelSeconds)))
		p.modelsChanged = true
	}
	if o.BlockProviderSeconds > 0 {
		p.limiter.Observe(ratelimit.Upstream{RetryAfter: seconds(o.BlockProviderSeconds), RemainingRequests: -1, RemainingTokens: -1})
	}
	if o.DisableProvider && p.disabled == "" {
		p.disabled = o.DisabledBecause
		if p.disabled == "" {
			p.disabled = "its key was refused"
		}
		p.log.Error("provider disabled until its key changes", zap.String("event", "provider_disabled"), zap.String("because", p.disabled))
	}
	if o.RemoveModel && !m.removed {
		m.removed, p.modelsChanged = true, true
		p.log.Warn("model removed from the pool", zap.String("event", "model_removed"), zap.String("model", l.model))
	}
	if o.ProviderEffect != messages.Effect_EFFECT_NEUTRAL || o.ModelEffect != messages.Effect_EFFECT_NEUTRAL {
		p.count(o.ProviderEffect == messages.Effect_EFFECT_FAILURE || o.ModelEffect == messages.Effect_EFFECT_FAILURE)
	}
}

// settlement is the Outcome that settles a call's permit with its verdict: the effects on the
// provider's and the model's breakers, the block a 429 asks for (its Retry-After, or a second without
// one), the model's removal, and what the reply said of the provider's limits. r may be nil.
func settlement(jobID, model string, v resilience.Verdict, retryAfter time.Duration, r *messages.JobResult) *messages.Outcome {
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
		if r.Usage != nil {
			o.Tokens = r.Usage.InputTokens + r.Usage.OutputTokens
		}
	}
	return o
}

// record applies an effect to a breaker: success and failure are counted, neutral gives the ticket back.
func record(b *resilience.Breaker, t resilience.Ticket, e messages.Effect) {
	switch e {
	case messages.Effect_EFFECT_SUCCESS:
		b.Record(t, true)
	case messages.Effect_EFFECT_FAILURE:
		b.Record(t, false)
	default:
		b.Release(t)
	}
}

// soonest is the earlier of two times, a zero time being no time at all.
func soonest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func upstream(rl *messages.RateLimitInfo) ratelimit.Upstream {
	return ratelimit.Upstream{
		RemainingRequests: rl.RemainingRequests, RemainingTokens: rl.RemainingTokens,
		LimitRequests: rl.LimitRequests, LimitTokens: rl.LimitTokens,
		ResetRequests: seconds(rl.ResetRequestsSeconds), ResetTokens: seconds(rl.ResetTokensSeconds), PerModel: rl.PerModel,
	}
}

func (p *ProviderActor) count(fault bool) {
	hour := p.deps.now().Unix() / 3600
	b := &p.hours[hour%24]
	if b.hour != hour {
		*b = hourBucket{hour: hour}
	}
	b.calls++
	if fault {
		b.faults++
	}
}

func (p *ProviderActor) publish() {
	now := p.deps.now()
	hour := now.Unix() / 3600
	var calls, faults int64
	for _, b := range p.hours {
		if b.hour > hour-24 {
			calls += b.calls
			faults += b.faults
		}
	}
	requests, tokens, inFlight := p.limiter.Counts()
	snap := &ProviderSnapshot{
		Name:         p.ref.Name,
		Breaker:      p.breaker.Snapshot(),
		Limits:       p.deps.RateLimits[p.ref.Name],
		RateLimitUse: p.limiter.Use(),
		Requests:     requests,
		Tokens:       tokens,
		InFlight:     inFlight,
		Waiting:      len(p.waiting),
		Reliability:  float64(calls-faults+1) / float64(calls+2),
		Calls24h:     calls,
		Faults24h:    faults,
		Disabled:     p.disabled,
	}
	if snap.RateLimitUse >= 1 {
		if wait := p.limiter.Wait(); wait > 0 {
			snap.RoomAt = now.Add(wait)
		}
	}
	prev := p.ref.Snapshot()
	snap.Models = prev.Models // unchanged: share the published map, never mutate it
	if p.modelsChanged {
		snap.Models = p.outOfPool(now)
		p.modelsChanged = false
	}
	p.ref.snap.Store(snap)
}

// outOfPool lists the models out of the pool at now, and why.
func (p *ProviderActor) outOfPool(now time.Time) map[string]ModelState {
	out := map[string]ModelState{}
	for id, m := range p.models {
		switch b := m.breaker.Snapshot(); {
		case m.removed:
			out[id] = ModelState{Reason: ModelRemoved}
		case b.State == resilience.Open:
			out[id] = ModelState{Reason: ModelEjected, Until: b.OpenUntil}
		case now.Before(m.blockedUntil):
			out[id] = ModelState{Reason: ModelRateLimited, Until: m.blockedUntil}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
