// Package metrics owns Conclave's Prometheus metrics: one registry, the instruments the HTTP layer
// and the actors report to, gauges read from published snapshots at scrape time, and the bounds that
// keep label cardinality finite. Names carry the conclave_ prefix; labels naming providers and models
// use the OpenTelemetry GenAI attribute names (gen_ai_provider_name, gen_ai_request_model,
// gen_ai_token_type, error_type).
package metrics

import (
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Label names.
const (
	labelProvider  = "gen_ai_provider_name"
	labelModel     = "gen_ai_request_model"
	labelTokenType = "gen_ai_token_type"
	labelErrorType = "error_type"
)

// MaxModels bounds the models that get their own label value; later ones are counted as "other", so
// a provider listing thousands of models cannot grow the series without bound.
const MaxModels = 512

// MaxCategories bounds the category label the same way (blueprints are few, but a directory may add).
const MaxCategories = 64

// Other is the label value of everything past a bound.
const Other = "other"

// TopArms is how many of each category's arms, ranked by mean, have their mean exported.
const TopArms = 5

// Provider is what the scrape reads of a provider's published snapshot.
type Provider struct {
	Name string
	// Breaker is the provider breaker's state: closed, open or half_open.
	Breaker string
	// RequestsUse, TokensUse and ConcurrencyUse are the shares of each limit in use, in [0, 1].
	RequestsUse, TokensUse, ConcurrencyUse float64
}

// Arm is what the scrape reads of a bandit arm.
type Arm struct {
	Model, Category string
	Mean            float64
	Pulls           int64
}

// Source gives the scrape the state the actors publish. Any function may be nil.
type Source struct {
	Providers func() []Provider
	Arms      func() []Arm
	// ProviderOf names a model's provider, for calls whose record names only the model (the arbiter's).
	ProviderOf func(model string) string
	// Stopped counts, by actor kind, the actors a supervisor stopped for good after repeated crashes.
	Stopped func() map[string]int
	// Actors counts the processes of the engine's actor system (actors and waiting futures).
	Actors func() int
}

// Metrics holds the registry and its instruments. A nil *Metrics records nothing, so code that runs
// without metrics (evaluation, unit tests) needs no special case.
type Metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	overhead    prometheus.Histogram
	calls       *prometheus.CounterVec
	callSeconds *prometheus.HistogramVec
	tokens      *prometheus.CounterVec
	cost        *prometheus.CounterVec
	transitions *prometheus.CounterVec
	quorum      *prometheus.CounterVec
	refused     *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	keySpend    *prometheus.CounterVec
	keyRequests *prometheus.CounterVec

	providerOf func(string) string

	mu         sync.Mutex
	models     map[string]bool
	categories map[string]bool
	keys       map[string]bool

	resolvedMu   sync.RWMutex // guards callCache and requestCache
	callCache    map[callKey]callInstruments
	requestCache map[requestKey]requestInstruments
}

