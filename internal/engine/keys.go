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

// Keys are the engine's API keys: the admin API's operations on them, the admission of every request
// made with one (its model list and request limits), and what the books need of a key (Account). Keys
// are read through a cache of those seen: a request's key costs no read of the database, and an
// outage of it stops no key already seen. Charges are not made here: every call is charged to its key
// as its settlement is written, by the journal (internal/adapters/books, the recorder).
type Keys struct {
	store   keystore.Store
	cache   *keystore.Cache
	memory  *keystore.Memory // the embedded default's store, charged by settlements; nil with PostgreSQL
	records store.Store
	// sync waits for the records and charges of the requests answered before (Engine.Sync): a key's
	// spend read after an answer counts it.
	sync    func(context.Context) error
	limits  ratelimit.Factory
	clock   clock.Clock
	catalog *catalog.Live
	metrics *metrics.Metrics
	log     *zap.Logger
	// changed tells the other controllers that a key changed (through Redis); nil without it.
	changed func(id string)
	// defaultPrice prices a model nobody priced (pricing.default_price_*); nil without one.
	defaultPrice *money.Rates

	mu       sync.Mutex
	limiters map[string]keyLimiter // by key id and kind
}

// keyLimiter is a key's limiter and the limits it was made for.
type keyLimiter struct {
	limits  ratelimit.Limits
	limiter ratelimit.Limiter
}

// Keys returns the engine's API keys.
func (e *Engine) Keys() *Keys { return e.keys }

func (e *Engine) openKeys() {
	var s keystore.Store
	mem := keystore.NewMemory()
	s = mem
	if pg, ok := e.store.(interface{ Pool() *pgxpool.Pool }); ok {
		s, mem = keystore.NewPostgres(pg.Pool()), nil
	}
	limits := e.deps.Limiters
	if limits == nil {
		limits = func(_ string, l ratelimit.Limits) ratelimit.Limiter { return ratelimit.NewLocal(l, e.deps.Clock, 0) }
	}
	e.keys = &Keys{store: s, cache: keystore.NewCache(s), memory: mem, records: e.store, sync: e.Sync, limits: limits, clock: e.deps.Clock, catalog: e.catalog,
		metrics: e.deps.Metrics, log: e.log, limiters: map[string]keyLimiter{}}
}

// charge adds a settled call to its key's spend in the embedded default's memory.
func (k *Keys) charge(c *messages.Call) {
	at := c.GetSettledAt().AsTime()
	_ = k.memory.Charge(context.Background(), c.KeyId, time.UnixMicro(c.PeriodStart).UTC(), money.USD(c.CostNanos), at)
	if key, ok := k.cache.Cached(c.KeyId); ok { // the cache shows the spend as it grows
		if fresh, err := k.memory.Get(context.Background(), key.ID); err == nil {
			k.cache.Put(fresh)
		}
	}
}

// ChargeTimeout bounds a key's reading or release that runs after the caller may have gone.
const ChargeTimeout = 5 * time.Second

// Now is the time keys are judged at.
func (k *Keys) Now() time.Time { return k.clock.Now().UTC() }

// Authenticate returns the key of a secret, or why it may not be used (keys.ErrUnknown, ErrRevoked,
// ErrExpired, or an error wrapping keystore.ErrUnavailable).
func (k *Keys) Authenticate(ctx context.Context, secret string) (keys.Key, error) {
	key, err := k.cache.ByHash(ctx, keys.Hash(secret))
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
	key := c.Apply(keys.Key{ID: id, CreatedAt: now, PeriodOrigin: now}, now)
	key.Spend.PeriodStart = now
	if err := k.store.Create(ctx, key, keys.Hash(secret)); err != nil {
		return keys.Key{}, "", err
	}
	k.log.Info("API key created", zap.String("event", "key_created"), zap.String("key_id", id), zap.String("name", key.Name))
	return key, secret, nil
}

// List returns every key, revoked ones included.
func (k *Keys) List(ctx context.Context) ([]keys.Key, error) {
	_ = k.sync(ctx) // a store that is away answers with why
	return k.store.List(ctx)
}

// Get returns a key as the store has it now.
func (k *Keys) Get(ctx context.Context, id string) (keys.Key, error) {
	_ = k.sync(ctx)
	return k.store.Get(ctx, id)
}

