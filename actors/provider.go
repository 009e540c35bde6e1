package actors

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/core/validation"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
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
	// limiter is called off the actor (it may be Redis), its answers coming back as messages, unless
	// it is immediate: it never blocks, and is called in place.
	limiter   ratelimit.Limiter
	immediate bool
	usage     ratelimit.Usage
	// reserving is the acquisition whose reservation is out; only one is, so acquisitions are served
	// in order. Until limitedUntil (or, with waitRelease, until a call of this provider ends), the
	// limiter has said no and is not asked again. An acquisition waits for that only until its queue
	// bound (admission.Queue).
	reserving    *reservation
	limitedUntil time.Time
	waitRelease  bool
	refresh      func()
	models       map[string]*modelState
	// modelsChanged says the published list of models out of the pool is stale.
	modelsChanged bool
	// disabled, when not empty, is why the provider takes no call until its key changes.
	disabled string
	// lastFault is the last failure of a call that failed the provider's breaker or a model's, as
	// callers are told it: it names why the breaker is open.
	lastFault string
	waiting   []waiter
	leases    map[string]lease
	wake      alarm
	hours     [24]hourBucket
	// publishedAt is when the last snapshot was published (wall clock).
	publishedAt time.Time
}

// modelState is what the provider knows of one of its models.
type modelState struct {
	breaker      *resilience.Breaker
	blockedUntil time.Time // its own 429, until its reset
	removed      bool      // the provider does not know it
}

// waiter is an acquisition in the queue, with the latest moment it may wait for the rate limits.
type waiter struct {
	a     *messages.Acquire
	bound time.Time
}

type lease struct {
	model       string
	until       time.Time
	ticket      resilience.Ticket
	modelTicket resilience.Ticket
	// worker is where the provider dispatched the call itself, or nil.
	worker *actor.PID
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

// reservation is an acquisition whose breaker tickets are held while the limiter decides.
type reservation struct {
	a                   *messages.Acquire
	ticket, modelTicket resilience.Ticket
	withdrawn           bool
}

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
		p.start()
		p.refresh = p.deps.Timers.SendOnce(UsageRefresh, ctx.Self(), refreshUsage{})
	case *messages.Acquire:
		if why := p.checkAcquire(m); why != "" {
			p.deps.Drop(KindProvider, why, m)
			if why == DropUnknownModel || why == DropOtherProvider {
				// Well formed but for a model this provider does not serve (one discovery just took out of
				// the catalog): its asker is told so, rather than left waiting for its deadline.
				p.deny(ctx, m, PermitModelUnknown, 0)
			}
			return
		}
		now := time.Now()
		p.waiting = append(p.waiting, waiter{a: m, bound: admission.QueueBound(now, p.deps.maxQueue(), timeOf(m.QueueBy), timeOf(m.Deadline))})
		p.serve(ctx)
	case *messages.Outcome:
		if why := p.checkOutcome(m); why != "" {
			p.deps.Drop(KindProvider, why, m)
			return
		}
		p.outcome(ctx, m)
		p.serve(ctx)
		if len(p.leases) == 0 && len(p.waiting) == 0 {
			p.wake.stop() // no lease to expire, nobody waiting: no idle wake-up
		}
	case *messages.PeerBreakerOpened:
		if why := checkPeerOpened(m, p.ref.Name); why != "" {
			p.deps.Drop(KindProvider, why, m)
			return
		}
		p.peerOpened(m)
		p.serve(ctx)
	case *messages.KeyChanged:
		if p.disabled != "" {
			p.disabled = ""
			p.log.Warn("provider enabled: its key changed", zap.String("event", "provider_enabled"))
			p.publish()
		}
	case wakeUp:
		p.wake.rang()
		p.expireLeases(ctx)
		p.serve(ctx)
		p.rearm(ctx)
	case *reserved:
		p.onReserved(ctx, m)
		p.serve(ctx)
	case *limiterUsage:
		p.usage = m.usage
		if m.released {
			p.waitRelease = false
			p.serve(ctx)
		} else {
			p.publish()
		}
	case refreshUsage:
		p.refresh = p.deps.Timers.SendOnce(UsageRefresh, ctx.Self(), refreshUsage{})
		lim := p.limiter
		p.askLimiter(ctx, false, func(c context.Context) (ratelimit.Usage, error) { return lim.Usage(c) })
	case *actor.Stopping:
		p.wake.stop()
		if p.refresh != nil {
			p.refresh()
		}
		// Stopped for good after repeated crashes (at shutdown nobody waits): the acquisitions still
		// waiting are refused, so their askers go elsewhere instead of waiting for their deadlines.
		for _, a := range p.waiting {
			p.deny(ctx, a.a, PermitProviderStopped, 0)
		}
		p.waiting = nil
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
	PermitProviderStopped = "provider_stopped"
)

