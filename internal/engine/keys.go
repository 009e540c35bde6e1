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
	teams   keystore.TeamStore
	teamsOf *keystore.TeamCache
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
	mem := keystore.NewMemory()
	var s interface {
		keystore.Store
		keystore.TeamStore
	} = mem
	if pg, ok := e.store.(interface{ Pool() *pgxpool.Pool }); ok {
		s, mem = keystore.NewPostgres(pg.Pool()), nil
	}
	limits := e.deps.Limiters
	if limits == nil {
		limits = func(_ string, l ratelimit.Limits) ratelimit.Limiter { return ratelimit.NewLocal(l, e.deps.Clock, 0) }
	}
	e.keys = &Keys{store: s, cache: keystore.NewCache(s), teams: s, teamsOf: keystore.NewTeamCache(s), memory: mem, records: e.store, sync: e.Sync, limits: limits, clock: e.deps.Clock, catalog: e.catalog,
		metrics: e.deps.Metrics, log: e.log, limiters: map[string]keyLimiter{}}
}

// charge adds a settled call to its key's spend, and its team's, in the embedded default's memory.
func (k *Keys) charge(c *messages.Call) {
	ctx := context.Background()
	at := c.GetSettledAt().AsTime()
	_ = k.memory.Charge(ctx, c.KeyId, time.UnixMicro(c.PeriodStart).UTC(), money.USD(c.CostNanos), at)
	if key, ok := k.cache.Cached(c.KeyId); ok { // the cache shows the spend as it grows
		if fresh, err := k.memory.Get(ctx, key.ID); err == nil {
			k.cache.Put(fresh)
		}
	}
	if c.TeamId == "" {
		return
	}
	_ = k.memory.ChargeTeam(c.TeamId, time.UnixMicro(c.TeamPeriodStart).UTC(), money.USD(c.CostNanos))
	if fresh, err := k.memory.Team(ctx, c.TeamId); err == nil {
		k.teamsOf.Put(fresh)
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
	key := c.Apply(keys.Key{ID: id, CreatedAt: now, Allowance: keys.Allowance{PeriodOrigin: now}}, now)
	key.Spend.PeriodStart = now
	if err := k.store.Create(ctx, key, keys.Hash(secret)); err != nil {
		return keys.Key{}, "", err
	}
	k.log.Info("API key created", zap.String("event", "key_created"), zap.String("key_id", id), zap.String("name", key.Name),
		zap.String("team_id", key.TeamID))
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
		k.dropLimiters(id)
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

// dropLimiters forgets the limiters of a key or team that is gone.
func (k *Keys) dropLimiters(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name := range k.limiters {
		if strings.HasPrefix(name, id+"/") {
			delete(k.limiters, name)
		}
	}
}

// Forget drops a key or team another controller changed: it is read again when next asked for.
func (k *Keys) Forget(id string) {
	if keys.IsTeamID(id) {
		k.teamsOf.Forget(id)
		return
	}
	k.cache.Forget(id)
}

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

// Team implements books.Account: a team, as this controller has it.
func (k *Keys) Team(id string) (keys.Team, bool) {
	if t, ok := k.teamsOf.Cached(id); ok {
		return t, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), ChargeTimeout)
	defer cancel()
	t, err := k.teamsOf.Get(ctx, id)
	return t, err == nil
}

// Spent implements books.Account: what a key or team spent in the period that began at start, from
// the store; while the store is away, from what this controller has of it.
func (k *Keys) Spent(ctx context.Context, id string, a keys.Allowance, start time.Time) (money.USD, error) {
	_ = k.sync(ctx)
	read := k.store.PeriodSpend
	if keys.IsTeamID(id) {
		read = k.teams.TeamPeriodSpend
	}
	spent, err := read(ctx, id, start)
	if err == nil {
		return spent, nil
	}
	if a.Spend.PeriodStart.Equal(start) {
		k.log.Warn("a spend is read from memory: the store is unavailable", zap.String("event", "key_spend_cached"),
			zap.String("id", id), zap.Error(err))
		return a.Spend.Period, nil
	}
	return 0, err
}

// TokensPerMinute implements books.Account: the limiter of a key's or team's tokens per minute, each
// call held for its worst case and settled at what it used.
func (k *Keys) TokensPerMinute(id string, a keys.Allowance) ratelimit.Limiter {
	return k.limiter(id, "tpm", ratelimit.Limits{TokensPerMinute: a.TPM})
}

// Usage is how much of a key's or team's limits is in use now (zero without limits).
func (k *Keys) Usage(ctx context.Context, id string, a keys.Allowance) (ratelimit.Usage, error) {
	var out ratelimit.Usage
	if l := k.requests(id, a); l != nil {
		u, err := l.Usage(ctx)
		if err != nil {
			return out, err
		}
		out = u
	}
	if l := k.TokensPerMinute(id, a); l != nil {
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

// requests is the limiter of a key's or team's requests per minute and requests at once, taken by each
// request.
func (k *Keys) requests(id string, a keys.Allowance) ratelimit.Limiter {
	return k.limiter(id, "requests", ratelimit.Limits{RequestsPerMinute: a.RPM, Concurrency: a.MaxConcurrency})
}

// limiter is one of a key's or team's limiters, made on first use and again when its limits change;
// nil for limits all zero. It counts where the providers' limiters count: in Redis when controllers
// share one.
func (k *Keys) limiter(id, kind string, limits ratelimit.Limits) ratelimit.Limiter {
	if limits == (ratelimit.Limits{}) {
		return nil
	}
	name := id + "/" + kind
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.limiters[name]; ok && l.limits == limits {
		return l.limiter
	}
	l := keyLimiter{limits: limits, limiter: k.limits("key:"+id+":"+kind, limits)}
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

// pass is an admitted request's hold on its key and its key's team: its slot among their requests, until
// it ends.
type pass struct {
	k        *Keys
	key      keys.Key
	teamID   string
	limiters []ratelimit.Limiter
	id       string
}

// admit decides whether a keyed request may go on: the key is usable, it and its team may call what
// the request asks for, neither has spent its budget, and both have room in their requests per minute
// and at once. It returns the request's pass, the globs selection keeps to (nil: every model), or the
// failure that refuses it. Each call the request makes is then held against the key's and the team's
// budgets and tokens per minute by the books, before it is sent.
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
	var team *keys.Team
	if key.TeamID != "" {
		t, err := k.teamsOf.Get(ctx, key.TeamID)
		if err != nil {
			return nil, nil, &messages.Failure{Code: string(resilience.KeyRevoked), Message: "the API key's team cannot be read: " + err.Error()}
		}
		team = &t
	}
	holders := keys.Holders(key, team)
	globs, f := k.models(holders, a)
	if f != nil {
		return nil, nil, f
	}
	now := k.Now()
	for _, h := range holders {
		if h.Budget == nil {
			continue
		}
		if bad := k.unpriced(a.named); len(bad) > 0 {
			return nil, nil, &messages.Failure{Code: string(resilience.ModelNotPriced),
				Message: "the " + h.What + " has a budget, and the request names models without a price: set their price_in and price_out " +
					"(providers.<provider>.models), or pricing.default_price_in and pricing.default_price_out", Details: bad}
		}
		if h.OverBudget(now) {
			return nil, nil, BudgetFailure(h.What, h.Allowance, now)
		}
	}
	p := &pass{k: k, key: key, id: a.id}
	if team != nil {
		p.teamID = team.ID
	}
	for _, h := range holders {
		l := k.requests(h.ID, h.Allowance)
		if l == nil {
			continue
		}
		d, err := l.Reserve(ctx, a.id, 0)
		switch {
		case err != nil: // the limiter could not count: the request goes, as a provider's call does then
			k.log.Warn("an API key's or team's limits could not be counted", zap.String("event", "key_limiter_failed"), zap.String("key_id", key.ID),
				zap.String("id", h.ID), zap.Error(err))
		case !d.Allowed:
			p.release()
			return nil, nil, &messages.Failure{Code: string(resilience.KeyRateLimited),
				Message:           "the " + h.What + "'s limit of " + limitName(d.Reason, h.Allowance) + " is reached",
				RetryAfterSeconds: max(1, math.Ceil(d.RetryAfter.Seconds()))}
		default:
			p.limiters = append(p.limiters, l)
		}
	}
	return p, globs, nil
}

// models decides what a request may call under its key's and its team's model globs: the models it
// names must be allowed by both; a Conclave model (conclave/auto, a blueprint) allowed by both runs
// over every model, else over those both allow. It returns the globs selection keeps to (nil: every
// model).
func (k *Keys) models(holders []keys.Holder, a ask) ([]string, *messages.Failure) {
	for _, h := range holders {
		if bad := notAllowed(h.What, h.Allowance, a.named); len(bad) > 0 {
			return nil, &messages.Failure{Code: string(resilience.ModelNotAllowed), Message: "the " + h.What + " may not call the models the request names",
				Details: bad}
		}
	}
	if len(a.named) > 0 {
		return nil, nil
	}
	var limiting []keys.Holder // those whose globs do not name the Conclave model asked for
	for _, h := range holders {
		if !h.Allows(a.virtual) {
			limiting = append(limiting, h)
		}
	}
	var globs []string
	switch len(limiting) {
	case 0:
		return nil, nil
	case 1:
		globs = limiting[0].Models
	default: // both limit: the ids of the models both allow
		for _, m := range k.catalog.Load().All() {
			if limiting[0].Allows(m.ID) && limiting[1].Allows(m.ID) {
				globs = append(globs, m.ID)
			}
		}
	}
	if !slices.ContainsFunc(k.catalog.Load().All(), func(m catalog.Model) bool { return keys.Matches(globs, m.ID) }) {
		var names []string
		for _, h := range limiting {
			names = append(names, "the "+h.What+"'s: "+strings.Join(h.Models, ", "))
		}
		return nil, &messages.Failure{Code: string(resilience.ModelNotAllowed), Message: "the API key allows no model that " + a.virtual + " could ask",
			Details: []*messages.Problem{{Field: "model", Message: a.virtual + " is not among the allowed models: " + problems.Clip(strings.Join(names, "; "), 256)}}}
	}
	return globs, nil
}

// BudgetFailure is the refusal for the spent budget of a key (what: "API key") or of its team
// ("team"). It names when the budget starts again but asks for no retry: clients that wait out a
// Retry-After would wait up to a month.
func BudgetFailure(what string, a keys.Allowance, now time.Time) *messages.Failure {
	f := &messages.Failure{Code: string(resilience.BudgetExceeded),
		Message: fmt.Sprintf("the %s has spent its budget of $%s for this period ($%s)", what, *a.Budget, a.Spent(now))}
	if end := a.PeriodEnd(now); !end.IsZero() {
		f.Message += "; it starts again at " + end.UTC().Format(time.RFC3339)
		f.Details = []*messages.Problem{{Field: "budget_period", Message: "resets at " + end.UTC().Format(time.RFC3339)}}
	} else {
		f.Message += "; it is the " + what + "'s budget for its whole life"
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

// notAllowed lists the named models a key's or team's globs do not allow.
func notAllowed(what string, a keys.Allowance, named []string) []*messages.Problem {
	var bad []*messages.Problem
	for _, m := range named {
		if !a.Allows(m) {
			bad = append(bad, &messages.Problem{Field: "model", Message: problems.Clip(m, 128) + " is not among the " + what + "'s models: " +
				problems.Clip(strings.Join(a.Models, ", "), 256)})
		}
	}
	return bad
}

func limitName(reason string, a keys.Allowance) string {
	switch reason {
	case ratelimit.ReasonTokens:
		return fmt.Sprintf("%d tokens per minute", a.TPM)
	case ratelimit.ReasonConcurrency:
		return fmt.Sprintf("%d requests at once", a.MaxConcurrency)
	}
	return fmt.Sprintf("%d requests per minute", a.RPM)
}

// release frees the request's slots among its key's and team's requests.
func (p *pass) release() {
	if len(p.limiters) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ChargeTimeout)
	defer cancel()
	for _, l := range p.limiters {
		if _, err := l.Release(ctx, p.id, 0); err != nil {
			p.k.log.Warn("an API key's or team's limiter did not take a release", zap.String("event", "key_limiter_failed"), zap.String("key_id", p.key.ID),
				zap.Error(err))
		}
	}
}

// settle ends an admitted request: its slots among the key's and team's requests are freed, and the
// request is counted in the key's metrics with what it cost.
func (p *pass) settle(exec *messages.Execution) {
	p.release()
	status := int(exec.StatusCode)
	if status == 0 {
		status = http.StatusOK
	}
	p.k.metrics.KeyRequest(p.key.Name, status, money.USD(exec.CostNanos))
}
