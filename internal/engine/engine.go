// Package engine assembles Conclave: it loads the blueprints, the catalog and the classifier, builds the
// actor tree over the configured fleet, providers and store, and offers the pipeline to its callers (the
// HTTP API, the evaluation command) as plain method calls.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/conclave-ai/conclave/internal/arms"
	"github.com/conclave-ai/conclave/internal/inflight"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/books"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/keystore"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit/redislimit"
	"github.com/conclave-ai/conclave/internal/adapters/redisbus"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/adapters/store/spool"
	"github.com/conclave-ai/conclave/internal/core/accuracy"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/mailboxes"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"github.com/conclave-ai/conclave/internal/platform/tokens"
	"github.com/conclave-ai/conclave/internal/platform/tracing"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/supervisors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ErrShuttingDown is why the engine is not ready once its shutdown began.
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
	// Store replaces the store the configuration names (DATABASE_URL, or the memory store).
	Store store.Store
	// KeyPoll is how often the secrets file is read again for changed keys; zero means KeyPollInterval.
	KeyPoll time.Duration
	// BudgetCheck is how often the keys' spend is held to their budget alerts; zero means
	// BudgetCheckEvery (tests make it short).
	BudgetCheck time.Duration
	// KeyRefresh is how often the API keys seen are read again from the store; zero means
	// keystore.RefreshEvery (tests make it short).
	KeyRefresh time.Duration
	// DiscoveryRetry is the first wait after a provider's model list could not be read; zero means
	// DiscoveryRetry (tests make it short).
	DiscoveryRetry time.Duration
	// Middleware wraps the receive of every actor below the supervisors (tests make one crash with it).
	Middleware []actor.ReceiverMiddleware
	// Observe hears of every message an actor of the tree takes, supervisors included
	// (actors.Deps.Observe); tests map the protocol with it.
	Observe func(self *actor.PID, msg any)
	// Tracing exports the requests' traces; nil (traces off) makes none.
	Tracing *tracing.Tracing
}

// Engine is a running Conclave.
type Engine struct {
	cfg     config.Config
	log     *zap.Logger
	system  *actor.ActorSystem
	deps    *actors.Deps
	root    *actor.PID
	catalog *catalog.Live
	// known is the catalog before configuration: discovered models take its prices.
	known      *catalog.Catalog
	blueprints *blueprints.Set
	store      store.Store
	spool      *spool.Spool
	keys       *Keys
	// budgets hold keys' budget accounts; runID names this run of the controller in the journal.
	budgets books.Budgets
	books   *books.Meter // the engine's own calls' (embeddings)
	runID   string
	redis   *redis.Client // REDIS_URL's, when set
	// slots are the Redis limiters whose concurrency slots this controller renews.
	slotsMu sync.Mutex
	slots   []*redislimit.Limiter
	bus     *redisbus.Bus // what controllers tell each other through that Redis
	// peers is where the reading of other controllers' rewards stands; only the loop folding them
	// moves it after the start.
	peers *peerCursor
	// rotationLocal is true while the shared rotation cannot be reached.
	rotationLocal atomic.Bool
	transports    []fleet.Transport // the fleet's, closed at shutdown
	// Sim is the simulated provider when the engine runs on it (nil otherwise); tests inject faults here.
	Sim *providers.Sim
	// longestBound is the longest wait a blueprint gives a request without a caller's timeout.
	longestBound time.Duration
	upstreams    []upstream
	registry     *providers.Registry
	// background runs the key watcher and the discovery loops until stopBackground.
	background     sync.WaitGroup
	stopBackground context.CancelFunc
	discoverMu     sync.Mutex
	// discoveryRetry is the first wait after a failed reading of a model list (Options.DiscoveryRetry).
	discoveryRetry time.Duration
	// tracing is nil when traces are off.
	tracing *tracing.Tracing
	// classifying asks config classify.model about unsure classifications; nil without one.
	classifying *modelClassifier
	// answers is the exact answer cache (answers.go).
	answers answers

	inflight  sync.WaitGroup
	closing   atomic.Bool
	stopping  chan struct{} // closed when the requests still running are stopped (the shutdown's timeout)
	closeOnce sync.Once
}

// New builds and starts an engine in the steps below, which follow it in the order they run. When a
// step that builds on the open store fails, the store is closed again; when the actor tree does not
// start, its actor system is stopped.
func New(opts Options) (*Engine, error) {
	a := &assembly{opts: opts, cfg: opts.Config, log: opts.Log}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	if err := a.loadDefinitions(); err != nil {
		return nil, err
	}
	if err := a.chooseDecisions(); err != nil {
		return nil, err
	}
	e, err := a.newEngine()
	if err != nil {
		return nil, err
	}
	if err := e.openStore(); err != nil {
		return nil, err
	}
	if err := e.buildOverStore(a); err != nil {
		e.closeStore()
		return nil, err
	}
	if err := e.startActors(a.transport); err != nil {
		return nil, err
	}
	e.startBackground(a.opts)
	e.logStarted(a)
	return e, nil
}