// checkAcquire checks an acquisition (see checkAcquire) and that the actor holds no lease of its job: a
// second grant of one job would replace the first one's lease and leak its tickets. A twin still
// waiting is found when its turn comes (serve), without a scan of the queue for every acquisition.
func (p *ProviderActor) checkAcquire(m *messages.Acquire) string {
	if why := checkAcquire(m, p.ref.Name, p.deps.catalog(), time.Now()); why != "" {
		return why
	}
	if _, held := p.leases[m.JobId]; held {
		return DropDuplicate
	}
	return ""
}

// checkOutcome checks an outcome (see checkOutcome) and, for a lease the actor holds, that it names the
// lease's model.
func (p *ProviderActor) checkOutcome(o *messages.Outcome) string {
	if why := checkOutcome(o); why != "" {
		return why
	}
	if l, held := p.leases[o.JobId]; held && o.Model != "" && o.Model != l.model {
		return DropWrongTarget
	}
	return ""
}

// askLimiter runs a limiter call that answers with usage off the actor, its answer coming back as a
// message; a limiter that never blocks is called in place.
func (p *ProviderActor) askLimiter(ctx actor.Context, released bool, call func(context.Context) (ratelimit.Usage, error)) {
	if p.immediate { // a refresh: releases of an immediate limiter are made in place (releaseSlot)
		p.usage, _ = call(context.Background())
		p.publish()
		return
	}
	self, root, log := ctx.Self(), ctx.ActorSystem().Root, p.log
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

// releaseSlot gives a call's reservation back to the limiter, with the tokens it used (-1: unknown),
// then tells it what the provider said of its limits (words).
func (p *ProviderActor) releaseSlot(ctx actor.Context, jobID string, tokens int, words ...ratelimit.Upstream) {
	if p.immediate {
		p.usage, _ = p.limiter.Release(context.Background(), jobID, tokens)
		for _, w := range words {
			p.usage, _ = p.limiter.Observe(context.Background(), w)
		}
		p.waitRelease = false
		return
	}
	lim := p.limiter
	p.askLimiter(ctx, true, func(c context.Context) (ratelimit.Usage, error) {
		u, err := lim.Release(c, jobID, tokens)
		for _, w := range words {
			u, err = lim.Observe(c, w)
		}
		return u, err
	})
}

// onReserved applies the limiter's answer to the reservation out.
func (p *ProviderActor) onReserved(ctx actor.Context, m *reserved) {
	r := p.reserving
	if r == nil || r.a.JobId != m.jobID {
		return
	}
	p.reserving = nil
	if r.withdrawn {
		p.usage = m.decision.Usage
		p.breaker.Release(r.ticket)
		p.model(r.a.Model).breaker.Release(r.modelTicket)
		if m.decision.Allowed && m.err == nil {
			p.releaseSlot(ctx, m.jobID, 0)
		}
		return
	}
	if !p.settleReservation(ctx, r, m.decision, m.err) {
		p.dropWaiting(r.a.JobId)
	}
}

// settleReservation applies the limiter's answer to a reservation: a grant leases the permit, a
// refusal gives the breaker tickets back. It reports whether the acquisition still waits.
func (p *ProviderActor) settleReservation(ctx actor.Context, r *reservation, d ratelimit.Decision, err error) bool {
	p.usage = d.Usage
	if !d.Allowed || err != nil {
		p.breaker.Release(r.ticket)
		p.model(r.a.Model).breaker.Release(r.modelTicket)
	}
	switch {
	case errors.Is(err, ratelimit.ErrTooLarge):
		p.deny(ctx, r.a, string(resilience.RequestTooLarge), 0)
		return false
	case err != nil:
		// The limiter failed (a fallback too): ask again shortly rather than admit unchecked.
		p.log.Warn("rate limiter unavailable", zap.String("event", "limiter_error"), zap.Error(err))
		p.limitedUntil = time.Now().Add(100 * time.Millisecond)
		return true
	case !d.Allowed:
		if d.RetryAfter > 0 {
			p.limitedUntil = time.Now().Add(d.RetryAfter)
		} else {
			p.waitRelease = true // a slot comes back when one of this provider's calls ends
		}
		p.log.Debug("rate limited", zap.String("event", "rate_limited"), zap.String("reason", d.Reason),
			zap.Duration("retry_after", d.RetryAfter), zap.Int("waiting", len(p.waiting)))
		return true
	}
	p.grant(ctx, r)
	return false
}

// grant leases a permit whose reservation the limiter took.
func (p *ProviderActor) grant(ctx actor.Context, r *reservation) {
	a := r.a
	var until time.Time
	if a.Deadline != nil {
		until = a.Deadline.AsTime()
	} else {
		until = time.Now().Add(time.Minute)
	}
	until = until.Add(p.deps.leaseGrace())
	probe := r.ticket.Probe() || r.modelTicket.Probe()
	l := lease{model: a.Model, until: until, ticket: r.ticket, modelTicket: r.modelTicket}
	if d := a.Dispatch; d != nil && a.DispatchTo != nil {
		// The asker hears of the grant from the worker: one message less per call.
		l.worker = a.DispatchTo
		if probe {
			d = &messages.Dispatch{Job: d.Job, ReplyTo: d.ReplyTo, Probe: true}
		}
		ctx.Send(a.DispatchTo, d)
	} else {
		ctx.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Granted: true, Probe: probe})
	}
	p.leases[a.JobId] = l
	p.wakeBy(ctx, until)
}

