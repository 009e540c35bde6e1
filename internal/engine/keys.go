package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/keystore"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"github.com/conclave-ai/conclave/messages"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Keys are the engine's API keys: the admin API's operations on them, and the admission of every
// request made with one (its model list, budget and limits) with the charge of what it spent.
type Keys struct {
	store   keystore.Store
	records store.Store
	limits  ratelimit.Factory
	clock   clock.Clock
	catalog *catalog.Live
	metrics *metrics.Metrics
	log     *zap.Logger

	mu       sync.Mutex
	limiters map[string]keyLimiter // by key id
}

// keyLimiter is a key's limiter and the limits it was made for.
type keyLimiter struct {
	limits  ratelimit.Limits
	limiter ratelimit.Limiter
}

// ChargeTimeout bounds the charge of a request's cost, which runs after the caller may have gone.
const ChargeTimeout = 5 * time.Second

// Keys returns the engine's API keys.
func (e *Engine) Keys() *Keys { return e.keys }

func (e *Engine) openKeys() {
	var s keystore.Store = keystore.NewMemory()
	if pg, ok := e.store.(interface{ Pool() *pgxpool.Pool }); ok {
		s = keystore.NewPostgres(pg.Pool())
	}
	limits := e.deps.Limiters
	if limits == nil {
		limits = func(_ string, l ratelimit.Limits) ratelimit.Limiter { return ratelimit.NewLocal(l, e.deps.Clock, 0) }
	}
	e.keys = &Keys{store: s, records: e.store, limits: limits, clock: e.deps.Clock, catalog: e.catalog, metrics: e.deps.Metrics,
		log: e.log, limiters: map[string]keyLimiter{}}
}

// Now is the time keys are judged at.
func (k *Keys) Now() time.Time { return k.clock.Now().UTC() }

// Authenticate returns the key of a secret, or why it may not be used (keys.ErrUnknown, ErrRevoked,
// ErrExpired, or an error wrapping keystore.ErrUnavailable).
func (k *Keys) Authenticate(ctx context.Context, secret string) (keys.Key, error) {
	key, err := k.store.ByHash(ctx, keys.Hash(secret))
	if err != nil {
		return keys.Key{}, err
	}
	return key, key.Usable(k.Now())
}

// Create makes a key and returns it with its secret, which is not kept and cannot be read again.
func (k *Keys) Create(ctx context.Context, c keys.Changes) (keys.Key, string, error) {
	id, err := keys.NewID(rand.Reader)
	if err != nil {
		return keys.Key{}, "", err
	}
	secret, err := keys.NewSecret(rand.Reader)
	if err != nil {
		return keys.Key{}, "", err
	}
	now := k.Now().Truncate(time.Microsecond) // as PostgreSQL keeps it: periods count from it
	key := c.Apply(keys.Key{ID: id, CreatedAt: now}, now)
	key.Spend.PeriodStart = now
	if err := k.store.Create(ctx, key, keys.Hash(secret)); err != nil {
		return keys.Key{}, "", err
	}
	k.log.Info("API key created", zap.String("event", "key_created"), zap.String("key_id", id), zap.String("name", key.Name))
	return key, secret, nil
}

// List returns every key, revoked ones included.
func (k *Keys) List(ctx context.Context) ([]keys.Key, error) { return k.store.List(ctx) }

// Get returns a key.
func (k *Keys) Get(ctx context.Context, id string) (keys.Key, error) { return k.store.Get(ctx, id) }

// Update changes a key.
func (k *Keys) Update(ctx context.Context, id string, c keys.Changes) (keys.Key, error) {
	key, err := k.store.Update(ctx, id, c, k.Now())
	if err == nil {
		k.log.Info("API key updated", zap.String("event", "key_updated"), zap.String("key_id", id), zap.String("name", key.Name))
	}
	return key, err
}