// assembly holds what New has built so far and the later steps need: the definitions, the decisions
// the configuration chose, and the parts of the fleet.
type assembly struct {
	opts Options
	cfg  config.Config
	log  *zap.Logger

	bps        *blueprints.Set
	categories []string
	// cat is the catalog the engine starts with: the configuration's providers' share of it once
	// newEngine has run.
	cat        *catalog.Catalog
	classifier *classify.Classifier
	policy     bandit.Policy
	reward     feedback.Mode
	// backend serves the providers without an upstream of their own.
	backend providers.Backend
	arms    *arms.Board
	workers []fleet.WorkerSpec
	// hosts is the fleet file, when the configuration names one.
	hosts *fleet.File
	// transport gives each worker its transport, on the books.
	transport func(fleet.WorkerSpec) fleet.Transport
}

// loadDefinitions loads the blueprints and the catalog, unless Options gave them.
func (a *assembly) loadDefinitions() error {
	a.bps = a.opts.Blueprints
	if a.bps == nil {
		bps, err := blueprints.Load(a.cfg.BlueprintsDir, a.log)
		if err != nil {
			return fmt.Errorf("blueprints: %w", err)
		}
		a.bps = bps
	}
	a.categories = a.bps.Names()
	a.cat = a.opts.Catalog
	if a.cat != nil {
		return nil
	}
	var err error
	if a.cfg.CatalogPath != "" {
		a.cat, err = loadCatalog(a.cfg.CatalogPath)
	} else {
		a.cat, err = catalog.Embedded()
	}
	return err
}

// chooseDecisions makes the classifier and reads the selection policy and the reward mode the
// configuration names.
func (a *assembly) chooseDecisions() error {
	var err error
	if a.classifier, err = classify.New(classify.Options{MinConfidence: a.cfg.MinConfidence}); err != nil {
		return err
	}
	if a.policy, err = bandit.ParsePolicy(a.cfg.Policy); err != nil {
		return err
	}
	a.reward, err = feedback.ParseMode(a.cfg.Reward)
	return err
}

// newEngine makes the engine over the configured providers and the catalog they serve, with the
// longest bound a blueprint gives, the classifying model, and the simulated provider when it serves.
func (a *assembly) newEngine() (*Engine, error) {
	if a.cfg.NodeID == "" {
		a.cfg.NodeID, _ = os.Hostname()
	}
	cfg := a.cfg
	known := a.cat // the whole catalog, whose prices discovered models take
	ups, cat, err := setupProviders(cfg, a.cat)
	if err != nil {
		return nil, err
	}
	a.cat = cat
	e := &Engine{cfg: cfg, log: a.log, catalog: catalog.NewLive(cat), known: known, blueprints: a.bps, store: a.opts.Store, upstreams: ups,
		discoveryRetry: cmp.Or(a.opts.DiscoveryRetry, DiscoveryRetry), tracing: a.opts.Tracing, stopping: make(chan struct{})}
	for _, b := range a.bps.All() {
		e.longestBound = max(e.longestBound, plan.Bound(b, cfg.Retry.Rounds, cfg.ArbiterTimeout()))
	}
	budget := time.Duration(cfg.Classify.BudgetSeconds * float64(time.Second))
	if e.classifying, err = newModelClassifier(cfg.Classify.Model, budget, cfg.Classify.CacheSize, a.classifier, a.log); err != nil {
		return nil, fmt.Errorf("classify: %w", err)
	}
	a.backend = a.opts.Backend
	if a.backend == nil && (len(ups) == 0 || cfg.Sim.Enabled) {
		e.Sim = providers.NewSim(cat.All(), cfg.Sim)
		a.backend = e.Sim
	}
	return e, nil
}

// buildOverStore builds what stands on the open store, in order: the actor system with the arms
// learned before this start, the fleet, the actors' dependencies, what is shared through Redis, the
// keys and the books, then the workers' transports. New closes the store when it fails.
func (e *Engine) buildOverStore(a *assembly) error {
	e.system = actor.NewActorSystem(logging.ActorLogger(e.log), actor.WithDeadLetterThrottleInterval(time.Second))
	a.arms = arms.NewBoard(a.cat.All(), a.categories, bandit.DefaultPrior, e.cfg.Sharing)
	if err := e.loadArms(a.arms); err != nil {
		return err
	}
	if err := a.loadFleet(); err != nil {
		return err
	}
	e.buildDeps(a)
	if e.cfg.RedisURL.Set() {
		if err := e.shareThroughRedis(); err != nil {
			return err
		}
	}
	e.openKeys()
	e.openBooks()
	e.shareKeyChanges()
	e.openAnswers()
	return e.buildTransports(a)
}

// loadFleet reads the workers: the fleet file's hosts when the configuration names one, else the
// in-process workers.
func (a *assembly) loadFleet() error {
	a.workers = fleet.DefaultWorkers(a.cfg.Workers, a.cfg.WorkerSlots)
	if a.cfg.Fleet == "" {
		return nil
	}
	f, err := fleet.LoadFile(a.cfg.Fleet)
	if err != nil {
		return err
	}
	a.hosts, a.workers = &f, f.Specs()
	return nil
}

