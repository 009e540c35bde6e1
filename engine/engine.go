// Package engine assembles Conclave: it loads the blueprints, the catalog and the classifier, builds the
// actor tree over the configured fleet, providers and store, and offers the pipeline to its callers (the
// HTTP API, the evaluation command) as plain method calls.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/bandit"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/catalog"
	"github.com/conclave-ai/conclave/classify"
	"github.com/conclave-ai/conclave/clock"
	"github.com/conclave-ai/conclave/config"
	"github.com/conclave-ai/conclave/fleet"
	"github.com/conclave-ai/conclave/logging"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/resilience"
	"github.com/conclave-ai/conclave/store"
	"github.com/conclave-ai/conclave/supervisors"
	"go.uber.org/zap"
)

// ErrShuttingDown is returned for requests that arrive after shutdown began.
var ErrShuttingDown = errors.New("conclave is shutting down")

// Options are what the engine is built from. Only Config and Log are required; the rest default to the
// embedded default (real clock, the simulated provider over the catalog, the memory store).
type Options struct {
	Config  config.Config
	Log     *zap.Logger
	Clock   clock.Clock
	Catalog *catalog.Catalog
	Backend providers.Backend
	// Blueprints replaces the blueprints loaded from the configuration.
	Blueprints *blueprints.Set
	// Transport gives each worker its transport; nil runs every worker in process over Backend.
	Transport func(fleet.WorkerSpec) fleet.Transport
	Store     store.Store
}

// Engine is a running Conclave.
type Engine struct {
	cfg        config.Config
	log        *zap.Logger
	system     *actor.ActorSystem
	deps       *actors.Deps
	root       *actor.PID
	catalog    *catalog.Catalog
	blueprints *blueprints.Set
	store      store.Store
	// Sim is the simulated provider when the engine runs on it (nil otherwise); tests inject faults here.
	Sim *providers.Sim
	// longestTimeout is the longest blueprint deadline, in seconds.
	longestTimeout float64

	inflight  sync.WaitGroup
	closing   atomic.Bool
	closeOnce sync.Once
}

// New builds and starts an engine.
func New(opts Options) (*Engine, error) {
	cfg, log := opts.Config, opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	bps := opts.Blueprints
	if bps == nil {
		var err error
		if bps, err = blueprints.Load(cfg.BlueprintsDir, log); err != nil {
			return nil, fmt.Errorf("blueprints: %w", err)
		}
	}
	var err error
	cat := opts.Catalog
	if cat == nil {
		if cfg.CatalogPath != "" {
			cat, err = catalog.Load(cfg.CatalogPath)
		} else {
			cat, err = catalog.Embedded()
		}
		if err != nil {
			return nil, err
		}
	}
	classifier, err := classify.New(classify.Options{MinConfidence: cfg.MinConfidence})
	if err != nil {
		return nil, err
	}
	policy, err := bandit.ParsePolicy(cfg.Policy)
	if err != nil {
		return nil, err
	}
	reward, err := actors.ParseRewardMode(cfg.Reward)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, log: log, catalog: cat, blueprints: bps, store: opts.Store}
	for _, b := range bps.All() {
		e.longestTimeout = math.Max(e.longestTimeout, b.TimeoutSeconds)
	}
	backend := opts.Backend
	if backend == nil {
		e.Sim = providers.NewSim(cat.All(), cfg.Sim)
		backend = e.Sim
	}
	if e.store == nil {
		e.store = store.NewMemory(cfg.Records)
	}

	e.system = actor.NewActorSystem(logging.ActorLogger(log), actor.WithDeadLetterThrottleInterval(time.Second))
	categories := bps.Names()
	arms := actors.NewArmBoard(cat.All(), categories, bandit.DefaultPrior, cfg.Sharing)
	workers := fleet.DefaultWorkers(cfg.Workers, cfg.WorkerSlots)
	dir := actors.NewDirectory(e.system, workers, cat.ProviderNames(), arms, categories)
	e.deps = &actors.Deps{
		Log: log, Clock: clock.Or(opts.Clock), Catalog: cat, Classifier: classifier, Blueprints: bps, Dir: dir,
		Timers: scheduler.NewTimerScheduler(e.system.Root), Seed: cfg.Seed, Policy: policy,
		Learning: bandit.UpdateConfig{Discount: cfg.Discount}, Reward: reward,
		Retry:          actors.RetryConfig{Scale: cfg.Retry.Scale, Rounds: cfg.Retry.Rounds},
		ArbiterTimeout: cfg.ArbiterTimeout(), OutputReserve: 1024,
		Breakers: breakerSettings(cfg.Breakers), RateLimits: cfg.RateLimits,
		Dispatcher: actors.NewDispatcher(2*runtime.GOMAXPROCS(0), 300),
	}

	transport := opts.Transport
	if transport == nil {
		transport = func(fleet.WorkerSpec) fleet.Transport { return fleet.InProcess{Backend: backend} }
	}
	var fleetChildren, providerChildren []supervisors.Child
	for _, w := range dir.Workers {
		fleetChildren = append(fleetChildren, supervisors.Child{Name: w.Spec.Name, Props: e.deps.Props(actors.NewWorkerActor(e.deps, w, transport(w.Spec)))})
	}
	for _, p := range dir.Providers {
		providerChildren = append(providerChildren, supervisors.Child{Name: p.Name, Props: e.deps.Props(actors.NewProviderActor(e.deps, p))})
	}
	rootProps := supervisors.Static([]supervisors.Child{
		{Name: actors.FleetName, Props: supervisors.Static(fleetChildren, e.deps.PropsOptions()...)},
		{Name: actors.ProvidersName, Props: supervisors.Static(providerChildren, e.deps.PropsOptions()...)},
		{Name: actors.BanditName, Props: supervisors.Bandit(e.deps)},
		{Name: actors.RequestsName, Props: supervisors.Requests(e.deps)},
		{Name: actors.RecorderName, Props: e.deps.Props(actors.NewRecorderActor(e.deps, e.store))},
	}, e.deps.PropsOptions()...)
	if e.root, err = e.system.Root.SpawnNamed(rootProps, actors.RootName); err != nil {
		return nil, fmt.Errorf("start actor system: %w", err)
	}
	if err := e.waitReady(); err != nil {
		e.system.Shutdown()
		e.deps.Dispatcher.Close()
		return nil, err
	}
	log.Info("conclave engine started", zap.String("event", "engine_started"), zap.Int("models", cat.Len()),
		zap.Int("workers", len(workers)), zap.Strings("providers", cat.ProviderNames()), zap.Int("blueprints", len(categories)),
		zap.String("blueprint_source", bps.Source()), zap.Uint64("seed", cfg.Seed), zap.String("policy", policy.String()),
		zap.Float64("classifier_temperature", classifier.Temperature()))
	return e, nil
}