// New returns metrics on a registry of their own, with the Go runtime and process collectors, reading
// gauges from src at scrape time.
func New(src Source) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), models: map[string]bool{}, categories: map[string]bool{}, keys: map[string]bool{}, providerOf: src.ProviderOf,
		callCache: map[callKey]callInstruments{}, requestCache: map[requestKey]requestInstruments{}}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_http_requests_total", Help: "HTTP requests answered, by endpoint, status code and task category.",
	}, []string{"endpoint", "code", "category"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "conclave_http_request_duration_seconds", Help: "Time from a request's arrival to its answer, by endpoint.",
		Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"endpoint"})
	m.overhead = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "conclave_overhead_seconds", Help: "Time a routed request spent in Conclave itself, not waiting for models.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_model_calls_total", Help: "Model calls, by provider, model, outcome (ok, error, timeout, cancelled, not_sent, late) and error type.",
	}, []string{labelProvider, labelModel, "outcome", labelErrorType})
	m.callSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "conclave_model_call_duration_seconds", Help: "Latency of model calls that answered, by provider.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120},
	}, []string{labelProvider})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_tokens_total", Help: "Tokens used by model calls, by provider, model and token type (input, output).",
	}, []string{labelProvider, labelModel, labelTokenType})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		// Nano-dollars, whole: a counter adds integers exactly up to 2^53 (9 million dollars), where
		// fractions of dollars would gather float noise.
		Name: "conclave_cost_nanodollars_total", Help: "Cost of model calls in nano-dollars (1e-9 US dollars), by provider and model.",
	}, []string{labelProvider, labelModel})
	m.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_breaker_transitions_total", Help: "Provider breaker transitions, by provider and the state entered.",
	}, []string{labelProvider, "to"})
	m.quorum = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_quorum_outcomes_total", Help: "Routed requests by quorum outcome: complete, degraded (fewer answers than min_responses) or failed.",
	}, []string{"outcome"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_remote_refused_total", Help: "Messages and connections the remote listener refused before delivery, by reason.",
	}, []string{"reason"})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_actor_messages_dropped_total",
		Help: "Messages an actor dropped instead of acting on them (a missing reply address, an unknown model, an impossible field), by actor kind and reason.",
	}, []string{"actor", "reason"})
	m.keySpend = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_key_spend_nanodollars_total", Help: "What API keys spent on model calls, in nano-dollars (1e-9 US dollars), by key name.",
	}, []string{"key"})
	m.keyRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "conclave_key_requests_total", Help: "Requests made with API keys, by key name and HTTP status code.",
	}, []string{"key", "code"})
	m.reg.MustRegister(m.requests, m.duration, m.overhead, m.calls, m.callSeconds, m.tokens, m.cost, m.transitions, m.quorum, m.refused, m.dropped,
		m.keySpend, m.keyRequests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &snapshots{src: src, m: m})
	for _, o := range []string{"complete", "degraded", "failed"} {
		m.quorum.WithLabelValues(o)
	}
	return m
}

// MaxKeys bounds the keys that get their own label value, as MaxModels bounds models.
const MaxKeys = 500

// KeyRequest counts a request made with a key (by its name) that answered with status, and what it
// spent.
func (m *Metrics) KeyRequest(name string, status int, spent money.USD) {
	if m == nil {
		return
	}
	name = m.bounded(m.keys, MaxKeys, name)
	m.keyRequests.WithLabelValues(name, strconv.Itoa(status)).Inc()
	if spent > 0 {
		m.keySpend.WithLabelValues(name).Add(float64(spent))
	}
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the registry, for tests that gather it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// bounded returns v when it is in the set or the set has room, else Other.
func (m *Metrics) bounded(set map[string]bool, limit int, v string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if set[v] {
		return v
	}
	if len(set) >= limit {
		return Other
	}
	set[v] = true
	return v
}

func (m *Metrics) model(id string) string { return m.bounded(m.models, MaxModels, id) }

// Request counts an answered HTTP request. Category is empty for endpoints that route nothing.
func (m *Metrics) Request(endpoint string, code int, category string, took time.Duration) {
	if m == nil {
		return
	}
	in := resolved(&m.resolvedMu, m.requestCache, requestKey{endpoint: endpoint, code: code, category: category}, func() requestInstruments {
		if category != "" {
			category = m.bounded(m.categories, MaxCategories, category)
		}
		return requestInstruments{count: m.requests.WithLabelValues(endpoint, strconv.Itoa(code), category), duration: m.duration.WithLabelValues(endpoint)}
	})
	in.count.Inc()
	in.duration.Observe(took.Seconds())
}

// requestKey is one kind of answered request; requestInstruments are its instruments.
type requestKey struct {
	endpoint string
	code     int
	category string
}

type requestInstruments struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// RemoteRefused counts a message or connection the remote listener refused. Reasons are the few the
// listener names, so the label stays bounded.
func (m *Metrics) RemoteRefused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(reason).Inc()
}