// Update changes a key; every controller hears of it (see changedKey).
func (k *Keys) Update(ctx context.Context, id string, c keys.Changes) (keys.Key, error) {
	key, err := k.store.Update(ctx, id, c, k.Now())
	if err == nil {
		k.changedKey(key)
		k.log.Info("API key updated", zap.String("event", "key_updated"), zap.String("key_id", id), zap.String("name", key.Name))
	}
	return key, err
}

// Revoke ends a key at once: its next request gets 401 here, and on every other controller as soon as
// it hears (through Redis within a second or two; without it, within keystore.RefreshEvery).
func (k *Keys) Revoke(ctx context.Context, id string) (keys.Key, error) {
	key, err := k.store.Revoke(ctx, id, k.Now())
	if err == nil {
		k.mu.Lock()
		for name := range k.limiters {
			if strings.HasPrefix(name, id+"/") {
				delete(k.limiters, name)
			}
		}
		k.mu.Unlock()
		k.changedKey(key)
		k.log.Info("API key revoked", zap.String("event", "key_revoked"), zap.String("key_id", id), zap.String("name", key.Name))
	}
	return key, err
}

// changedKey keeps a key this controller changed, and tells the others.
func (k *Keys) changedKey(key keys.Key) {
	k.cache.Put(key)
	if k.changed != nil {
		k.changed(key.ID)
	}
}

// Forget drops a key another controller changed: it is read again when next asked for.
func (k *Keys) Forget(id string) { k.cache.Forget(id) }

// Key implements books.Account: the key of a call, as this controller has it.
func (k *Keys) Key(id string) (keys.Key, bool) {
	key, ok := k.cache.Cached(id)
	if !ok {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), ChargeTimeout)
		defer cancel()
		if key, err = k.cache.Get(ctx, id); err != nil {
			return keys.Key{}, false
		}
	}
	return key, key.Usable(k.Now()) == nil
}

// Spent implements books.Account: what a key spent in the period that began at start, from the store;
// while the store is away, from what this controller has of it.
func (k *Keys) Spent(ctx context.Context, key keys.Key, start time.Time) (money.USD, error) {
	_ = k.sync(ctx)
	spent, err := k.store.PeriodSpend(ctx, key.ID, start)
	if err == nil {
		return spent, nil
	}
	if key.Spend.PeriodStart.Equal(start) {
		k.log.Warn("a key's spend is read from memory: the store is unavailable", zap.String("event", "key_spend_cached"),
			zap.String("key_id", key.ID), zap.Error(err))
		return key.Spend.Period, nil
	}
	return 0, err
}

// TokensPerMinute implements books.Account: the limiter of a key's tokens per minute, each call held
// for its worst case and settled at what it used.
func (k *Keys) TokensPerMinute(key keys.Key) ratelimit.Limiter {
	return k.limiter(key, "tpm", ratelimit.Limits{TokensPerMinute: key.TPM})
}

// Usage is how much of a key's limits is in use now (zero for a key without limits).
func (k *Keys) Usage(ctx context.Context, key keys.Key) (ratelimit.Usage, error) {
	var out ratelimit.Usage
	if l := k.requests(key); l != nil {
		u, err := l.Usage(ctx)
		if err != nil {
			return out, err
		}
		out = u
	}
	if l := k.TokensPerMinute(key); l != nil {
		u, err := l.Usage(ctx)
		if err != nil {
			return out, err
		}
		out.Tokens, out.TokensUse = u.Tokens, u.TokensUse
	}
	return out, nil
}

// Spend sums what a key spent, from the records.
func (k *Keys) Spend(ctx context.Context, q store.SpendQuery) ([]store.SpendGroup, error) {
	s, ok := k.records.(store.Spender)
	if !ok {
		return nil, errors.New("this record store cannot sum spend")
	}
	_ = k.sync(ctx)
	return s.Spend(ctx, q)
}

// requests is the limiter of a key's requests per minute and requests at once, taken by each request.
func (k *Keys) requests(key keys.Key) ratelimit.Limiter {
	return k.limiter(key, "requests", ratelimit.Limits{RequestsPerMinute: key.RPM, Concurrency: key.MaxConcurrency})
}

