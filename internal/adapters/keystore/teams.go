package keystore

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
)

// TeamStore keeps teams. Implementations are safe for concurrent use. Unknown ids are
// keys.ErrUnknownTeam.
type TeamStore interface {
	CreateTeam(ctx context.Context, t keys.Team) error
	Team(ctx context.Context, id string) (keys.Team, error)
	// Teams returns every team, oldest first.
	Teams(ctx context.Context) ([]keys.Team, error)
	// UpdateTeam makes changes to a team at now. A change of budget period starts its spend afresh.
	UpdateTeam(ctx context.Context, id string, c keys.Changes, now time.Time) (keys.Team, error)
	// DeleteTeam deletes a team no unrevoked key belongs to (else a *keys.TeamInUseError) and returns
	// it as it was; its revoked keys leave it.
	DeleteTeam(ctx context.Context, id string) (keys.Team, error)
	// TeamPeriodSpend reads what a team spent in the budget period that began at start.
	TeamPeriodSpend(ctx context.Context, id string, start time.Time) (money.USD, error)
}

// teams are the memory store's teams.
type teams struct {
	mu   sync.Mutex
	byID map[string]*keys.Team
}

// CreateTeam implements TeamStore.
func (m *Memory) CreateTeam(_ context.Context, t keys.Team) error {
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	m.teams.byID[t.ID] = &t
	return nil
}

// Team implements TeamStore.
func (m *Memory) Team(_ context.Context, id string) (keys.Team, error) {
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	if t, ok := m.teams.byID[id]; ok {
		return cloneTeam(*t), nil
	}
	return keys.Team{}, keys.ErrUnknownTeam
}

// Teams implements TeamStore.
func (m *Memory) Teams(_ context.Context) ([]keys.Team, error) {
	m.teams.mu.Lock()
	out := make([]keys.Team, 0, len(m.teams.byID))
	for _, t := range m.teams.byID {
		out = append(out, cloneTeam(*t))
	}
	m.teams.mu.Unlock()
	slices.SortFunc(out, func(a, b keys.Team) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// UpdateTeam implements TeamStore.
func (m *Memory) UpdateTeam(_ context.Context, id string, c keys.Changes, now time.Time) (keys.Team, error) {
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	t, ok := m.teams.byID[id]
	if !ok {
		return keys.Team{}, keys.ErrUnknownTeam
	}
	changed := c.ApplyTeam(*t, now)
	if changed.Period != t.Period {
		changed.PeriodOrigin, changed.Spend.PeriodStart, changed.Spend.Period = now, time.Time{}, 0
	}
	*t = changed
	return cloneTeam(*t), nil
}

// DeleteTeam implements TeamStore.
func (m *Memory) DeleteTeam(_ context.Context, id string) (keys.Team, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	t, ok := m.teams.byID[id]
	if !ok {
		return keys.Team{}, keys.ErrUnknownTeam
	}
	var inUse []string
	for _, k := range m.byID {
		if k.TeamID == id && k.RevokedAt == nil {
			inUse = append(inUse, k.ID)
		}
	}
	if len(inUse) > 0 {
		slices.Sort(inUse)
		return keys.Team{}, &keys.TeamInUseError{Keys: inUse}
	}
	for _, k := range m.byID {
		if k.TeamID == id {
			k.TeamID = ""
		}
	}
	delete(m.teams.byID, id)
	return cloneTeam(*t), nil
}

// TeamPeriodSpend implements TeamStore.
func (m *Memory) TeamPeriodSpend(_ context.Context, id string, start time.Time) (money.USD, error) {
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	t, ok := m.teams.byID[id]
	if !ok {
		return 0, keys.ErrUnknownTeam
	}
	if t.Spend.PeriodStart.Equal(start) {
		return t.Spend.Period, nil
	}
	return 0, nil
}

// ChargeTeam adds amount to a team's spend in the budget period that began at periodStart, as Charge
// does a key's.
func (m *Memory) ChargeTeam(id string, periodStart time.Time, amount money.USD) error {
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	t, ok := m.teams.byID[id]
	if !ok {
		return keys.ErrUnknownTeam
	}
	charge(&t.Spend, periodStart, amount)
	return nil
}

// hasTeam reports whether a team exists.
func (m *Memory) hasTeam(id string) bool {
	m.teams.mu.Lock()
	defer m.teams.mu.Unlock()
	_, ok := m.teams.byID[id]
	return ok
}

// charge adds amount to a spend in the budget period that began at periodStart: a later period than
// the one counted starts afresh; an earlier one counts only in the total.
func charge(s *keys.Spend, periodStart time.Time, amount money.USD) {
	switch {
	case s.PeriodStart.Equal(periodStart):
		s.Period += amount
	case s.PeriodStart.Before(periodStart):
		s.PeriodStart, s.Period = periodStart, amount
	}
	s.Total += amount
}

func cloneTeam(t keys.Team) keys.Team {
	t.Models = slices.Clone(t.Models)
	t.BudgetAlerts = slices.Clone(t.BudgetAlerts)
	t.Metadata = slices.Clone(t.Metadata)
	return t
}

// TeamCache keeps every team in memory, in front of a store: a request's team is read from memory, so
// that the database is no gate on traffic. Teams are few: Refresh reads them all. A change reaches it
// by Put (this controller's), Forget (another's word through Redis) or the next Refresh.
type TeamCache struct {
	store TeamStore
	mu    sync.RWMutex
	byID  map[string]keys.Team
}

// NewTeamCache returns an empty cache over a store.
func NewTeamCache(s TeamStore) *TeamCache { return &TeamCache{store: s, byID: map[string]keys.Team{}} }

// Get returns a team: from memory when kept, else from the store (and kept).
func (c *TeamCache) Get(ctx context.Context, id string) (keys.Team, error) {
	c.mu.RLock()
	t, ok := c.byID[id]
	c.mu.RUnlock()
	if ok {
		return t, nil
	}
	t, err := c.store.Team(ctx, id)
	if err == nil {
		c.Put(t)
	}
	return t, err
}

// Cached returns a team from memory only.
func (c *TeamCache) Cached(id string) (keys.Team, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.byID[id]
	return t, ok
}

// Put keeps a team as it is now.
func (c *TeamCache) Put(t keys.Team) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID[t.ID] = t
}

// Forget drops a team changed or deleted elsewhere: it is read again when next asked for.
func (c *TeamCache) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id)
}

// Refresh reads every team, with its spend, and keeps what it read: a team deleted elsewhere leaves.
func (c *TeamCache) Refresh(ctx context.Context) error {
	list, err := c.store.Teams(ctx)
	if err != nil {
		return err
	}
	fresh := make(map[string]keys.Team, len(list))
	for _, t := range list {
		fresh[t.ID] = t
	}
	c.mu.Lock()
	c.byID = fresh
	c.mu.Unlock()
	return nil
}
