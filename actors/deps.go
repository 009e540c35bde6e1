package actors

import (
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/accuracy"
	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/inflight"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/mailboxes"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Deps are what the actors share, by role. They are read-only once the system starts.
type Deps struct {
	Log *zap.Logger
	// Metrics take the records and breaker transitions; nil records nothing.
	Metrics *metrics.Metrics
	// Clock is the time that breakers, rate limits and reliability read, so their behaviour can be
	// tested exactly. Deadlines are wall-clock, because the timers that enforce them are.
	Clock   clock.Clock
	Catalog *catalog.Live
	Dir     *Directory
	Timers  *scheduler.TimerScheduler
	Planning
	Admission
	Hosts
	Teaching
	Runtime

	shedOnce sync.Once
	shed     *logging.Tally
}

// Planning is what a request's coordinator plans, retries and answers with.
type Planning struct {
	// Plan is what planning decides with (classifier, blueprints, policy, rounds, timeout floors).
	Plan *plan.Settings
	// Seed and NodeID derive each request's random source together with its sequence number, so two
	// controllers started with one seed do not pick alike.
	Seed   uint64
	NodeID string
	// RetryScale multiplies every backoff of the retry table; 1 is the table itself.
	RetryScale float64
	// AnswersWaitForRecords makes a coordinator hand its answer to the recorder, which gives it to the
	// caller once the record is durable (set with a spool: an answer given is never an answer lost).
	AnswersWaitForRecords bool
}

// Admission configures the providers' gates.
type Admission struct {
	// Breakers and ModelBreakers configure each provider's breaker and its models' breakers,
	// RateLimits its limits (missing providers get the defaults).
	Breakers      map[string]resilience.Settings
	ModelBreakers map[string]resilience.Settings
	RateLimits    map[string]ratelimit.Limits
	// Limiters makes each provider's limiter (Redis shared, with a local fallback); nil means local
	// limiters.
	Limiters ratelimit.Factory
	// MaxQueue bounds how long an acquisition without a bound of its own (queue_by) waits for its
	// provider's rate limits (rate_limits.max_queue_seconds); zero means admission.DefaultMaxQueue.
	MaxQueue time.Duration
	// LeaseGrace overrides DefaultLeaseGrace.
	LeaseGrace time.Duration
	// BreakerOpened, when set, tells the other controllers that a provider breaker opened here, until
	// then; it must not block.
	BreakerOpened func(provider string, until time.Time)
}

// Hosts configures the workers' slots and the bound on the answers they hold.
type Hosts struct {
	// HostGrace is how long after a call's budget its worker host may still return it before the host
	// counts as timed out; zero means DefaultHostGrace.
	HostGrace time.Duration
	// Inflight counts the bytes of the requests in flight, their answers included
	// (max_inflight_bytes); nil counts nothing.
	Inflight *inflight.Inflight
}

// Teaching is how the arms and the reliability estimator learn.
type Teaching struct {
	Learning bandit.UpdateConfig
	// Reliability tunes the reliability estimator (reward mode reliability).
	Reliability accuracy.Config
	// Reward says how answers are rewarded (faults of the model always earn beta + 1).
	Reward feedback.Mode
}

// Runtime is how the actors run: the goroutines of their mailboxes, and what tests hook in.
type Runtime struct {
	// Dispatcher runs the actors' mailboxes; nil is protoactor's default.
	Dispatcher *mailboxes.Pool
	// Middleware wraps the receive of every actor made by Props; tests make an actor crash with it.
	// Production sets none.
	Middleware []actor.ReceiverMiddleware
	// Observe, when set, hears of every message an actor of the tree takes (each actor made by Props,
	// and the supervisors), with the actor's PID, before the actor reads it: tests map the protocol
	// with it. It runs on the actor's goroutine and must not block. Production sets none, and then no
	// actor pays for it.
	Observe func(self *actor.PID, msg any)
}

// ShedLogEvery is how often at most the requests refused for load are logged, as one line.
const ShedLogEvery = 10 * time.Second

// Shed is the tally of the requests refused for load (see Shedding): under overload they are nearly
// every request, and a line each filled the log with one refusal said over and over.
func (d *Deps) Shed() *logging.Tally {
	d.shedOnce.Do(func() {
		d.shed = logging.NewTally(d.Log.With(zap.String("event", "requests_shed")), "requests refused for load", ShedLogEvery, d.now)
	})
	return d.shed
}

// Shedding reports whether a request failing with kind was refused for load: the providers' limits
// had no room before its queue bound, or the requests in flight were too many.
func Shedding(kind resilience.Kind) bool {
	return kind == resilience.RateLimited || kind == resilience.Overloaded
}

// catalog is the live catalog, or nil when there is none (then every model is unknown).
func (d *Deps) catalog() *catalog.Catalog {
	if d.Catalog == nil {
		return nil
	}
	return d.Catalog.Load()
}

// limiter returns a provider's limiter.
func (d *Deps) limiter(provider string) ratelimit.Limiter {
	l := d.RateLimits[provider]
	if d.Limiters != nil {
		return d.Limiters(provider, l)
	}
	return ratelimit.NewLocal(l, d.Clock, 0)
}

// DefaultHostGrace bounds the time a worker host may take beyond a call's budget to return it; a call
// with a short budget gets a quarter of it, but never less than MinHostGrace, which a busy machine's
// scheduling alone can take.
const (
	DefaultHostGrace = time.Second
	MinHostGrace     = 100 * time.Millisecond
)

func (d *Deps) now() time.Time { return d.Clock.Now() }

// callLimit is the output limit of a model's call for a caller, and the id its provider knows the
// model by: the caller's limit when it gave one; else none, so that the provider's own default holds,
// except where the provider's wire format requires one (Anthropic's): the model's max_output from the
// catalog (0 when the catalog has none, and the adapter's DefaultMaxTokens goes).
func (d *Deps) callLimit(model, provider string, caller *int32) (maxTokens int, upstream string) {
	m, _ := d.Catalog.Load().Get(model)
	switch {
	case caller != nil:
		maxTokens = int(*caller)
	case d.Plan.NeedsOutputLimit != nil && d.Plan.NeedsOutputLimit(provider):
		maxTokens = m.MaxOutputTokens
	}
	return maxTokens, m.UpstreamID
}

// modelLimits returns the output tokens to allow a model of Conclave's own calls (the arbiter's): the
// reserve, or less when the model has less, and the id its provider knows it by.
func (d *Deps) modelLimits(model string) (maxTokens int, upstream string) {
	maxTokens = d.Plan.OutputReserve
	if m, ok := d.Catalog.Load().Get(model); ok {
		if m.MaxOutputTokens > 0 {
			maxTokens = min(maxTokens, m.MaxOutputTokens)
		}
		upstream = m.UpstreamID
	}
	return maxTokens, upstream
}

func (d *Deps) leaseGrace() time.Duration {
	if d.LeaseGrace > 0 {
		return d.LeaseGrace
	}
	return DefaultLeaseGrace
}

func (d *Deps) maxQueue() time.Duration {
	if d.MaxQueue > 0 {
		return d.MaxQueue
	}
	return admission.DefaultMaxQueue
}

func (d *Deps) hostGrace(budget time.Duration) time.Duration {
	g := d.HostGrace
	if g <= 0 {
		g = DefaultHostGrace
	}
	return max(min(g, budget/4), MinHostGrace)
}

// Random returns the random source of request number seq: the seed mixed with the node id, so a
// selection is replayed from the seed, the node and the request's sequence number.
func (d *Deps) Random(seq uint64) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(d.NodeID))
	return rand.New(rand.NewPCG(d.Seed^h.Sum64(), seq))
}

