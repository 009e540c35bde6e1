// Package keystore keeps API keys: Memory in the process for the embedded default, Postgres in schema
// auth for controllers that share a database, and Cache, the keys a controller has seen, in front of
// either. A key's secret is kept only as its hash. What a key spent is charged where its calls are
// settled (the journal's statement in PostgreSQL; Memory.Charge on the embedded default) and read here.
package keystore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
)

// ErrUnavailable wraps a failure to reach the store (keys.ErrUnavailable, which the doors know).
var ErrUnavailable = keys.ErrUnavailable

// Store keeps keys. Implementations are safe for concurrent use. Unknown ids and hashes are
// keys.ErrUnknown.
type Store interface {
	// Create stores a new key with its secret's hash.
	Create(ctx context.Context, k keys.Key, hash []byte) error
	Get(ctx context.Context, id string) (keys.Key, error)
	// ByHash finds the key of a secret's hash.
	ByHash(ctx context.Context, hash []byte) (keys.Key, error)
	// List returns every key, revoked ones included, oldest first.
	List(ctx context.Context) ([]keys.Key, error)
	// Update makes changes to a key at now. A change of budget period starts the period's spend afresh.
	Update(ctx context.Context, id string, c keys.Changes, now time.Time) (keys.Key, error)
	// Revoke ends a key at now; revoking it again changes nothing.
	Revoke(ctx context.Context, id string, now time.Time) (keys.Key, error)
	// Changed returns the keys changed after since (revoked ones included) and the keys of ids, with
	// their spend as it stands.
	Changed(ctx context.Context, since time.Time, ids []string) ([]keys.Key, error)
	// PeriodSpend reads what a key spent in the budget period that began at start.
	PeriodSpend(ctx context.Context, id string, start time.Time) (money.USD, error)
}

// Memory keeps keys in the process.
type Memory struct {
	mu     sync.Mutex
	byID   map[string]*keys.Key
	byHash map[string]string
	teams  teams // locked after mu when both are
}

// NewMemory returns an empty memory store.
func NewMemory() *Memory {
	return &Memory{byID: make(map[string]*keys.Key), byHash: make(map[string]string), teams: teams{byID: map[string]*keys.Team{}}}
}

// Create implements Store.
func (m *Memory) Create(_ context.Context, k keys.Key, hash []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, taken := m.byID[k.ID]; taken {
		return errors.New("a key with this id exists")
	}
	if _, taken := m.byHash[string(hash)]; taken {
		return errors.New("a key with this secret exists")
	}
	if k.TeamID != "" && !m.hasTeam(k.TeamID) {
		return keys.ErrUnknownTeam
	}
	m.byID[k.ID], m.byHash[string(hash)] = &k, k.ID
	return nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (keys.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.byID[id]; ok {
		return clone(*k), nil
	}
	return keys.Key{}, keys.ErrUnknown
}

// ByHash implements Store.
func (m *Memory) ByHash(ctx context.Context, hash []byte) (keys.Key, error) {
	m.mu.Lock()
	id, ok := m.byHash[string(hash)]
	m.mu.Unlock()
	if !ok {
		return keys.Key{}, keys.ErrUnknown
	}
	return m.Get(ctx, id)
}

// List implements Store.
func (m *Memory) List(_ context.Context) ([]keys.Key, error) {
	m.mu.Lock()
	out := make([]keys.Key, 0, len(m.byID))
	for _, k := range m.byID {
		out = append(out, clone(*k))
	}
	m.mu.Unlock()
	slices.SortFunc(out, byCreation)
	return out, nil
}

// Update implements Store.
func (m *Memory) Update(_ context.Context, id string, c keys.Changes, now time.Time) (keys.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[id]
	if !ok {
		return keys.Key{}, keys.ErrUnknown
	}
	changed := c.Apply(*k, now)
	if changed.TeamID != "" && changed.TeamID != k.TeamID && !m.hasTeam(changed.TeamID) {
		return keys.Key{}, keys.ErrUnknownTeam
	}
	if changed.Period != k.Period {
		changed.PeriodOrigin, changed.Spend.PeriodStart, changed.Spend.Period = now, time.Time{}, 0
	}
	*k = changed
	return clone(*k), nil
}

// Revoke implements Store.
func (m *Memory) Revoke(_ context.Context, id string, now time.Time) (keys.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[id]
	if !ok {
		return keys.Key{}, keys.ErrUnknown
	}
	if k.RevokedAt == nil {
		k.RevokedAt, k.UpdatedAt = &now, now
	}
	return clone(*k), nil
}

// Changed implements Store.
func (m *Memory) Changed(_ context.Context, since time.Time, ids []string) ([]keys.Key, error) {
	m.mu.Lock()
	var out []keys.Key
	for _, k := range m.byID {
		if k.UpdatedAt.After(since) || slices.Contains(ids, k.ID) {
			out = append(out, clone(*k))
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, byCreation)
	return out, nil
}

// PeriodSpend implements Store.
func (m *Memory) PeriodSpend(_ context.Context, id string, start time.Time) (money.USD, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[id]
	if !ok {
		return 0, keys.ErrUnknown
	}
	if k.Spend.PeriodStart.Equal(start) {
		return k.Spend.Period, nil
	}
	return 0, nil
}

// Charge adds amount to a key's spend in the budget period that began at periodStart (a later period
// than the one counted starts afresh; an earlier one counts only in the total) and marks the key used
// at at: the embedded default's settlement of a call.
func (m *Memory) Charge(_ context.Context, id string, periodStart time.Time, amount money.USD, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[id]
	if !ok {
		return keys.ErrUnknown
	}
	charge(&k.Spend, periodStart, amount)
	if k.LastUsedAt == nil || k.LastUsedAt.Before(at) {
		k.LastUsedAt = &at
	}
	return nil
}

// clone copies what a key shares with the store, so callers cannot change the stored one.
func clone(k keys.Key) keys.Key {
	k.Models = slices.Clone(k.Models)
	k.BudgetAlerts = slices.Clone(k.BudgetAlerts)
	k.Metadata = slices.Clone(k.Metadata)
	return k
}

func byCreation(a, b keys.Key) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	if a.ID < b.ID {
		return -1
	}
	return 1
}
