package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/catalog"
	"github.com/conclave-ai/conclave/providers"
	"go.uber.org/zap"
)

// ListTimeout bounds one reading of a provider's model list.
const ListTimeout = 30 * time.Second

// maxLoggedModels bounds the model ids one discovery event names; the counts are always whole.
const maxLoggedModels = 50

// Discover reads a provider's model list once and makes the pool match it: listed models join with the
// prior, models it no longer lists leave. A failed reading changes nothing.
func (e *Engine) Discover(ctx context.Context, provider string) (catalog.Change, error) {
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
	if err == nil {
		var ch catalog.Change
		if ch, err = e.reconcile(provider, listing.Models); err == nil {
			e.log.Info("provider models discovered", zap.String("event", "discovery"), zap.String("provider", provider),
				zap.Int("listed", len(listing.Models)), zap.Any("rejected", listing.Rejected),
				zap.Int("joined_count", len(ch.Joined)), zap.Strings("joined", head(ch.Joined)),
				zap.Int("left_count", len(ch.Left)), zap.Strings("left", head(ch.Left)),
				zap.Int("models", e.catalog.Load().ByProvider()[provider]))
			return ch, nil
		}
	}
	e.log.Warn("provider model discovery failed", zap.String("event", "discovery_failed"), zap.String("provider", provider), zap.Error(err))
	return catalog.Change{}, err
}

// reconcile applies a listing to the catalog and the arm board, one listing at a time.
func (e *Engine) reconcile(provider string, listed []catalog.Model) (catalog.Change, error) {
	e.discoverMu.Lock()
	defer e.discoverMu.Unlock()
	next, ch, err := catalog.Reconcile(e.catalog.Load(), provider, listed)
	if err != nil {
		return ch, err
	}
	if len(ch.Joined)+len(ch.Left) > 0 {
		e.catalog.Store(next)
		e.deps.Dir.Arms.SetModels(next.All())
	}
	return ch, nil
}

// discoverEvery reads a provider's model list at start and then every interval until ctx ends.
func (e *Engine) discoverEvery(ctx context.Context, provider string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		e.Discover(ctx, provider)
		select {
		case <-ctx.Done():
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