// buildDeps makes the actors' directory and what every actor of the tree is built with: the plan's
// settings, the breakers and rate limits, the clock, the dispatcher and the metrics.
func (e *Engine) buildDeps(a *assembly) {
	cfg := e.cfg
	dir := actors.NewDirectory(e.system, a.workers, actorProviders(a.cat, e.upstreams), a.arms, a.categories)
	breakers, modelBreakers, floors := breakerSettings(providerBreakers(cfg))
	e.deps = &actors.Deps{
		Log: e.log, Clock: clock.Or(a.opts.Clock), Catalog: e.catalog, Dir: dir, Timers: scheduler.NewTimerScheduler(e.system.Root),
		Planning: actors.Planning{
			Plan: &plan.Settings{Classifier: a.classifier, Blueprints: a.bps, Catalog: e.catalog, Policy: a.policy, OutputReserve: 1024,
				Rounds: cfg.Retry.Rounds, ArbiterTimeout: cfg.ArbiterTimeout(), TimeoutFloors: floors, MaxQueue: cfg.MaxQueue(),
				Carries: carries(e.upstreams), NeedsOutputLimit: needsOutputLimit(e.upstreams)},
			Seed: cfg.Seed, NodeID: cfg.NodeID, RetryScale: cfg.Retry.Scale,
			// A store that outlives the process: an answer goes out once its record is durable.
			AnswersWaitForRecords: e.spool != nil,
		},
		Admission: actors.Admission{Breakers: breakers, ModelBreakers: modelBreakers, RateLimits: providerLimits(cfg), MaxQueue: cfg.MaxQueue()},
		Hosts:     actors.Hosts{Inflight: inflight.New(cfg.MaxInflightBytes)},
		Teaching: actors.Teaching{Learning: bandit.UpdateConfig{Discount: cfg.Discount}, Reward: a.reward,
			Reliability: accuracy.Config{Dependence: cfg.Dependence}},
		Runtime: actors.Runtime{Dispatcher: mailboxes.NewPool(mailboxThroughput, 10*time.Second), Middleware: a.opts.Middleware,
			Observe: a.opts.Observe},
	}
	e.deps.Metrics = metrics.New(e.metricsSource())
}

// actorProviders names the providers that get an actor: the catalog's, and each configured upstream,
// whose models discovery may list later.
func actorProviders(cat *catalog.Catalog, ups []upstream) []string {
	names := append([]string(nil), cat.ProviderNames()...)
	for _, u := range ups {
		if !slices.Contains(names, u.Name) {
			names = append(names, u.Name)
		}
	}
	return names
}

// shareThroughRedis counts the rate limits in the Redis of REDIS_URL and joins the bus of the
// controllers sharing it: breaker openings go out on it, and the rotating arbiter's turns are counted
// there.
func (e *Engine) shareThroughRedis() error {
	limiters, err := e.sharedLimits(e.deps.Clock)
	if err != nil {
		return err
	}
	e.deps.Limiters = limiters
	e.bus = redisbus.New(e.redis, e.cfg.RedisPrefix, e.cfg.NodeID, e.log)
	e.deps.BreakerOpened = e.publishOpened
	e.deps.Dir.SharedRound = e.sharedRound
	return nil
}

// shareKeyChanges tells the other controllers on the bus of every key changed here, so that they read
// it again.
func (e *Engine) shareKeyChanges() {
	if e.bus == nil {
		return
	}
	e.keys.changed = func(id string) {
		go func() {
			if err := e.bus.PublishKeyChanged(id); err != nil {
				e.log.Warn("a key's change was not shared", zap.String("event", "key_share_failed"), zap.String("key_id", id), zap.Error(err))
			}
		}()
	}
}

// buildTransports makes the registry, which routes every call to its provider (the workers' calls, and
// the embeddings calls the controller makes itself), and each worker's transport to it, on the books:
// Options' transport, SSH to the fleet file's hosts, or in process.
func (e *Engine) buildTransports(a *assembly) error {
	e.registry = providers.NewRegistry(catalogPrices(e.catalog), a.backend, e.upstreamsOnly()...)
	transport := a.opts.Transport
	if transport == nil {
		transport = func(fleet.WorkerSpec) fleet.Transport { return fleet.InProcess{Backend: e.registry} }
		if a.hosts != nil {
			var err error
			if transport, err = e.sshTransports(*a.hosts, e.registry); err != nil {
				return err
			}
		}
	}
	a.transport = func(w fleet.WorkerSpec) fleet.Transport { return e.meter(transport(w)) }
	return nil
}

