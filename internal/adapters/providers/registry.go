package providers

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Upstream is one configured provider: the adapter that speaks its wire format, its base URL and its
// key. The key can change while the system runs (a secrets file rewritten); the base URL cannot.
type Upstream struct {
	Name    string
	Kind    string
	BaseURL string
	Backend Backend
	key     atomic.Pointer[secret.String]
}

// NewUpstream returns an upstream with its key.
func NewUpstream(name, kind, baseURL string, backend Backend, key secret.String) *Upstream {
	u := &Upstream{Name: name, Kind: kind, BaseURL: baseURL, Backend: backend}
	u.key.Store(&key)
	return u
}

// Key returns the upstream's current key.
func (u *Upstream) Key() secret.String { return *u.key.Load() }

// SetKey replaces the key and reports whether it changed.
func (u *Upstream) SetKey(k secret.String) bool {
	if old := u.key.Swap(&k); old != nil && *old == k {
		return false
	}
	return true
}

// Prices gives a model's prices; ok is false for a model without them.
type Prices func(model string) (money.Rates, bool)

// Registry routes each call to its provider's upstream, filling in the key and base URL, and prices
// the reply. Providers without an upstream of their own go to the fallback backend (the simulated
// provider of the embedded default), or fail when there is none. It is safe for concurrent use.
type Registry struct {
	upstreams map[string]*Upstream
	fallback  Backend
	prices    Prices
}

// NewRegistry returns a registry over upstreams; prices and fallback may be nil.
func NewRegistry(prices Prices, fallback Backend, upstreams ...*Upstream) *Registry {
	r := &Registry{upstreams: make(map[string]*Upstream, len(upstreams)), fallback: fallback, prices: prices}
	for _, u := range upstreams {
		r.upstreams[u.Name] = u
	}
	return r
}

// Upstream returns a provider's upstream, or nil.
func (r *Registry) Upstream(provider string) *Upstream { return r.upstreams[provider] }

// Names returns the providers with an upstream, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.upstreams))
	for n := range r.upstreams {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// KindSimulated names the simulated provider's wire format, for an agent on a worker host.
const KindSimulated = "simulated"

// Route says how a worker host calls a provider: its wire format, base URL and key; the simulated
// provider serves the providers without an upstream when it is the fallback. ok is false for a
// provider no host can call (the fallback is something else).
func (r *Registry) Route(provider string) (kind, baseURL string, key secret.String, ok bool) {
	if u := r.upstreams[provider]; u != nil {
		return u.Kind, u.BaseURL, u.Key(), true
	}
	if _, sim := r.fallback.(*Sim); sim {
		return KindSimulated, "", "", true
	}
	return "", "", "", false
}

// Price is a call's cost from its model's prices and its usage; ok is false for a model without
// prices.
func (r *Registry) Price(model string, u Usage) (cost money.USD, ok bool) {
	if r.prices == nil {
		return 0, false
	}
	rates, ok := r.prices(model)
	return rates.Charge(u.Tokens()), ok
}

// Complete implements Backend.
func (r *Registry) Complete(ctx context.Context, call Call) (Reply, error) {
	b, call, err := r.route(call)
	if err != nil {
		return Reply{}, err
	}
	began := time.Now()
	reply, err := b.Complete(ctx, call)
	return r.finish(call, reply, began), err
}

// Stream implements Streamer, routing the call as Complete does; a backend that cannot stream (the
// replay provider) answers whole, in one piece.
func (r *Registry) Stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	b, call, err := r.route(call)
	if err != nil {
		return Reply{}, err
	}
	began := time.Now()
	reply, err := Stream(ctx, b, call, onDelta)
	return r.finish(call, reply, began), err
}

// route returns the backend of a call's provider, the call with its key and base URL.
func (r *Registry) route(call Call) (Backend, Call, error) {
	b := r.fallback
	if u := r.upstreams[call.Provider]; u != nil {
		b, call.BaseURL, call.Key = u.Backend, u.BaseURL, u.Key()
	}
	if b == nil {
		return nil, call, &resilience.Error{Kind: resilience.Internal, Provider: call.Provider, Model: call.Model,
			Err: fmt.Errorf("no upstream is configured for provider %q", call.Provider)}
	}
	return b, call, nil
}

// finish measures and prices a reply.
func (r *Registry) finish(call Call, reply Reply, began time.Time) Reply {
	reply.Latency = time.Since(began)
	if cost, ok := r.Price(call.Model, reply.Usage); ok {
		reply.Cost = cost
	}
	return reply
}