func breakerSettings(cfg map[string]config.Breaker) map[string]resilience.Settings {
	out := map[string]resilience.Settings{}
	for name, b := range cfg {
		s := resilience.ProviderBreakerSettings(name)
		if b.Threshold > 0 {
			s.Threshold = b.Threshold
		}
		if b.WindowSeconds > 0 {
			s.Window = time.Duration(b.WindowSeconds * float64(time.Second))
		}
		if b.OpenSeconds > 0 {
			s.OpenFor = time.Duration(b.OpenSeconds * float64(time.Second))
		}
		out[name] = s
	}
	return out
}

// waitReady returns once every supervisor has started its children: the root answers after spawning
// the supervisors, each supervisor after spawning its own children.
func (e *Engine) waitReady() error {
	ping := func(pid *actor.PID) error {
		_, err := e.system.Root.RequestFuture(pid, &supervisors.Ping{}, 10*time.Second).Result()
		return err
	}
	if err := ping(e.root); err != nil {
		return fmt.Errorf("actor tree did not start: %w", err)
	}
	for _, name := range []string{actors.FleetName, actors.ProvidersName, actors.BanditName, actors.RequestsName} {
		if err := ping(actor.NewPID(e.system.Address(), actors.RootName+"/"+name)); err != nil {
			return fmt.Errorf("supervisor %s did not start: %w", name, err)
		}
	}
	return nil
}

// Route runs one request through the pipeline and returns its execution record: the answer, or the
// failure with the HTTP status it maps to.
func (e *Engine) Route(ctx context.Context, req *messages.RouteRequest) (*messages.Execution, error) {
	e.inflight.Add(1)
	defer e.inflight.Done()
	if e.closing.Load() {
		return nil, ErrShuttingDown
	}
	res, err := e.system.Root.RequestFuture(e.deps.Dir.Requests, req, e.budget(req)).Result()
	if err != nil { // check the error first: a late reply can race the future's timeout
		return nil, fmt.Errorf("request %s: %w", req.RequestId, err)
	}
	exec, ok := res.(*messages.Execution)
	if !ok {
		return nil, fmt.Errorf("request %s: unexpected reply %T", req.RequestId, res)
	}
	return exec, nil
}

// budget bounds how long a caller waits for a coordinator, which always answers before: every
// collection round at the longest deadline, the largest backoffs, the arbiter, and a margin.
func (e *Engine) budget(req *messages.RouteRequest) time.Duration {
	longest := e.longestTimeout
	if req.TimeoutSeconds != nil {
		longest = *req.TimeoutSeconds
	}
	rounds := float64(e.cfg.Retry.Rounds + 1)
	backoff := 10 * e.cfg.Retry.Scale
	return time.Duration((longest*rounds+backoff)*float64(time.Second)) + e.cfg.ArbiterTimeout() + 30*time.Second
}