// Props makes the props of every Conclave actor: on the Dispatcher when there is one, else on
// protoactor's default (a goroutine per busy mailbox, as the pool but without keeping them). A fixed
// pool under mailboxes would let a few busy ones starve the rest: a mailbox keeps its goroutine for a
// whole batch of messages.
func (d *Deps) Props(producer actor.Producer) *actor.Props {
	opts := d.Observed()
	if len(d.Middleware) > 0 {
		opts = append(opts, actor.WithReceiverMiddleware(d.Middleware...))
	}
	if d.Dispatcher != nil {
		opts = append(opts, actor.WithDispatcher(d.Dispatcher))
	}
	return actor.PropsFromProducer(producer, opts...)
}

// Observed is the props option that hands Observe what an actor takes, first of any middleware, or
// nothing when Observe is not set. Props adds it; the supervisors, whose props are their own, take it
// from here.
func (d *Deps) Observed() []actor.PropsOption {
	if d.Observe == nil {
		return nil
	}
	return []actor.PropsOption{actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
			d.Observe(ctx.Self(), env.Message)
			next(ctx, env)
		}
	})}
}

// run runs fn on a goroutine of the Dispatcher when there is one (a job's call reuses a goroutine whose
// stack has grown), else on a goroutine of its own.
func (d *Deps) run(fn func()) {
	if d.Dispatcher != nil {
		d.Dispatcher.Schedule(fn)
		return
	}
	go fn()
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
