package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
	"go.uber.org/zap"
)

// ProviderActor owns one provider's circuit breaker, its rate-limit view and its 24-hour reliability.
// Coordinators ask it for a permit before every call (Acquire) and report every permitted call's result
// (Outcome). A permit is a lease: if its outcome never comes (the asker stopped first), it is given back
// when its deadline has passed, so no capacity leaks. It publishes a snapshot after each change for model
// selection to read.
type ProviderActor struct {
	deps    *Deps
	ref     *ProviderRef
	log     *zap.Logger
	breaker *resilience.Breaker
	limiter ratelimit.Limiter
	waiting []*messages.Acquire
	leases  map[string]lease
	wake    func()
	wakeAt  time.Time
	hours   [24]hourBucket
	removed map[string]bool
}

type lease struct {
	until  time.Time
	ticket resilience.Ticket
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
		p.waiting = append(p.waiting, m)
		p.serve(ctx)
	case *messages.Outcome:
		p.outcome(m)
		p.serve(ctx)
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
	p.breaker = resilience.NewBreaker(settings)
	p.limiter = ratelimit.NewWindow(p.deps.RateLimits[p.ref.Name], p.deps.Clock)
	p.leases = map[string]lease{}
	p.removed = map[string]bool{}
	if prev := p.ref.Snapshot(); prev != nil && len(prev.Removed) > 0 {
		for m := range prev.Removed { // a restart keeps what the provider told us
			p.removed[m] = true
		}
	}
	p.publish()
}

// serve answers waiting acquisitions in arrival order while the breaker and the limits allow.
func (p *ProviderActor) serve(ctx actor.Context) {
	now := time.Now() // deadlines and leases are wall-clock; the breaker and the limiter read the injected clock
	var next time.Time
	kept := p.waiting[:0]
	for i, a := range p.waiting {
		if a.Deadline != nil && !now.Before(a.Deadline.AsTime()) {
			p.deny(ctx, a, "rate_limited")
			continue
		}
		ticket, err := p.breaker.Allow()
		if err != nil {
			reason := "breaker_open"
			if err == resilience.ErrProbeInFlight {
				reason = "probe_in_flight"
			}
			p.deny(ctx, a, reason)
			continue
		}
		d := p.limiter.Reserve(int(a.Tokens))
		if !d.Allowed {
			p.breaker.Release(ticket)
			// Keep order: this and every later acquisition wait for the window.
			kept = append(kept, p.waiting[i:]...)
			if d.RetryAfter > 0 {
				next = now.Add(d.RetryAfter)
			}
			if a.Deadline != nil && (next.IsZero() || a.Deadline.AsTime().Before(next)) {
				next = a.Deadline.AsTime()
			}
			p.log.Debug("rate limited", zap.String("event", "rate_limited"), zap.String("reason", d.Reason),
				zap.Duration("retry_after", d.RetryAfter), zap.Int("waiting", len(p.waiting)-i))
			break
		}
		until := now.Add(time.Minute)
		if a.Deadline != nil {
			until = a.Deadline.AsTime()
		}
		until = until.Add(p.deps.leaseGrace())
		p.leases[a.JobId] = lease{until: until, ticket: ticket}
		p.wakeBy(ctx, until)
		ctx.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Granted: true, Generation: ticket.Generation(), Probe: ticket.Probe()})
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	if !next.IsZero() {
		p.wakeBy(ctx, next)
	}
	p.publish()
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

// expireLeases gives back the permits whose outcome never came, and re-arms the wake-up for the rest.
func (p *ProviderActor) expireLeases() {
	now := time.Now()
	for id, l := range p.leases {
		if !now.Before(l.until) {
			delete(p.leases, id)
			p.limiter.Release()
			p.breaker.Release(l.ticket)
			p.log.Warn("permit expired without an outcome", zap.String("event", "permit_expired"), zap.String("job_id", id))
		}
	}
}

func (p *ProviderActor) deny(ctx actor.Context, a *messages.Acquire, reason string) {
	ctx.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Reason: reason})
}

func (p *ProviderActor) outcome(o *messages.Outcome) {
	ticket := resilience.TicketFrom(o.Generation, o.Probe)
	if _, held := p.leases[o.JobId]; held {
		delete(p.leases, o.JobId)
		p.limiter.Release()
	}
	kind := resilience.Kind(o.ErrorKind)
	if rl := o.RateLimit; rl != nil {
		p.limiter.Observe(upstream(rl))
	}
	if kind == resilience.Cancelled {
		p.breaker.Release(ticket)
		return
	}
	fault := !o.Success && resilience.CountsAgainstProvider(kind)
	p.breaker.Record(ticket, !fault)
	p.count(fault)
	if kind == resilience.ModelNotFound && !p.removed[o.Model] {
		p.removed[o.Model] = true
		p.log.Warn("model removed from the pool", zap.String("event", "model_removed"), zap.String("model", o.Model))
	}
}

func upstream(rl *messages.RateLimitInfo) ratelimit.Upstream {
	return ratelimit.Upstream{
		RemainingRequests: rl.RemainingRequests, RemainingTokens: rl.RemainingTokens,
		LimitRequests: rl.LimitRequests, LimitTokens: rl.LimitTokens,
		ResetRequests: seconds(rl.ResetRequestsSeconds), ResetTokens: seconds(rl.ResetTokensSeconds),
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

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
	hour := p.deps.now().Unix() / 3600
	var calls, faults int64
	for _, b := range p.hours {
		if b.hour > hour-24 {
			calls += b.calls
			faults += b.faults
		}
	}
	requests, tokens, inFlight := 0, 0, 0
	if w, ok := p.limiter.(*ratelimit.Window); ok {
		requests, tokens, inFlight = w.Counts()
	}
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
	}
	if prev := p.ref.Snapshot(); prev != nil && len(prev.Removed) == len(p.removed) {
		snap.Removed = prev.Removed // unchanged: share the published map, never mutate it
	} else if len(p.removed) > 0 {
		snap.Removed = make(map[string]bool, len(p.removed))
		for m := range p.removed {
			snap.Removed[m] = true
		}
	}
	p.ref.snap.Store(snap)
}
