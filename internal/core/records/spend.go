package records

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
)

// ErrUnavailable wraps a failure to reach the store: the record may well exist.
var ErrUnavailable = errors.New("the record store is unavailable")

// SpendQuery asks what a key (or a team's keys) spent between Since (included) and Until (excluded), by model (the
// calls of each, the arbiter's included) or by day (the requests of each, in UTC). PostgreSQL reads
// the books' daily rollups, and so counts every UTC day the window touches whole.
type SpendQuery struct {
	// KeyID, or TeamID when set: whose spend.
	KeyID, TeamID string
	Since, Until  time.Time
	ByDay         bool
}

// SpendGroup is one model's or one day's spend.
type SpendGroup struct {
	Model    string    `json:"model,omitempty"`
	Day      string    `json:"day,omitempty"`
	Requests int64     `json:"requests"`
	CostUSD  money.USD `json:"cost_usd"`
}

// Spender is a store that sums what keys spent.
type Spender interface {
	Spend(ctx context.Context, q SpendQuery) ([]SpendGroup, error)
}

// SpendOf sums the records of a query's key received in its window; ordered by day, or by cost (the
// highest first) then model.
func SpendOf(q SpendQuery, records []*messages.Execution) []SpendGroup {
	groups := map[string]*SpendGroup{}
	add := func(name string, cost int64) {
		g, ok := groups[name]
		if !ok {
			g = &SpendGroup{}
			if q.ByDay {
				g.Day = name
			} else {
				g.Model = name
			}
			groups[name] = g
		}
		g.Requests++
		g.CostUSD += money.USD(cost)
	}
	for _, e := range records {
		at := e.GetReceivedAt().AsTime()
		if (q.TeamID == "" && e.KeyId != q.KeyID) || (q.TeamID != "" && e.TeamId != q.TeamID) || at.Before(q.Since) || !at.Before(q.Until) {
			continue
		}
		if q.ByDay {
			add(at.UTC().Format(time.DateOnly), e.CostNanos)
			continue
		}
		for _, r := range e.Results {
			add(r.Model, r.CostNanos)
		}
		if d := e.GetDecision(); d.GetArbiterCostNanos() > 0 {
			add(d.Arbiter, d.ArbiterCostNanos)
		}
	}
	out := make([]SpendGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b SpendGroup) int {
		if q.ByDay {
			return cmp.Compare(a.Day, b.Day)
		}
		return cmp.Or(cmp.Compare(b.CostUSD, a.CostUSD), cmp.Compare(a.Model, b.Model))
	})
	return out
}