// Revoke ends a key at once: its next request, on any controller sharing the store, gets 401.
func (k *Keys) Revoke(ctx context.Context, id string) (keys.Key, error) {
	key, err := k.store.Revoke(ctx, id, k.Now())
	if err == nil {
		k.mu.Lock()
		delete(k.limiters, id)
		k.mu.Unlock()
		k.log.Info("API key revoked", zap.String("event", "key_revoked"), zap.String("key_id", id), zap.String("name", key.Name))
	}
	return key, err
}

// Usage is how much of a key's limits is in use now (zero for a key without limits).
func (k *Keys) Usage(ctx context.Context, key keys.Key) (ratelimit.Usage, error) {
	l := k.limiter(key)
	if l == nil {
		return ratelimit.Usage{}, nil
	}
	return l.Usage(ctx)
}

// Spend sums what a key spent, from the records.
func (k *Keys) Spend(ctx context.Context, q store.SpendQuery) ([]store.SpendGroup, error) {
	s, ok := k.records.(store.Spender)
	if !ok {
		return nil, errors.New("this record store cannot sum spend")
	}
	return s.Spend(ctx, q)
}

// limiter is a key's limiter, made on first use and again when its limits change; nil for a key
// without limits. It counts where the providers' limiters count: in Redis when controllers share one.
func (k *Keys) limiter(key keys.Key) ratelimit.Limiter {
	limits := ratelimit.Limits{RequestsPerMinute: key.RPM, TokensPerMinute: key.TPM, Concurrency: key.MaxConcurrency}
	if limits == (ratelimit.Limits{}) {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.limiters[key.ID]; ok && l.limits == limits {
		return l.limiter
	}
	l := keyLimiter{limits: limits, limiter: k.limits("key:"+key.ID, limits)}
	k.limiters[key.ID] = l
	return l.limiter
}

// ask is what admission needs of a request.
type ask struct {
	id, keyID string
	// named are the models the request names; virtual is the Conclave model it asks for otherwise
	// (conclave/auto or conclave/<blueprint>).
	named    []string
	virtual  string
	estimate int
}

// pass is an admitted request's hold on its key: its limiter's slot, until it is settled.
type pass struct {
	k       *Keys
	key     keys.Key
	limiter ratelimit.Limiter
	id      string
}

// admit decides whether a keyed request may go on: the key is usable, may call what the request asks
// for, has budget left in its period and room in its limits. It returns the request's pass, the
// globs selection keeps to (nil: every model), or the failure that refuses it.
func (k *Keys) admit(ctx context.Context, a ask) (*pass, []string, *messages.Failure) {
	key, ok := keys.CallerOf(ctx)
	if !ok || key.ID != a.keyID {
		var err error
		if key, err = k.store.Get(ctx, a.keyID); err == nil {
			err = key.Usable(k.Now())
		}
		if err != nil {
			f := &messages.Failure{Code: string(resilience.KeyRevoked), Message: "the API key cannot be used: " + err.Error()}
			k.metrics.KeyRequest(a.keyID, resilience.StatusOf(resilience.KeyRevoked), 0)
			return nil, nil, f
		}
	}
	p, globs, f := k.judge(ctx, key, a)
	if f != nil {
		k.metrics.KeyRequest(key.Name, resilience.StatusOf(resilience.Kind(f.Code)), 0)
	}
	return p, globs, f
}

func (k *Keys) judge(ctx context.Context, key keys.Key, a ask) (*pass, []string, *messages.Failure) {
	var globs []string
	if bad := notAllowed(key, a.named); len(bad) > 0 {
		return nil, nil, &messages.Failure{Code: string(resilience.ModelNotAllowed), Message: "the API key may not call the models the request names",
			Details: bad}
	} else if len(a.named) == 0 && !key.Allows(a.virtual) {
		// A Conclave model the key's globs do not name runs over the models they do name.
		globs = key.Models
		if !slices.ContainsFunc(k.catalog.Load().All(), func(m catalog.Model) bool { return keys.Matches(globs, m.ID) }) {
			return nil, nil, &messages.Failure{Code: string(resilience.ModelNotAllowed), Message: "the API key allows no model that " + a.virtual + " could ask",
				Details: []*messages.Problem{{Field: "model", Message: a.virtual + " is not among the key's models: " + problems.Clip(strings.Join(key.Models, ", "), 256)}}}
		}
	}
	now := k.Now()
	if key.OverBudget(now) {
		f := &messages.Failure{Code: string(resilience.BudgetExceeded),
			Message: fmt.Sprintf("the API key has spent its budget of $%s for this period", *key.Budget)}
		if end := key.Period.End(key.CreatedAt, now); !end.IsZero() {
			f.RetryAfterSeconds = math.Ceil(end.Sub(now).Seconds())
		}
		return nil, nil, f
	}
	p := &pass{k: k, key: key, id: a.id, limiter: k.limiter(key)}
	if p.limiter == nil {
		return p, globs, nil
	}
	d, err := p.limiter.Reserve(ctx, a.id, a.estimate)
	switch {
	case errors.Is(err, ratelimit.ErrTooLarge):
		return nil, nil, &messages.Failure{Code: string(resilience.KeyRateLimited),
			Message: fmt.Sprintf("the request needs about %d tokens, more than the API key's %d tokens per minute", a.estimate, key.TPM)}
	case err != nil: // the limiter could not count: the request goes, as a provider's call does then
		k.log.Warn("an API key's limits could not be counted", zap.String("event", "key_limiter_failed"), zap.String("key_id", key.ID), zap.Error(err))
		p.limiter = nil
	case !d.Allowed:
		return nil, nil, &messages.Failure{Code: string(resilience.KeyRateLimited),
			Message:           "the API key's limit of " + limitName(d.Reason, key) + " is reached",
			RetryAfterSeconds: max(1, math.Ceil(d.RetryAfter.Seconds()))}
	}
	return p, globs, nil
}

// notAllowed lists the named models a key may not call.
func notAllowed(key keys.Key, named []string) []*messages.Problem {
	var bad []*messages.Problem
	for _, m := range named {
		if !key.Allows(m) {
			bad = append(bad, &messages.Problem{Field: "model", Message: problems.Clip(m, 128) + " is not among the key's models: " +
				problems.Clip(strings.Join(key.Models, ", "), 256)})
		}
	}
	return bad
}

func limitName(reason string, key keys.Key) string {
	switch reason {
	case ratelimit.ReasonTokens:
		return fmt.Sprintf("%d tokens per minute", key.TPM)
	case ratelimit.ReasonConcurrency:
		return fmt.Sprintf("%d requests at once", key.MaxConcurrency)
	}
	return fmt.Sprintf("%d requests per minute", key.RPM)
}

// settle ends an admitted request: its limiter's slot is freed with the tokens it used, and its cost
// (every call's, the arbiter's included) is charged to the key before the answer goes out, so that
// the key's next request, on any controller, sees it.
func (p *pass) settle(exec *messages.Execution) {
	ctx, cancel := context.WithTimeout(context.Background(), ChargeTimeout)
	defer cancel()
	k, now := p.k, p.k.Now()
	if p.limiter != nil {
		used := int(exec.GetUsage().GetInputTokens() + exec.GetUsage().GetOutputTokens())
		if _, err := p.limiter.Release(ctx, p.id, used); err != nil {
			k.log.Warn("an API key's limiter did not take a release", zap.String("event", "key_limiter_failed"), zap.String("key_id", p.key.ID), zap.Error(err))
		}
	}
	cost := money.USD(exec.CostNanos)
	if err := k.store.Charge(ctx, p.key.ID, p.key.Period.Start(p.key.CreatedAt, now), cost, now); err != nil {
		k.log.Error("a request's cost was not charged to its API key", zap.String("event", "key_charge_failed"), zap.String("key_id", p.key.ID),
			zap.String("request_id", p.id), zap.Stringer("cost", cost), zap.Error(err))
	}
	status := int(exec.StatusCode)
	if status == 0 {
		status = http.StatusOK
	}
	k.metrics.KeyRequest(p.key.Name, status, cost)
}