// startActors spawns the actor tree (the fleet, the providers, the bandit, the requests and the
// recorder under the root supervisor) and waits until every supervisor has started its children; the
// actor system stops again when they do not.
func (e *Engine) startActors(transport func(fleet.WorkerSpec) fleet.Transport) error {
	var fleetChildren, providerChildren []supervisors.Child
	for _, w := range e.deps.Dir.Workers {
		fleetChildren = append(fleetChildren, supervisors.Child{Name: w.Spec.Name, Props: e.deps.Props(actors.NewWorkerActor(e.deps, w, transport(w.Spec)))})
	}
	for _, p := range e.deps.Dir.Providers {
		providerChildren = append(providerChildren, supervisors.Child{Name: p.Name, Props: e.deps.Props(actors.NewProviderActor(e.deps, p))})
	}
	rootProps := supervisors.Static(e.deps, []supervisors.Child{
		{Name: actors.FleetName, Props: supervisors.Static(e.deps, fleetChildren)},
		{Name: actors.ProvidersName, Props: supervisors.Static(e.deps, providerChildren)},
		{Name: actors.BanditName, Props: supervisors.Bandit(e.deps)},
		{Name: actors.RequestsName, Props: supervisors.Requests(e.deps)},
		{Name: actors.RecorderName, Props: e.deps.Props(actors.NewRecorderActor(e.deps, e.store, e.spool))},
	})
	var err error
	if e.root, err = e.system.Root.SpawnNamed(rootProps, actors.RootName); err != nil {
		return fmt.Errorf("start actor system: %w", err)
	}
	if err := e.waitReady(); err != nil {
		e.system.Shutdown()
		e.deps.Dispatcher.Stop()
		return err
	}
	return nil
}

// startBackground starts the loops that run until Shutdown: the secrets file's watcher, the providers'
// discovery, the bus's listener, the books, the records' upkeep, the renewal of the concurrency slots
// held in Redis, and the folding of the other controllers' rewards.
func (e *Engine) startBackground(opts Options) {
	var background context.Context
	background, e.stopBackground = context.WithCancel(context.Background())
	if e.cfg.SecretsFile != "" && len(e.upstreams) > 0 {
		poll := opts.KeyPoll
		if poll <= 0 {
			poll = KeyPollInterval
		}
		e.background.Go(func() { e.watchKeys(background, poll) })
	}
	for _, u := range e.upstreams {
		if u.discover > 0 {
			e.background.Go(func() { e.discoverEvery(background, u.Name, u.discover) })
		}
	}
	if e.bus != nil {
		e.background.Go(func() { e.bus.Listen(background, redisbus.Handlers{Opened: e.peerOpened, KeyChanged: e.keys.Forget}) })
	}
	e.runBooks(background, cmp.Or(opts.KeyRefresh, keystore.RefreshEvery))
	e.background.Go(func() { e.watchBudgets(background, cmp.Or(opts.BudgetCheck, BudgetCheckEvery)) })
	e.keepRecords(background)
	if e.redis != nil {
		e.background.Go(func() { e.renewSlots(background) })
	}
	if l, ok := e.store.(store.Learning); ok && e.peers != nil {
		every := time.Duration(e.cfg.ArmsRefreshSeconds * float64(time.Second))
		e.background.Go(func() { e.foldPeerRewards(background, l, every) })
	}
}

// logStarted logs each live provider, then what the engine started with.
func (e *Engine) logStarted(a *assembly) {
	for _, p := range e.LiveProviders() {
		e.log.Info("provider live", zap.String("event", "provider_live"), zap.String("provider", p.Name), zap.String("kind", p.Kind),
			zap.String("base_url", p.BaseURL), zap.Int("models", p.Models), zap.String("key_from", p.KeyFrom))
	}
	e.log.Info("conclave engine started", zap.String("event", "engine_started"), zap.Int("models", a.cat.Len()),
		zap.Int("workers", len(a.workers)), zap.Strings("providers", a.cat.ProviderNames()), zap.Int("blueprints", len(a.categories)),
		zap.String("blueprint_source", a.bps.Source()), zap.Int("blueprints_rejected", len(a.bps.Rejected())), zap.Uint64("seed", e.cfg.Seed),
		zap.String("policy", a.policy.String()), zap.Float64("classifier_temperature", a.classifier.Temperature()))
}

// carries says whether a provider's wire format has a field for a parameter: a real upstream by its
// kind; the simulated and replayed models take every parameter.
func carries(ups []upstream) func(provider, param string) bool {
	kinds := make(map[string]string, len(ups))
	for _, u := range ups {
		kinds[u.Name] = u.Kind
	}
	return func(provider, param string) bool {
		kind, real := kinds[provider]
		return !real || providers.Carries(kind, param)
	}
}

// needsOutputLimit says which providers' wire formats require an output limit on every call.
func needsOutputLimit(ups []upstream) func(provider string) bool {
	needs := map[string]bool{}
	for _, u := range ups {
		needs[u.Name] = providers.NeedsMaxTokens(u.Kind)
	}
	return func(provider string) bool { return needs[provider] }
}

func (e *Engine) upstreamsOnly() []*providers.Upstream {
	out := make([]*providers.Upstream, len(e.upstreams))
	for i, u := range e.upstreams {
		out[i] = u.Upstream
	}
	return out
}

