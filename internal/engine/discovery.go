package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/fnv1a"
	"go.uber.org/zap"
)

// ListTimeout bounds one reading of a provider's model list.
const ListTimeout = 30 * time.Second

// maxLoggedModels bounds the model ids one discovery event names; the counts are always whole.
const maxLoggedModels = 50

// Discover reads a provider's model list once and makes the pool match it: listed models join with the
// prior, models it no longer lists leave. A failed reading changes nothing.
func (e *Engine) Discover(ctx context.Context, provider string) (catalog.Change, error) {
	ch, err := e.discover(ctx, provider, 0)
	if err != nil {
		e.log.Warn("provider model discovery failed", zap.String("event", "discovery_failed"), zap.String("provider", provider), zap.Error(err))
	}
	return ch, err
}

// discover is Discover without the failure's log line (the discovery loop bounds those); after is the
// number of readings that failed before this one, logged with its success.
func (e *Engine) discover(ctx context.Context, provider string, after int) (catalog.Change, error) {
	u := e.upstream(provider)
	if u == nil {
		return catalog.Change{}, fmt.Errorf("%s is not a configured provider", provider)
	}
	lister, ok := u.Backend.(providers.Lister)
	if !ok {
		return catalog.Change{}, fmt.Errorf("%s cannot list its models", provider)
	}
	ctx, cancel := context.WithTimeout(ctx, ListTimeout)
	defer cancel()
	listing, err := lister.ListModels(ctx, u.BaseURL, u.Key())
	if err != nil {
		return catalog.Change{}, err
	}
	var ch catalog.Change
	// A listing of models none of which answers a chat (an embeddings provider's) is a reading like
	// any other: nothing joins or leaves, since its embeddings models are the configuration's. Only a
	// listing of no model at all is taken for a broken one.
	if len(listing.Models) > 0 || len(listing.Rejected) == 0 {
		if ch, err = e.reconcile(provider, listing.Models); err != nil {
			return catalog.Change{}, err
		}
	}
	e.log.Info("provider models discovered", zap.String("event", "discovery"), zap.String("provider", provider),
		zap.Int("listed", len(listing.Models)), zap.Any("rejected", listing.Rejected),
		zap.Int("joined_count", len(ch.Joined)), zap.Strings("joined", head(ch.Joined)),
		zap.Int("left_count", len(ch.Left)), zap.Strings("left", head(ch.Left)),
		zap.Int("models", e.catalog.Load().ByProvider()[provider]), zap.Int("failed_before", after))
	return ch, nil
}

// reconcile applies a listing to the catalog and the arm board, one listing at a time.
func (e *Engine) reconcile(provider string, listed []catalog.Model) (catalog.Change, error) {
	e.discoverMu.Lock()
	defer e.discoverMu.Unlock()
	for i, m := range listed { // a model the catalog knows costs what the catalog says
		listed[i] = catalog.PricedBy(e.known, m)
	}
	current := e.catalog.Load()
	next, ch, err := catalog.Reconcile(current, provider, listed)
	if err != nil {
		return ch, err
	}
	if next != current {
		e.catalog.Store(next)
		e.deps.Dir.Arms.SetModels(next.All())
	}
	return ch, nil
}

// DiscoveryRetry is the wait after a reading of a provider's model list fails: it doubles with each
// failure in a row, up to DiscoveryRetrySteps times itself (1 s to 60 s), so that an upstream started
// after Conclave, or down for a while, has its models in the pool soon after it answers, not an
// interval later; the interval applies again from the first success.
const (
	DiscoveryRetry      = time.Second
	DiscoveryRetrySteps = 60
)

// discoveryLogEvery bounds the failure lines of an upstream that stays down: one per step of the
// backoff while it grows, then one every this many failures (ten minutes at 60 s).
const discoveryLogEvery = 10

// discoveryWait is the wait after failures readings in a row failed (failures >= 1): the project's
// backoff from base (base × 2^(failures-1), plus jitter up to base/2 so that controllers do not ask
// together), at most DiscoveryRetrySteps × base and never more than the interval. step is the same
// wait without its jitter: the step of the backoff it is on.
func discoveryWait(base, interval time.Duration, failures int, rng *rand.Rand) (wait, step time.Duration) {
	ceiling := min(DiscoveryRetrySteps*base, interval)
	return min(resilience.Backoff(base, failures-1, rng), ceiling), min(base<<min(failures-1, 20), ceiling)
}

// discoverEvery reads a provider's model list at start and then every interval until ctx ends; a
// reading that fails is tried again sooner (discoveryWait). Meanwhile the pool keeps what it had: the
// models the configuration lists serve from the start.
func (e *Engine) discoverEvery(ctx context.Context, provider string, interval time.Duration) {
	rng := e.deps.Random(uint64(fnv1a.Offset.AddString("discovery/" + provider)))
	failures, last := 0, time.Duration(0)
	for {
		wait := interval
		ch, err := e.discover(ctx, provider, failures)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			var step time.Duration
			wait, step = discoveryWait(e.discoveryRetry, interval, failures, rng)
			// A new step of the backoff is logged; once it stops growing, one failure in ten.
			if step != last || failures%discoveryLogEvery == 0 {
				last = step
				e.log.Warn("provider model discovery failed", zap.String("event", "discovery_failed"), zap.String("provider", provider),
					zap.Int("failures", failures), zap.Float64("retry_in_seconds", wait.Seconds()), zap.Error(err))
			}
		case failures > 0:
			e.log.Info("provider model discovery recovered", zap.String("event", "discovery_recovered"), zap.String("provider", provider),
				zap.Int("failures", failures), zap.Int("joined_count", len(ch.Joined)), zap.Int("models", e.catalog.Load().ByProvider()[provider]))
			failures, last = 0, 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (e *Engine) upstream(name string) *upstream {
	for i := range e.upstreams {
		if e.upstreams[i].Name == name {
			return &e.upstreams[i]
		}
	}
	return nil
}

func head(ids []string) []string { return ids[:min(len(ids), maxLoggedModels)] }