// Overhead records a routed request's time in Conclave itself.
func (m *Metrics) Overhead(d time.Duration) {
	if m == nil {
		return
	}
	m.overhead.Observe(max(d, 0).Seconds())
}

// Execution records what a finished request's record says: its calls, tokens, cost and quorum.
func (m *Metrics) Execution(e *messages.Execution) {
	if m == nil {
		return
	}
	for _, r := range e.Results {
		in := resolved(&m.resolvedMu, m.callCache, callKey{provider: r.Provider, model: r.Model, status: r.Status, errorKind: r.ErrorKind},
			func() callInstruments {
				model := m.model(r.Model)
				in := callInstruments{calls: m.calls.WithLabelValues(r.Provider, model, r.Status, r.ErrorKind), usage: m.usage(r.Provider, model)}
				if r.Status == "ok" {
					in.seconds = m.callSeconds.WithLabelValues(r.Provider)
				}
				return in
			})
		in.calls.Inc()
		if in.seconds != nil {
			in.seconds.Observe(r.LatencyMs / 1000)
		}
		in.usage.add(r.Usage, r.CostNanos)
	}
	if d := e.Decision; d != nil && d.Arbiter != "" && d.ArbiterUsage != nil && m.providerOf != nil {
		m.usage(m.providerOf(d.Arbiter), m.model(d.Arbiter)).add(d.ArbiterUsage, d.ArbiterCostNanos)
	}
	switch {
	case e.StatusCode != http.StatusOK:
		m.quorum.WithLabelValues("failed").Inc()
	case e.Degraded:
		m.quorum.WithLabelValues("degraded").Inc()
	default:
		m.quorum.WithLabelValues("complete").Inc()
	}
}

// callKey is one kind of call: its provider, model (before bounding), outcome and error type;
// callInstruments are what it counts on.
type callKey struct{ provider, model, status, errorKind string }

type callInstruments struct {
	calls   prometheus.Counter
	seconds prometheus.Observer // answers only
	usage   usageCounters
}

// usageCounters count one model's tokens and cost.
type usageCounters struct{ input, output, cost prometheus.Counter }

// usage resolves the usage counters of a provider's model (its label already bounded).
func (m *Metrics) usage(provider, model string) usageCounters {
	return usageCounters{input: m.tokens.WithLabelValues(provider, model, "input"), output: m.tokens.WithLabelValues(provider, model, "output"),
		cost: m.cost.WithLabelValues(provider, model)}
}

func (c usageCounters) add(u *messages.Usage, nanos int64) {
	if u != nil {
		if u.InputTokens > 0 {
			c.input.Add(float64(u.InputTokens))
		}
		if u.OutputTokens > 0 {
			c.output.Add(float64(u.OutputTokens))
		}
	}
	if nanos > 0 {
		c.cost.Add(float64(nanos))
	}
}

// resolved returns the instruments kept for k, resolving them with resolve the first time: a request
// records several calls, and resolving their label sets each time cost more than the counting. Past
// maxResolved kinds (labels are bounded, keys less so) they are resolved each time instead of kept.
func resolved[K comparable, V any](mu *sync.RWMutex, kept map[K]V, k K, resolve func() V) V {
	mu.RLock()
	v, ok := kept[k]
	mu.RUnlock()
	if ok {
		return v
	}
	v = resolve()
	mu.Lock()
	if len(kept) < maxResolved {
		kept[k] = v
	}
	mu.Unlock()
	return v
}

// maxResolved bounds the kinds of call, and of request, whose instruments are kept.
const maxResolved = 16 << 10

// BreakerTransition counts a provider breaker entering a state.
func (m *Metrics) BreakerTransition(provider, to string) {
	if m == nil {
		return
	}
	m.transitions.WithLabelValues(provider, to).Inc()
}

// ActorMessageDropped counts a message an actor of a kind dropped, and why. Both labels are the
// actors' own constants, never a message's content, so the series stay few.
func (m *Metrics) ActorMessageDropped(actor, reason string) {
	if m == nil {
		return
	}
	m.dropped.WithLabelValues(actor, reason).Inc()
}

