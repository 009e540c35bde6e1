package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/gate"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ProviderActor is the shell of one provider's admission, a gate (internal/gate): it makes the gate,
// remakes it after a crash from its published snapshot, refreshes its limiter's use and takes what
// other controllers and the key watcher say of the provider. Coordinators acquire and settle through
// the gate directly (ProviderRef.Acquire, ProviderRef.Settle); through the actor's mailbox only while
// no gate is up (at the start, during a restart). The machine's decisions for an asker go out as
// messages (providerShell).
type ProviderActor struct {
	deps    *Deps
	ref     *ProviderRef
	log     *zap.Logger
	self    *actor.PID
	root    *actor.RootContext
	front   *providerFront
	refresh func()
}

// DefaultLeaseGrace is how long after a permit's deadline its outcome may still arrive before the
// permit is presumed abandoned.
const DefaultLeaseGrace = admission.DefaultLeaseGrace

// refreshUsage asks the limiter for its use: other controllers spend a shared limit too.
type refreshUsage struct{}

// UsageRefresh is how often a provider actor reads its limiter's use.
const UsageRefresh = time.Second

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
		p.front.acquire(m)
	case *messages.Outcome:
		p.front.settle(m)
	case *messages.PeerBreakerOpened:
		if why := checkPeerOpened(m, p.ref.Name); why != "" {
			p.deps.Drop(KindProvider, why, m)
			return
		}
		p.peerOpened(m)
	case *messages.KeyChanged:
		if p.front.gate.Enable() {
			p.log.Warn("provider enabled: its key changed", zap.String("event", "provider_enabled"))
		}
	case crashed:
		panic(m.reason)
	case refreshUsage:
		p.refresh = p.deps.Timers.SendOnce(UsageRefresh, ctx.Self(), refreshUsage{})
		p.front.gate.RefreshUsage()
	case *actor.Restarting:
		// Its successor makes a gate of its own from the published snapshot.
		p.ref.live.Store(nil)
		p.stopTimers()
		p.front.gate.Close()
	case *actor.Stopping:
		p.ref.live.Store(nil)
		p.stopTimers()
		// Stopped for good after repeated crashes (at shutdown nobody waits): the acquisitions still
		// waiting are refused, so their askers go elsewhere instead of waiting for their deadlines.
		p.front.gate.Stop()
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

// stopTimers ends the usage refresh.
func (p *ProviderActor) stopTimers() {
	if p.refresh != nil {
		p.refresh()
	}
}