// providerBreakers are the configured breakers, a provider's own block over the breakers map.
func providerBreakers(cfg config.Config) map[string]config.Breaker {
	return overProviders(cfg, cfg.Breakers, func(p config.Provider) *config.Breaker { return p.Breaker })
}

// providerLimits are the configured rate limits, a provider's own block over the rate_limits map.
func providerLimits(cfg config.Config) map[string]ratelimit.Limits {
	return overProviders(cfg, cfg.RateLimits.Providers, func(p config.Provider) *ratelimit.Limits { return p.RateLimit })
}

// overProviders lays each provider's own setting (own, when set) over a map of settings by provider.
func overProviders[T any](cfg config.Config, byName map[string]T, own func(config.Provider) *T) map[string]T {
	out := maps.Clone(byName)
	if out == nil {
		out = map[string]T{}
	}
	for name, p := range cfg.Providers {
		if v := own(p); v != nil {
			out[name] = *v
		}
	}
	return out
}

// catalogPrices prices calls by the catalog.
func catalogPrices(cat *catalog.Live) providers.Prices {
	return func(model string) (money.Rates, bool) {
		m, ok := cat.Load().Get(model)
		return m.Rates(), ok
	}
}

// breakerSettings reads the configured breakers: each provider's own, its models', and its timeout floor.
func breakerSettings(cfg map[string]config.Breaker) (providers, models map[string]resilience.Settings, floors map[string]time.Duration) {
	providers, models, floors = map[string]resilience.Settings{}, map[string]resilience.Settings{}, map[string]time.Duration{}
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	for name, b := range cfg {
		s := resilience.ProviderBreakerSettings(name)
		if b.Threshold > 0 {
			s.Threshold = b.Threshold
		}
		if b.WindowSeconds > 0 {
			s.Window = secs(b.WindowSeconds)
		}
		if b.OpenSeconds > 0 {
			s.OpenFor = secs(b.OpenSeconds)
		}
		providers[name] = s
		m := resilience.ModelBreakerSettings("")
		if b.ModelThreshold > 0 {
			m.Threshold = b.ModelThreshold
		}
		if b.ModelOpenSeconds > 0 {
			m.OpenFor = secs(b.ModelOpenSeconds)
		}
		models[name] = m
		floors[name] = secs(b.TimeoutFloorSeconds)
	}
	return providers, models, floors
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
// failure with the HTTP status it maps to. The answer comes by the request's deadline (its timeout, or
// the bound its blueprint gives); ctx ending first (the caller left) stops the request, which then
// answers at once with client_closed_request.
//
// With traces on, the request belongs to the span in ctx (its door's), or else to one started here,
// a child of the request's trace_parent (a remote caller's); the record names its trace, and the spans
// of its phases and calls are emitted below the request's once it has answered. With traces off, a
// caller's trace_parent is dropped: the record names no trace.
func (e *Engine) Route(ctx context.Context, req *messages.RouteRequest) (*messages.Execution, error) {
	return e.traced(ctx, req, nil)
}

// traced is Route, with the pieces of a direct call's streamed answer for onDelta (nil: not streamed).
func (e *Engine) traced(ctx context.Context, req *messages.RouteRequest, onDelta func(*messages.Delta)) (*messages.Execution, error) {
	if e.tracing == nil {
		req.TraceParent = ""
		return e.admit(ctx, req, onDelta)
	}
	span := trace.SpanFromContext(ctx)
	var own trace.Span
	if !span.SpanContext().IsValid() {
		ctx, own = e.tracing.Start(ctx, "route", req.TraceParent)
		span = own
	}
	req.TraceParent = tracing.TraceParent(span.SpanContext())
	exec, err := e.admit(ctx, req, onDelta)
	if exec != nil && exec.TraceId == "" {
		// Refused before a coordinator recorded it (a key's limits, the shutdown): the record is the
		// engine's own, not yet handed to anyone.
		exec.TraceId = span.SpanContext().TraceID().String()
	}
	e.tracing.Record(ctx, exec)
	if own != nil {
		status := http.StatusInternalServerError
		if exec != nil {
			status = int(exec.StatusCode)
		}
		tracing.End(own, status)
	}
	return exec, err
}

// admit lets a request in (a keyed request by its key's models, budget and limits) and routes it.
func (e *Engine) admit(ctx context.Context, req *messages.RouteRequest, onDelta func(*messages.Delta)) (*messages.Execution, error) {
	e.inflight.Add(1)
	defer e.inflight.Done()
	if e.closing.Load() {
		return refused(req, resilience.ShuttingDown, "conclave is shutting down", 0), nil
	}
	key, refusal := e.admitKey(ctx, req)
	if refusal != nil {
		return refusal, nil
	}
	e.addFallbacks(req, key)
	choice, cacheKey := e.answers.choose(req, key)
	exec := e.answers.lookup(ctx, req, choice, cacheKey)
	var err error
	if exec == nil {
		// Counted once, by the tokenizer: the providers' tokens per minute and the models' windows read it.
		req.PromptTokens = int32(min(tokens.Count(tokens.O200k, req.Task), math.MaxInt32))
		e.hint(ctx, req)
		exec, err = e.route(ctx, req, onDelta)
		e.answers.keep(choice, cacheKey, exec)
	}
	if key != nil {
		if exec == nil {
			exec = &messages.Execution{StatusCode: http.StatusInternalServerError}
		}
		key.settle(exec)
	}
	return exec, err
}

// admitKey judges a request by its key (the caller's, unless the request names one): its models,
// budget and limits. It returns the key's pass, nil for a request without a key, or else the record of
// the request's refusal.
func (e *Engine) admitKey(ctx context.Context, req *messages.RouteRequest) (*pass, *messages.Execution) {
	if k, ok := keys.CallerOf(ctx); ok && req.KeyId == "" {
		req.KeyId = k.ID
	}
	if req.KeyId == "" {
		return nil, nil
	}
	p, globs, f := e.keys.admit(ctx, ask{id: req.RequestId, keyID: req.KeyId, named: append(slices.Clip(req.Models), req.Fallbacks...),
		virtual: virtualModel(req)})
	if f != nil {
		return nil, &messages.Execution{RequestId: req.RequestId, ClientRequestId: req.ClientRequestId, KeyId: req.KeyId,
			StatusCode: int32(resilience.StatusOf(resilience.Kind(f.Code))), Error: f}
	}
	req.AllowedModels, req.TeamId = globs, p.teamID
	req.PricedOnly = p.key.Budget != nil && e.keys.defaultPrice == nil
	return p, nil
}

// addFallbacks gives a direct call that names no fallbacks the configuration's for its model; a key
// keeps to those it may call (and, with a budget, to those with a price).
func (e *Engine) addFallbacks(req *messages.RouteRequest, key *pass) {
	if !req.Direct || len(req.Fallbacks) != 0 || len(req.Models) != 1 {
		return
	}
	cat := e.catalog.Load()
	for _, m := range e.cfg.Fallbacks[req.Models[0]] {
		if model, _ := cat.Get(m); key == nil || (key.key.Allows(m) && !(req.PricedOnly && model.Unpriced)) {
			req.Fallbacks = append(req.Fallbacks, m)
		}
	}
}

// ConclaveModels starts the ids of the models Conclave makes of panels: conclave/auto lets the
// classifier choose the blueprint, conclave/<blueprint> names it.
const ConclaveModels = "conclave/"

// virtualModel is the Conclave model a routed request asks for.
func virtualModel(req *messages.RouteRequest) string {
	return ConclaveModels + cmp.Or(req.Category, "auto")
}

// route is Route once the request is let in. A direct call runs on the caller's goroutine
// (actors.RunDirect); any other request is a coordinator actor's, under the request supervisor.
func (e *Engine) route(ctx context.Context, req *messages.RouteRequest, onDelta func(*messages.Delta)) (*messages.Execution, error) {
	// The ask counts too: its images and conversation can be far larger than the task rendered of it.
	// The account holds its calls' answers too, until the answer comes (with a spool, once its record
	// is durable): they go back when Route returns.
	size := int64(len(req.Task) + req.GetAsk().SizeVT())
	account, ok := e.deps.Inflight.Open(req.RequestId, size)
	if !ok {
		e.deps.Shed().Add(string(resilience.Overloaded))
		return refused(req, resilience.Overloaded, e.inflightFull(), time.Second), nil
	}
	defer account.Close()
	if req.Direct {
		return e.deps.RunDirect(ctx, e.system, actors.DirectCall{Req: req, Seq: e.deps.Dir.NextSequence(), OnDelta: onDelta,
			ShuttingDown: e.stopping, Wait: e.budget(req) + Margin})
	}
	stop := context.AfterFunc(ctx, func() {
		e.system.Root.Send(e.deps.Dir.Requests, &messages.CancelRequest{RequestId: req.RequestId, Code: string(resilience.ClientClosed)})
	})
	defer stop()
	res, err := e.system.Root.RequestFuture(e.deps.Dir.Requests, req, e.budget(req)+Margin).Result()
	if err != nil { // check the error first: a late reply can race the future's timeout
		return nil, fmt.Errorf("request %s: %w", req.RequestId, err)
	}
	exec, ok := res.(*messages.Execution)
	if !ok {
		return nil, fmt.Errorf("request %s: unexpected reply %T", req.RequestId, res)
	}
	return exec, nil
}

// inflightFull is why a request or an embedding is refused for the bytes in flight.
func (e *Engine) inflightFull() string {
	return fmt.Sprintf("the requests in flight already hold %d bytes of tasks, asks and answers", e.cfg.MaxInflightBytes)
}

// RouteWithProgress is Route telling onProgress each step as it happens (classified, selected,
// dispatched, reply, retry, consensus), in order, before it returns. onProgress runs on an actor of its
// own: it must not block.
func (e *Engine) RouteWithProgress(ctx context.Context, req *messages.RouteRequest, onProgress func(*messages.Progress)) (*messages.Execution, error) {
	pid, told := e.deps.ListenProgress(e.system, req.RequestId, onProgress)
	req.ProgressTo = pid
	exec, err := e.Route(ctx, req)
	told()
	return exec, err
}

// RouteStreaming is Route for a request whose answer is streamed: onDelta hears each piece as the
// provider writes it, in order, before RouteStreaming returns (the record holds the whole answer). A
// direct call's pieces come on the caller's goroutine; a panel's (its arbiter's synthesis) on an actor
// of their own, where onDelta must not block.
func (e *Engine) RouteStreaming(ctx context.Context, req *messages.RouteRequest, onDelta func(*messages.Delta)) (*messages.Execution, error) {
	if req.Direct {
		return e.traced(ctx, req, onDelta)
	}
	pid, told := e.deps.ListenDeltas(e.system, req.RequestId, onDelta)
	req.StreamTo = pid
	exec, err := e.Route(ctx, req)
	told()
	return exec, err
}

// Margin is how long past a request's deadline the engine waits for its coordinator before giving up on
// it; the coordinator answers by the deadline, so this is a last resort against a bug.
const Margin = time.Second

func refused(req *messages.RouteRequest, kind resilience.Kind, msg string, retryAfter time.Duration) *messages.Execution {
	return &messages.Execution{RequestId: req.RequestId, ClientRequestId: req.ClientRequestId, StatusCode: int32(resilience.StatusOf(kind)),
		Error: &messages.Failure{Code: string(kind), Message: msg, RetryAfterSeconds: retryAfter.Seconds()}}
}

// budget is the longest a request may take: its timeout, or the longest bound a blueprint gives.
func (e *Engine) budget(req *messages.RouteRequest) time.Duration {
	if req.TimeoutSeconds != nil {
		return time.Duration(*req.TimeoutSeconds * float64(time.Second))
	}
	return e.longestBound
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
	if l.Unavailable != "" {
		return nil, false, fmt.Errorf("%w: %s", store.ErrUnavailable, l.Unavailable)
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
// sees them: rewards travel to the arms' writer asynchronously, and a replayable run (an evaluation) must
// not race them.
func (e *Engine) Settle(ctx context.Context, category string, pulls int64) error {
	for e.deps.Dir.Arms.TotalPulls(category) < pulls || e.deps.Dir.Arms.VotesPending() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for %d rewards in %s: %w", pulls, category, err)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// Catalog returns the model catalog.
func (e *Engine) Catalog() *catalog.Catalog { return e.catalog.Load() }

// Blueprints returns the blueprints in force.
func (e *Engine) Blueprints() *blueprints.Set { return e.blueprints }

// Arms returns the board of learned arms.
func (e *Engine) Arms() bandit.Board { return e.deps.Dir.Arms }

// Providers returns every provider's latest snapshot.
func (e *Engine) Providers() []*providerstate.Snapshot {
	out := make([]*providerstate.Snapshot, len(e.deps.Dir.Providers))
	for i, p := range e.deps.Dir.Providers {
		out[i] = p.Snapshot()
	}
	return out
}

// publishOpened tells the other controllers that a provider breaker opened here. It runs on the
// provider's actor, so the publication goes on in a goroutine of its own.
func (e *Engine) publishOpened(provider string, until time.Time) {
	go func() {
		if err := e.bus.PublishOpened(provider, until); err != nil {
			e.log.Warn("a breaker opening was not shared", zap.String("event", "breaker_share_failed"), zap.String("provider", provider), zap.Error(err))
		}
	}()
}

// roundTimeout bounds the shared rotation's call: past it, the request takes a local turn.
const roundTimeout = 100 * time.Millisecond

// sharedRound takes a turn of the rotation in Redis, in a goroutine the coordinator starts while its
// models answer; losing Redis is logged once, and so is finding it again.
func (e *Engine) sharedRound(category string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
	defer cancel()
	n, err := e.bus.Turn(ctx, category)
	if lost := err != nil; e.rotationLocal.Swap(lost) != lost {
		if lost {
			e.log.Warn("the rotating arbiter's turns are counted locally", zap.String("event", "rotation_local"), zap.Error(err))
		} else {
			e.log.Info("the rotating arbiter's turns are shared again", zap.String("event", "rotation_shared"))
		}
	}
	return n, err
}

// peerOpened hands another controller's breaker opening to the provider's actor.
func (e *Engine) peerOpened(o redisbus.Opened) {
	if ref := e.deps.Dir.Provider(o.Provider); ref != nil {
		e.system.Root.Send(ref.PID, &messages.PeerBreakerOpened{Provider: o.Provider, OpenUntil: timestamppb.New(o.Until), Node: o.Node})
	}
}

// Redis returns the client of REDIS_URL, or nil when there is none: the remote door shares it.
func (e *Engine) Redis() *redis.Client { return e.redis }

// Metrics returns the engine's metrics registry.
func (e *Engine) Metrics() *metrics.Metrics { return e.deps.Metrics }

// metricsSource is what a scrape reads: the providers' snapshots, the arms, the catalog.
func (e *Engine) metricsSource() metrics.Source {
	return metrics.Source{
		Providers: func() []metrics.Provider {
			out := make([]metrics.Provider, 0, len(e.deps.Dir.Providers))
			for _, p := range e.deps.Dir.Providers {
				s := p.Snapshot()
				out = append(out, metrics.Provider{Name: s.Name, Breaker: s.Breaker.State.String(),
					RequestsUse: s.LimitUse.Requests, TokensUse: s.LimitUse.Tokens, ConcurrencyUse: s.LimitUse.Concurrency})
			}
			return out
		},
		Arms: func() []metrics.Arm {
			published := e.deps.Dir.Arms.Published()
			out := make([]metrics.Arm, 0, len(published))
			for _, a := range published {
				out = append(out, metrics.Arm{Model: a.Model, Category: a.Category, Mean: a.Mean(), Pulls: a.Pulls})
			}
			return out
		},
		ProviderOf: func(model string) string {
			m, _ := e.catalog.Load().Get(model)
			return m.Provider
		},
		Stopped: func() map[string]int { return e.deps.Dir.StoppedCounts() },
		Actors:  func() int { return actors.Processes(e.system, "") },
	}
}

// Workers returns every worker's latest snapshot.
func (e *Engine) Workers() []assign.Worker { return e.deps.Dir.WorkerSnapshots() }

// Directory exposes the actor system's addresses, for tests that talk to actors directly.
func (e *Engine) Directory() *actors.Directory { return e.deps.Dir }

// System exposes the actor system, for tests that talk to actors directly.
func (e *Engine) System() *actor.ActorSystem { return e.system }

// mailboxThroughput is how many messages a mailbox processes before its goroutine yields: protoactor's
// default.
const mailboxThroughput = 300

// Props makes props that run on the engine's dispatcher, as its own actors do.
func (e *Engine) Props(producer actor.Producer) *actor.Props { return e.deps.Props(producer) }

// Ready reports why the engine cannot serve, or nil: it needs every actor running (none stopped for
// good after repeated crashes), and a worker and a provider that take work.
func (e *Engine) Ready() error {
	if e.closing.Load() {
		return ErrShuttingDown
	}
	if stopped := e.deps.Dir.Stopped(); len(stopped) > 0 {
		return stoppedError(stopped)
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

// maxNamedStopped bounds the stopped actors readiness names; the rest are counted.
const maxNamedStopped = 10

// stoppedError names the actors stopped for good, by path only: /readyz answers it to anyone, and a
// panic's reason may quote what the actor held (the reason is in the log and GET /providers, /workers).
func stoppedError(stopped []actors.StoppedActor) error {
	paths := make([]string, 0, min(len(stopped), maxNamedStopped))
	for _, s := range stopped[:min(len(stopped), maxNamedStopped)] {
		paths = append(paths, s.Path)
	}
	more := ""
	if n := len(stopped) - len(paths); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Errorf("actors stopped after repeated crashes: %s%s", strings.Join(paths, ", "), more)
}

// Shutdown stops taking requests and waits for those in flight. Requests still running when ctx is
// about to end (a quarter of its time, at most a second, before) are stopped: they answer 503
// shutting_down and their records are kept. Then every record is written and the actors stop.
func (e *Engine) Shutdown(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.stopBackground()
		e.background.Wait()
		done := make(chan struct{})
		go func() { e.inflight.Wait(); close(done) }()
		stopAt := time.Now().Add(time.Hour)
		if d, ok := ctx.Deadline(); ok {
			stopAt = d.Add(-min(time.Second, time.Until(d)/4))
		}
		timer := time.NewTimer(max(time.Until(stopAt), 0))
		defer timer.Stop()
		select {
		case <-done:
		case <-ctx.Done():
		case <-timer.C:
		}
		select {
		case <-done:
		default:
			e.log.Warn("stopping the requests still running", zap.String("event", "shutdown_cancel"))
			close(e.stopping)
			e.system.Root.Send(e.deps.Dir.Requests, &messages.CancelRequest{Code: string(resilience.ShuttingDown)})
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				err = errors.New("in-flight requests did not stop")
			}
		}
		// The records are written even when ctx is over: a request's record is never dropped on the way out.
		// Enough for a write to a database that just went away to fail and go to the spool instead.
		wait := 10 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = max(time.Until(d), wait)
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
		e.deps.Dispatcher.Stop()
		err = errors.Join(err, e.closeStore())
		for _, t := range e.transports {
			err = errors.Join(err, t.Close())
		}
		if e.redis != nil {
			err = errors.Join(err, e.redis.Close())
		}
		e.deps.Shed().Flush()
		e.log.Info("conclave engine stopped", zap.String("event", "engine_stopped"), zap.Error(err))
	})
	return err
}

// loadCatalog reads a catalog file: the catalog package only parses.
func loadCatalog(path string) (*catalog.Catalog, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	c, err := catalog.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}