// Execution returns the record of a request.
func (e *Engine) Execution(ctx context.Context, id string) (*messages.Execution, bool, error) {
	res, err := e.system.Root.RequestFuture(e.deps.Dir.Recorder, &messages.GetExecution{RequestId: id}, 10*time.Second).Result()
	if err != nil {
		return nil, false, fmt.Errorf("execution %s: %w", id, err)
	}
	l, ok := res.(*messages.ExecutionLookup)
	if !ok {
		return nil, false, fmt.Errorf("execution %s: unexpected reply %T", id, res)
	}
	return l.Execution, l.Found, nil
}

// Feedback applies what a caller learned about an execution (the true answer, or scores per model) to
// the bandit, once. The result's status is 200, 400, 404 or 409.
func (e *Engine) Feedback(ctx context.Context, fb *messages.RecordFeedback) (*messages.FeedbackResult, error) {
	res, err := e.system.Root.RequestFuture(e.deps.Dir.Recorder, fb, 10*time.Second).Result()
	if err != nil {
		return nil, fmt.Errorf("feedback %s: %w", fb.RequestId, err)
	}
	r, ok := res.(*messages.FeedbackResult)
	if !ok {
		return nil, fmt.Errorf("feedback %s: unexpected reply %T", fb.RequestId, res)
	}
	return r, nil
}

// Settle waits until a category's arms have absorbed pulls rewards in all, so that the next selection
// sees them: rewards travel to the arm actors asynchronously, and a replayable run (an evaluation) must
// not race them.
func (e *Engine) Settle(ctx context.Context, category string, pulls int64) error {
	for e.deps.Dir.Arms.TotalPulls(category) < pulls {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for %d rewards in %s: %w", pulls, category, err)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// Catalog returns the model catalog.
func (e *Engine) Catalog() *catalog.Catalog { return e.catalog }

// Blueprints returns the blueprints in force.
func (e *Engine) Blueprints() *blueprints.Set { return e.blueprints }

// Arms returns the board of learned arms.
func (e *Engine) Arms() *actors.ArmBoard { return e.deps.Dir.Arms }

// Providers returns every provider's latest snapshot.
func (e *Engine) Providers() []*actors.ProviderSnapshot {
	out := make([]*actors.ProviderSnapshot, len(e.deps.Dir.Providers))
	for i, p := range e.deps.Dir.Providers {
		out[i] = p.Snapshot()
	}
	return out
}

// Workers returns every worker's latest snapshot.
func (e *Engine) Workers() []fleet.Snapshot { return e.deps.Dir.WorkerSnapshots() }

// Directory exposes the actor system's addresses, for tests that talk to actors directly.
func (e *Engine) Directory() *actors.Directory { return e.deps.Dir }

// System exposes the actor system, for tests that talk to actors directly.
func (e *Engine) System() *actor.ActorSystem { return e.system }

// Ready reports why the engine cannot serve, or nil: it needs a worker and a provider that take work.
func (e *Engine) Ready() error {
	if e.closing.Load() {
		return ErrShuttingDown
	}
	now := e.deps.Clock.Now()
	worker := false
	for _, w := range e.Workers() {
		worker = worker || w.Available(now)
	}
	if !worker {
		return errors.New("all workers offline")
	}
	for _, p := range e.Providers() {
		if !p.Status(now).BreakerOpen {
			return nil
		}
	}
	return errors.New("all providers down")
}

// Shutdown stops taking requests, waits for those in flight, writes every record and stops the actors.
func (e *Engine) Shutdown(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		done := make(chan struct{})
		go func() { e.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("in-flight requests did not finish: %w", ctx.Err())
		}
		wait := 10 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = max(time.Until(d), time.Second)
		}
		res, ferr := e.system.Root.RequestFuture(e.deps.Dir.Recorder, &messages.Flush{}, wait).Result()
		if ferr != nil {
			err = errors.Join(err, fmt.Errorf("flush records: %w", ferr))
		} else if f, ok := res.(*messages.Flushed); ok && f.Error != "" {
			err = errors.Join(err, fmt.Errorf("flush records: %s", f.Error))
		}
		if perr := e.system.Root.PoisonFuture(e.root).Wait(); perr != nil {
			err = errors.Join(err, fmt.Errorf("stop actors: %w", perr))
		}
		e.system.Shutdown()
		e.deps.Dispatcher.Close()
		err = errors.Join(err, e.store.Close())
		e.log.Info("conclave engine stopped", zap.String("event", "engine_stopped"), zap.Error(err))
	})
	return err
}