// snapshots collects the gauges from the published state at scrape time: nothing to keep in step.
type snapshots struct {
	src Source
	m   *Metrics
}

var (
	breakerDesc = prometheus.NewDesc("conclave_breaker_state", "Provider breaker state: 1 for the state it is in, 0 for the others.",
		[]string{labelProvider, "state"}, nil)
	limitDesc = prometheus.NewDesc("conclave_rate_limit_use_ratio", "Share of a provider's rate limit in use, by limit (requests, tokens, concurrency).",
		[]string{labelProvider, "limit"}, nil)
	armDesc = prometheus.NewDesc("conclave_arm_mean", "Posterior mean of the top arms of each category, ranked by mean.",
		[]string{"category", labelModel}, nil)
	pullsDesc = prometheus.NewDesc("conclave_arm_pulls", "Rewards the top arms of each category received.",
		[]string{"category", labelModel}, nil)
	stoppedDesc = prometheus.NewDesc("conclave_actors_stopped",
		"Actors a supervisor stopped for good after repeated crashes, by actor kind; the provider and worker rows are always there.",
		[]string{"actor"}, nil)
	actorsDesc = prometheus.NewDesc("conclave_actors",
		"Processes of the engine's actor system: its actors, one per worker, provider, arm and running request among them, and the futures waiting on them.",
		nil, nil)
)

// alwaysStopped are the kinds whose conclave_actors_stopped row exists at zero, so that an alert can
// compare it without waiting for a first stop.
var alwaysStopped = []string{"provider", "worker"}

func (s *snapshots) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerDesc
	ch <- limitDesc
	ch <- armDesc
	ch <- pullsDesc
	ch <- stoppedDesc
	ch <- actorsDesc
}

func (s *snapshots) Collect(ch chan<- prometheus.Metric) {
	if s.src.Providers != nil {
		for _, p := range s.src.Providers() {
			for _, st := range []string{"closed", "open", "half_open"} {
				v := 0.0
				if p.Breaker == st {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, v, p.Name, st)
			}
			ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, p.RequestsUse, p.Name, "requests")
			ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, p.TokensUse, p.Name, "tokens")
			ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, p.ConcurrencyUse, p.Name, "concurrency")
		}
	}
	if s.src.Stopped != nil {
		stopped := s.src.Stopped()
		for _, kind := range alwaysStopped {
			if _, ok := stopped[kind]; !ok {
				ch <- prometheus.MustNewConstMetric(stoppedDesc, prometheus.GaugeValue, 0, kind)
			}
		}
		for kind, n := range stopped {
			ch <- prometheus.MustNewConstMetric(stoppedDesc, prometheus.GaugeValue, float64(n), kind)
		}
	}
	if s.src.Actors != nil {
		ch <- prometheus.MustNewConstMetric(actorsDesc, prometheus.GaugeValue, float64(s.src.Actors()))
	}
	if s.src.Arms != nil {
		for _, a := range TopByCategory(s.src.Arms(), TopArms) {
			ch <- prometheus.MustNewConstMetric(armDesc, prometheus.GaugeValue, a.Mean, a.Category, a.Model)
			ch <- prometheus.MustNewConstMetric(pullsDesc, prometheus.GaugeValue, float64(a.Pulls), a.Category, a.Model)
		}
	}
}

// TopByCategory keeps each category's n arms with the highest mean (ties to the model id).
func TopByCategory(arms []Arm, n int) []Arm {
	sorted := append([]Arm(nil), arms...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Category != b.Category {
			return a.Category < b.Category
		}
		if a.Mean != b.Mean {
			return a.Mean > b.Mean
		}
		return a.Model < b.Model
	})
	out := sorted[:0]
	kept := 0
	for i, a := range sorted {
		if i == 0 || a.Category != sorted[i-1].Category {
			kept = 0
		}
		if kept < n {
			out = append(out, a)
			kept++
		}
	}
	return out
}
