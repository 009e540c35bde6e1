package keystore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
)

// Cache keeps the keys a controller has seen, in front of a store: a request's key is read from
// memory, so that the database is no gate on traffic (an outage leaves the keys seen usable) and no
// request pays a read. A change reaches the cache by Forget (this controller's admin API, or another
// controller's word through Redis, within a second or two), and at the latest at the next Refresh,
// which reads every key changed since the last one, and the spend of the keys kept.
type Cache struct {
	store Store
	mu    sync.RWMutex
	byID  map[string]keys.Key
	// byHash maps a secret's hash to its key's id; unknown are hashes the store did not know, until when
	// they are asked again (a bounded number: a stream of bad secrets costs one read each, then none).
	byHash  map[string]string
	unknown map[string]time.Time
	// since is the newest change read; stale are keys forgotten, to be read again at the next refresh.
	since time.Time
	stale map[string]bool
}

// Bounds of the cache of unknown secrets.
const (
	maxUnknown = 10000
	unknownFor = 10 * time.Second
)

// RefreshEvery is how often a controller reads the keys changed since its last reading: without Redis,
// a change reaches every controller within this much (plus the reading's own time).
const RefreshEvery = 30 * time.Second

// NewCache returns an empty cache over a store.
func NewCache(s Store) *Cache {
	return &Cache{store: s, byID: map[string]keys.Key{}, byHash: map[string]string{}, unknown: map[string]time.Time{}, stale: map[string]bool{}}
}

// Store is the store behind the cache, for the admin API's changes.
func (c *Cache) Store() Store { return c.store }

// ByHash returns the key of a secret's hash: from memory when seen, else from the store (and kept).
func (c *Cache) ByHash(ctx context.Context, hash []byte) (keys.Key, error) {
	h := string(hash)
	c.mu.RLock()
	id, ok := c.byHash[h]
	k, found := c.byID[id]
	until, unknown := c.unknown[h]
	c.mu.RUnlock()
	if ok && found {
		return k, nil
	}
	if unknown && time.Now().Before(until) {
		return keys.Key{}, keys.ErrUnknown
	}
	k, err := c.store.ByHash(ctx, hash)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, keys.ErrUnknown):
		if len(c.unknown) >= maxUnknown {
			clear(c.unknown)
		}
		c.unknown[h] = time.Now().Add(unknownFor)
	case err == nil:
		c.byHash[h], c.byID[k.ID] = k.ID, k
	}
	return k, err
}

// Get returns a key: from memory when seen, else from the store.
func (c *Cache) Get(ctx context.Context, id string) (keys.Key, error) {
	if k, ok := c.Cached(id); ok {
		return k, nil
	}
	return c.store.Get(ctx, id)
}

// Cached returns a key from memory only.
func (c *Cache) Cached(id string) (keys.Key, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, ok := c.byID[id]
	return k, ok
}

// Put keeps a key as it is now (this controller just changed it).
func (c *Cache) Put(k keys.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[k.ID]; ok {
		c.byID[k.ID] = k
	}
}

// Forget marks a key changed elsewhere: it is read again at once (in the background of the caller's
// choosing, by Refresh) and, until then, from the store when asked for by id. A revoked key must not
// serve one more request, so it leaves memory now.
func (c *Cache) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[id]; ok {
		delete(c.byID, id)
		c.stale[id] = true
	}
}

// Refresh reads the keys changed since the last reading, those forgotten, and the spend of every key
// kept, and keeps what it read. It fails as the store does, and leaves the cache as it was then.
func (c *Cache) Refresh(ctx context.Context) error {
	c.mu.RLock()
	since := c.since
	ids := make([]string, 0, len(c.byID)+len(c.stale))
	for id := range c.byID {
		ids = append(ids, id)
	}
	for id := range c.stale {
		ids = append(ids, id)
	}
	c.mu.RUnlock()
	changed, err := c.store.Changed(ctx, since, ids)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range changed {
		if k.UpdatedAt.After(c.since) {
			c.since = k.UpdatedAt
		}
		_, kept := c.byID[k.ID]
		if kept || c.stale[k.ID] {
			c.byID[k.ID] = k
			delete(c.stale, k.ID)
		}
	}
	return nil
}

// Run refreshes the cache every interval until ctx ends; done hears how each reading went.
func (c *Cache) Run(ctx context.Context, every time.Duration, done func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Refresh(ctx); ctx.Err() == nil && done != nil {
				done(err)
			}
		}
	}
}