func (p *ProviderActor) dropWaiting(jobID string) {
	for i, w := range p.waiting {
		if w.a.JobId == jobID {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			return
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
		p.deps.Metrics.BreakerTransition(p.ref.Name, t.To.String())
		if t.To == resilience.Open && p.deps.BreakerOpened != nil {
			p.deps.BreakerOpened(p.ref.Name, t.At.Add(p.breaker.Settings().OpenFor))
		}
		p.log.Info("provider breaker transition", zap.String("event", "breaker_transition"),
			zap.String("kind", "provider"), zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	prev := p.ref.Snapshot()
	p.breaker = resilience.ResumeBreaker(settings, prev.Breaker)
	p.spread = resilience.NewSpread(p.breaker.Settings().Threshold)
	p.limiter = p.deps.limiter(p.ref.Name)
	p.immediate = ratelimit.Immediate(p.limiter)
	p.leases = map[string]lease{}
	p.models = map[string]*modelState{}
	for id, st := range prev.Models {
		m := p.model(id)
		switch st.Reason {
		case providerstate.ModelRemoved:
			m.removed = true
		case providerstate.ModelRateLimited:
			m.blockedUntil = st.Until
		case providerstate.ModelEjected:
			m.breaker = resilience.ResumeBreaker(m.breaker.Settings(), resilience.Snapshot{State: resilience.Open, OpenUntil: st.Until})
		}
	}
	p.modelsChanged = true
	p.publish()
}

// peerOpened opens the breaker because another controller's opened: that controller saw the provider
// fail, so this one stops calling it too, until the same time (at most its own open period, whatever
// the other's clock says), and then half-opens on its own. An open breaker keeps its own period.
func (p *ProviderActor) peerOpened(m *messages.PeerBreakerOpened) {
	now := p.deps.Clock.Now()
	s := p.breaker.Settings()
	until := m.GetOpenUntil().AsTime()
	if limit := now.Add(s.OpenFor); until.After(limit) {
		until = limit
	}
	if !until.After(now) || p.breaker.State() == resilience.Open {
		return
	}
	p.breaker = resilience.ResumeBreaker(s, resilience.Snapshot{State: resilience.Open, OpenUntil: until, Generation: p.breaker.Snapshot().Generation})
	p.deps.Metrics.BreakerTransition(p.ref.Name, resilience.Open.String())
	p.log.Warn("provider breaker opened by another controller", zap.String("event", "breaker_peer_open"), zap.String("node", m.Node),
		zap.Time("open_until", until))
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
// the model's reset when its queue bound allows, without holding up the others. The rest go to the
// limiter one at a time, in order; while it says no, they wait for the window's next free moment, each
// only while that comes by its queue bound: past it, or when the window frees later, it is refused at
// once with the wait (admission.Queue), so that overload is shed instead of held.
func (p *ProviderActor) serve(ctx actor.Context) {
	now := time.Now() // deadlines and leases are wall-clock; breakers, blocks and limits read the injected clock
	clk := p.deps.now()
	var next time.Time
	// Busy: the limiter is answering another acquisition, and the rest wait their turn (its answer
	// serves them again); Limited: the limiter or the provider said no, and they wait for the window,
	// each only within its queue bound.
	state := admission.Provider{Now: now, Clock: clk, Disabled: p.disabled != "", Busy: p.reserving != nil,
		Limited: p.waitRelease || now.Before(p.limitedUntil), WindowFree: p.windowFree(now), RoomIn: p.usage.RoomIn}
	// take applies an acquisition's turn: it is refused, or kept (with its wake-up), or it may try.
	take := func(w waiter, m *modelState) (try, keep bool) {
		t := admission.TakeTurn(state, admission.Model{Removed: m.removed, BlockedUntil: m.blockedUntil},
			admission.Acquisition{Deadline: timeOf(w.a.Deadline), Bound: w.bound})
		switch t.Verdict {
		case admission.Refuse:
			p.deny(ctx, w.a, t.Reason, t.RetryAfter)
			return false, false
		case admission.Hold:
			next = admission.Soonest(next, t.Until)
			return false, true
		}
		return true, false
	}
	kept := p.waiting[:0]
	for _, w := range p.waiting {
		a := w.a
		if p.reserving != nil && p.reserving.a == a {
			kept = append(kept, w)
			continue
		}
		if _, held := p.leases[a.JobId]; held {
			p.deps.Drop(KindProvider, DropDuplicate, a) // its twin was granted first
			continue
		}
		m := p.model(a.Model)
		if try, keep := take(w, m); !try {
			if keep {
				kept = append(kept, w)
			}
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
		r := &reservation{a: a, ticket: ticket, modelTicket: modelTicket}
		if p.immediate {
			d, err := p.limiter.Reserve(context.Background(), a.JobId, int(a.Tokens))
			if p.settleReservation(ctx, r, d, err) {
				// Refused by the limits: this one and the rest wait for the window, within their bounds.
				state.Limited, state.WindowFree = true, p.windowFree(now)
				if _, keep := take(w, m); keep {
					kept = append(kept, w)
				}
			}
			continue
		}
		p.reserve(ctx, r)
		state.Busy = true
		kept = append(kept, w)
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	if at := admission.WakeAt(next, len(kept), now, p.limitedUntil); !at.IsZero() {
		p.wakeBy(ctx, at)
	}
	p.publishAt(clk, now)
}

// windowFree is the rate window's next free moment as far as this actor knows it (wall clock), or
// zero when no time is known: a reservation is out, or a concurrency slot comes back when a call ends.
func (p *ProviderActor) windowFree(now time.Time) time.Time {
	if now.Before(p.limitedUntil) {
		return p.limitedUntil
	}
	return time.Time{}
}

// reserve asks a limiter that may block for an acquisition, off the actor.
func (p *ProviderActor) reserve(ctx actor.Context, r *reservation) {
	p.reserving = r
	self, root, limiter, id, tokens := ctx.Self(), ctx.ActorSystem().Root, p.limiter, r.a.JobId, int(r.a.Tokens)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), limiterTimeout)
		defer cancel()
		d, err := limiter.Reserve(c, id, tokens)
		root.Send(self, &reserved{jobID: id, decision: d, err: err})
	}()
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
	p.wake.by(p.deps.Timers, ctx.Self(), at, wakeUp{})
}

// rearm keeps a wake-up pending for the earliest lease.
func (p *ProviderActor) rearm(ctx actor.Context) {
	for _, l := range p.leases {
		p.wakeBy(ctx, l.until)
	}
}

// expireLeases gives back the permits whose outcome never came.
func (p *ProviderActor) expireLeases(ctx actor.Context) {
	now := time.Now()
	for id, l := range p.leases {
		if !now.Before(l.until) {
			delete(p.leases, id)
			p.releaseSlot(ctx, id, -1)
			p.breaker.Release(l.ticket)
			p.model(l.model).breaker.Release(l.modelTicket)
			p.log.Warn("permit expired without an outcome", zap.String("event", "permit_expired"), zap.String("job_id", id))
		}
	}
}

func (p *ProviderActor) deny(ctx actor.Context, a *messages.Acquire, reason string, retryAfter time.Duration) {
	ctx.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Reason: reason, RetryAfterSeconds: max(retryAfter, 0).Seconds()})
}

// outcome settles a job: an acquisition still waiting is withdrawn; a leased permit ends with the
// call's verdict on the provider's breaker and the model's, the model's or the provider's block on a
// 429, the model's removal on a 404, and the upstream's rate-limit headers.
func (p *ProviderActor) outcome(ctx actor.Context, o *messages.Outcome) {
	if r := p.reserving; r != nil && r.a.JobId == o.JobId {
		r.withdrawn = true // its reservation is given back when the limiter answers
	}
	for i, w := range p.waiting {
		if w.a.JobId == o.JobId {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			return
		}
	}
	l, held := p.leases[o.JobId]
	if !held {
		return // expired, or given back already
	}
	delete(p.leases, o.JobId)
	if o.Stop && l.worker != nil {
		// Its asker stopped waiting before hearing the job had started: after the dispatch, so the
		// worker gets the two in order.
		ctx.Send(l.worker, &messages.CancelJob{JobId: o.JobId})
	}
	tokens := -1
	if o.Tokens > 0 {
		tokens = int(o.Tokens)
	}
	var words []ratelimit.Upstream // what the provider said of its limits, observed after the release
	m := p.model(l.model)
	now := p.deps.now()
	if rl := o.RateLimit; rl != nil {
		if u := fleet.UpstreamOf(rl); !u.PerModel {
			words = append(words, u)
			p.holdFor(u)
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
		w := ratelimit.Upstream{RetryAfter: seconds(o.BlockProviderSeconds), RemainingRequests: -1, RemainingTokens: -1}
		words = append(words, w)
		p.holdFor(w)
	}
	if o.Fault != "" && (o.ProviderEffect == messages.Effect_EFFECT_FAILURE || o.ModelEffect == messages.Effect_EFFECT_FAILURE) {
		p.lastFault = validation.Clip(o.Fault, maxDisabledBecause)
	}
	if o.DisableProvider && p.disabled == "" {
		p.disabled = validation.Clip(o.DisabledBecause, maxDisabledBecause)
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
		p.count(now, o.ProviderEffect == messages.Effect_EFFECT_FAILURE || o.ModelEffect == messages.Effect_EFFECT_FAILURE)
	}
	p.releaseSlot(ctx, o.JobId, tokens, words...)
}

// maxDisabledBecause bounds the reason a disabled provider publishes and logs (the provider's own
// message, which may be long).
const maxDisabledBecause = 1024

// holdFor holds back this actor's acquisitions for the block the provider's word asks for, at once:
// the limiter hears of it after the call's release.
func (p *ProviderActor) holdFor(u ratelimit.Upstream) {
	if wait := u.Exhausted(); wait > 0 {
		p.limitedUntil = later(p.limitedUntil, time.Now().Add(wait))
	}
}

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

// timeOf is a message's time, zero when it has none.
func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (p *ProviderActor) count(now time.Time, fault bool) {
	hour := now.Unix() / 3600
	b := &p.hours[hour%24]
	if b.hour != hour {
		*b = hourBucket{hour: hour}
	}
	b.calls++
	if fault {
		b.faults++
	}
}

func (p *ProviderActor) publish() { p.publishAt(p.deps.now(), time.Now()) }

// publishAt publishes the snapshot at now on the injected clock, wall being the time on the real one.
func (p *ProviderActor) publishAt(now, wall time.Time) {
	hour := now.Unix() / 3600
	var calls, faults int64
	for _, b := range p.hours {
		if b.hour > hour-24 {
			calls += b.calls
			faults += b.faults
		}
	}
	u := p.usage
	snap := providerstate.Snapshot{
		Name:         p.ref.Name,
		Breaker:      p.breaker.Snapshot(),
		Limits:       p.deps.RateLimits[p.ref.Name],
		RateLimitUse: u.Use(),
		LimitUse:     providerstate.LimitUse{Requests: u.RequestsUse, Tokens: u.TokensUse, Concurrency: u.ConcurrencyUse},
		SharedLimits: u.Shared,
		Requests:     u.Requests,
		Tokens:       u.Tokens,
		InFlight:     u.InFlight,
		Waiting:      len(p.waiting),
		Reliability:  float64(calls-faults+1) / float64(calls+2),
		Calls24h:     calls,
		Faults24h:    faults,
		Disabled:     p.disabled,
		LastFault:    p.lastFault,
	}
	if snap.RateLimitUse >= 1 {
		if wait := max(u.RoomIn, u.Blocked); wait > 0 {
			snap.RoomAt = now.Add(wait)
		}
	}
	prev := p.ref.Snapshot()
	snap.Models = prev.Models // unchanged: share the published map, never mutate it
	if p.modelsChanged {
		snap.Models = p.outOfPool(now)
		p.modelsChanged = false
	} else if !decisionsDiffer(prev, &snap) && wall.Sub(p.publishedAt) < StatsEvery {
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

// outOfPool lists the models out of the pool at now, and why.
func (p *ProviderActor) outOfPool(now time.Time) map[string]providerstate.ModelState {
	out := map[string]providerstate.ModelState{}
	for id, m := range p.models {
		switch b := m.breaker.Snapshot(); {
		case m.removed:
			out[id] = providerstate.ModelState{Reason: providerstate.ModelRemoved}
		case b.State == resilience.Open:
			out[id] = providerstate.ModelState{Reason: providerstate.ModelEjected, Until: b.OpenUntil}
		case now.Before(m.blockedUntil):
			out[id] = providerstate.ModelState{Reason: providerstate.ModelRateLimited, Until: m.blockedUntil}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