// limiter is one of a key's limiters, made on first use and again when its limits change; nil for
// limits all zero. It counts where the providers' limiters count: in Redis when controllers share one.
func (k *Keys) limiter(key keys.Key, kind string, limits ratelimit.Limits) ratelimit.Limiter {
	if limits == (ratelimit.Limits{}) {
		return nil
	}
	name := key.ID + "/" + kind
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.limiters[name]; ok && l.limits == limits {
		return l.limiter
	}
	l := keyLimiter{limits: limits, limiter: k.limits("key:"+key.ID+":"+kind, limits)}
	k.limiters[name] = l
	return l.limiter
}

// ask is what admission needs of a request.
type ask struct {
	id, keyID string
	// named are the models the request names; virtual is the Conclave model it asks for otherwise
	// (conclave/auto or conclave/<blueprint>).
	named   []string
	virtual string
}

// pass is an admitted request's hold on its key: its slot among the key's requests, until it ends.
type pass struct {
	k       *Keys
	key     keys.Key
	limiter ratelimit.Limiter
	id      string
}

// admit decides whether a keyed request may go on: the key is usable, may call what the request asks
// for, has not spent its budget and has room in its requests per minute and at once. It returns the
// request's pass, the globs selection keeps to (nil: every model), or the failure that refuses it.
// Each call the request makes is then held against the key's budget and tokens per minute by the
// books, before it is sent.
func (k *Keys) admit(ctx context.Context, a ask) (*pass, []string, *messages.Failure) {
	key, ok := keys.CallerOf(ctx)
	if !ok || key.ID != a.keyID {
		var err error
		if key, err = k.cache.Get(ctx, a.keyID); err == nil {
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
	if key.Budget != nil {
		if bad := k.unpriced(a.named); len(bad) > 0 {
			return nil, nil, &messages.Failure{Code: string(resilience.ModelNotPriced),
				Message: "the API key has a budget, and the request names models without a price: set their price_in and price_out " +
					"(providers.<provider>.models), or pricing.default_price_in and pricing.default_price_out", Details: bad}
		}
	}
	now := k.Now()
	if key.OverBudget(now) {
		return nil, nil, BudgetFailure(key, now)
	}
	p := &pass{k: k, key: key, id: a.id, limiter: k.requests(key)}
	if p.limiter == nil {
		return p, globs, nil
	}
	d, err := p.limiter.Reserve(ctx, a.id, 0)
	switch {
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

// BudgetFailure is a key's refusal for its spent budget. It names when the budget starts again but
// asks for no retry: clients that wait out a Retry-After would wait up to a month.
func BudgetFailure(key keys.Key, now time.Time) *messages.Failure {
	f := &messages.Failure{Code: string(resilience.BudgetExceeded),
		Message: fmt.Sprintf("the API key has spent its budget of $%s for this period ($%s)", *key.Budget, key.Spent(now))}
	if end := key.PeriodEnd(now); !end.IsZero() {
		f.Message += "; it starts again at " + end.UTC().Format(time.RFC3339)
		f.Details = []*messages.Problem{{Field: "budget_period", Message: "resets at " + end.UTC().Format(time.RFC3339)}}
	} else {
		f.Message += "; it is the key's budget for its whole life"
	}
	return f
}

// unpriced lists the named models without a price, when no default prices them.
func (k *Keys) unpriced(named []string) []*messages.Problem {
	if k.defaultPrice != nil {
		return nil
	}
	var bad []*messages.Problem
	cat := k.catalog.Load()
	for _, id := range named {
		if m, ok := cat.Get(id); ok && m.Unpriced {
			bad = append(bad, &messages.Problem{Field: "model", Message: problems.Clip(id, 128) + " has no price (providers." + m.Provider +
				".models[].price_in and price_out, or pricing.default_price_in and default_price_out)"})
		}
	}
	return bad
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

// settle ends an admitted request: its slot among the key's requests is freed, and the request is
// counted in the key's metrics with what it cost.
func (p *pass) settle(exec *messages.Execution) {
	if p.limiter != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ChargeTimeout)
		defer cancel()
		if _, err := p.limiter.Release(ctx, p.id, 0); err != nil {
			p.k.log.Warn("an API key's limiter did not take a release", zap.String("event", "key_limiter_failed"), zap.String("key_id", p.key.ID), zap.Error(err))
		}
	}
	status := int(exec.StatusCode)
	if status == 0 {
		status = http.StatusOK
	}
	p.k.metrics.KeyRequest(p.key.Name, status, money.USD(exec.CostNanos))
}