// start makes the gate, resuming from the last published snapshot after a restart.
func (p *ProviderActor) start(ctx actor.Context) {
	p.log = p.deps.Log.With(zap.String("provider", p.ref.Name))
	p.self, p.root = ctx.Self(), ctx.ActorSystem().Root
	settings, ok := p.deps.Breakers[p.ref.Name]
	if !ok {
		settings = resilience.ProviderBreakerSettings(p.ref.Name)
	}
	settings.Name = p.ref.Name
	settings.Clock = p.deps.Clock
	var g *gate.Gate
	settings.OnStateChange = func(t resilience.Transition) {
		p.deps.Metrics.BreakerTransition(p.ref.Name, t.To.String())
		if t.To == resilience.Open && p.deps.BreakerOpened != nil {
			p.deps.BreakerOpened(p.ref.Name, t.At.Add(g.OpenFor()))
		}
		p.log.Info("provider breaker transition", zap.String("event", "breaker_transition"),
			zap.String("kind", "provider"), zap.Stringer("from", t.From), zap.Stringer("to", t.To), zap.Uint64("generation", t.Generation))
	}
	front := &providerFront{name: p.ref.Name, deps: p.deps, shell: p.shell()}
	g = gate.New(gate.Config{Name: p.ref.Name, Limiter: p.deps.limiter(p.ref.Name), Limits: p.deps.RateLimits[p.ref.Name],
		Clock: p.deps.Clock, Log: p.log, Shell: front.shell, Published: &p.ref.snap,
		Machine: admission.Config{Breaker: settings, ModelBreaker: p.modelBreaker, MaxQueue: p.deps.maxQueue(), LeaseGrace: p.deps.leaseGrace()},
		OnPanic: func(reason any) { p.ref.crashed(front, reason) }})
	front.gate = g
	p.front = front
	p.refresh = p.deps.Timers.SendOnce(UsageRefresh, p.self, refreshUsage{})
	p.ref.live.Store(p.front)
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

// providerFront is what acquisitions and settlements go through while the provider's actor is up:
// the checks of a message, then its gate. It is fixed once made; the gate does its own locking.
type providerFront struct {
	name  string
	deps  *Deps
	gate  *gate.Gate
	shell providerShell
}

// acquire gives an acquisition to the gate. One for a model this provider does not serve (one
// discovery just took out of the catalog) is dropped and refused, rather than left waiting for its
// deadline: the gate keeps state only for the provider's own catalog models.
func (f *providerFront) acquire(a *messages.Acquire) {
	if a.GetReplyTo() == nil {
		f.deps.Drop(KindProvider, DropNoReplyTo, a) // a refusal would go to no address
		return
	}
	if why := checkModel(f.deps.catalog(), f.name, a.Model); why != "" {
		f.deps.Drop(KindProvider, why, a)
		f.shell.Deny(a, PermitModelUnknown, 0)
		return
	}
	f.gate.Acquire(admission.Request{ID: a.JobId, Model: a.Model, Tokens: int(a.Tokens),
		Deadline: timeOf(a.Deadline), QueueBy: timeOf(a.QueueBy), Ask: a})
}

// settle gives an outcome to the gate; one naming another model than its lease's is dropped.
func (f *providerFront) settle(o *messages.Outcome) {
	if !f.gate.Settle(o.Model, outcomeOf(o)) {
		f.deps.Drop(KindProvider, DropWrongTarget, o)
	}
}

// crashed carries a panic that happened outside the actor's mailbox, in its gate, to the actor: the
// actor crashes with it, so that its supervisor restarts it with a new gate from the published state.
type crashed struct{ reason any }

// shell is where the gate's decisions for askers go.
func (p *ProviderActor) shell() providerShell {
	return providerShell{deps: p.deps, root: p.root, self: p.self}
}

// providerShell sends the gate's decisions to askers and to the workers they dispatch to. It holds no
// state: the gate calls it under its own lock.
type providerShell struct {
	deps *Deps
	root *actor.RootContext
	self *actor.PID // the provider's actor
}

// Grant gives the dispatch an acquisition carries to its worker's slots (the asker hears of the grant
// from the worker: no message for the grant itself), or sends a permit to the asker.
func (s providerShell) Grant(ask any, probe bool) {
	a := ask.(*messages.Acquire)
	if d := a.Dispatch; d != nil && a.DispatchTo != nil {
		if probe {
			d = &messages.Dispatch{Job: d.Job, ReplyTo: d.ReplyTo, Probe: true}
		}
		if w := s.deps.Dir.workerAt[a.DispatchTo.Id]; w != nil {
			w.Dispatch(s.root, d)
		} else {
			s.root.Send(a.DispatchTo, d)
		}
		return
	}
	s.root.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Granted: true, Probe: probe})
}

// Deny refuses an acquisition.
func (s providerShell) Deny(ask any, reason string, retryAfter time.Duration) {
	a := ask.(*messages.Acquire)
	s.root.Send(a.ReplyTo, &messages.Permit{JobId: a.JobId, Reason: reason, RetryAfterSeconds: max(retryAfter, 0).Seconds()})
}

// Cancel tells a granted acquisition's worker that its asker stopped waiting before hearing the job
// had started: after the dispatch, under the gate's lock, so the worker gets the two in order.
func (s providerShell) Cancel(ask any) {
	a := ask.(*messages.Acquire)
	if a.DispatchTo == nil {
		return
	}
	if w := s.deps.Dir.workerAt[a.DispatchTo.Id]; w != nil {
		w.Cancel(s.root, a.JobId)
	} else {
		s.root.Send(a.DispatchTo, &messages.CancelJob{JobId: a.JobId})
	}
}

// Duplicate counts an acquisition of a job id already held.
func (s providerShell) Duplicate(ask any) {
	s.deps.Drop(KindProvider, DropDuplicate, ask.(*messages.Acquire))
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

// peerOpened opens the breaker because another controller's opened.
func (p *ProviderActor) peerOpened(m *messages.PeerBreakerOpened) {
	opened, until := p.front.gate.PeerOpened(m.GetOpenUntil().AsTime())
	if !opened {
		return
	}
	p.deps.Metrics.BreakerTransition(p.ref.Name, resilience.Open.String())
	p.log.Warn("provider breaker opened by another controller", zap.String("event", "breaker_peer_open"), zap.String("node", m.Node),
		zap.Time("open_until", until))
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
