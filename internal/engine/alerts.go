package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/alerts"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"go.uber.org/zap"
)

// BudgetCheckEvery is how often the keys' spend is held to their budget alerts.
const BudgetCheckEvery = 5 * time.Second

// watchBudgets tells each budget alert once per period: every interval it reads the keys' and teams'
// spend in their periods (as the store has it, a batch of records behind), and a share of a budget reached
// (keys.Allowance.Crossed) is claimed (alerts.Claims: in Redis when the controllers share one, so that one
// of them tells it), logged (budget_alert) and posted to the alerts webhook on a goroutine of its own,
// which tries again while the webhook fails. Nothing here is on a request's way.
func (e *Engine) watchBudgets(ctx context.Context, every time.Duration) {
	var claims alerts.Claims = alerts.NewMemory(e.deps.Clock.Now)
	if e.redis != nil {
		claims = alerts.NewRedis(e.redis, e.cfg.RedisPrefix)
	}
	var hook *alerts.Webhook
	if u := e.cfg.Alerts.WebhookURL; u != "" {
		hook = &alerts.Webhook{URL: u, Secret: e.cfg.Alerts.Secret, Client: &http.Client{}, Attempts: alerts.DefaultAttempts,
			Backoff: alerts.DefaultBackoff, Seed: e.deps.Random(0).Uint64()}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.checkBudgets(ctx, claims, hook)
		}
	}
}

// checkBudgets tells the alerts of the keys' and teams' budgets crossed since the last check.
func (e *Engine) checkBudgets(ctx context.Context, claims alerts.Claims, hook *alerts.Webhook) {
	now := e.keys.Now()
	if list, err := e.keys.store.List(ctx); err == nil { // the store is away: the next check sees what this one missed
		for _, k := range list {
			if k.Usable(now) != nil {
				continue
			}
			for _, share := range k.Crossed(now) {
				e.tellBudgetAlert(ctx, claims, hook, budgetOwner{"key", k.ID, k.Name, k.Allowance}, share, now)
			}
		}
	}
	if list, err := e.keys.teams.Teams(ctx); err == nil {
		for _, t := range list {
			for _, share := range t.Crossed(now) {
				e.tellBudgetAlert(ctx, claims, hook, budgetOwner{"team", t.ID, t.Name, t.Allowance}, share, now)
			}
		}
	}
}

// budgetOwner is a key or a team with a budget.
type budgetOwner struct {
	kind, id, name string // kind: key or team
	keys.Allowance
}

// tellBudgetAlert tells a key's or team's crossing of a share of its budget, once per period.
func (e *Engine) tellBudgetAlert(ctx context.Context, claims alerts.Claims, hook *alerts.Webhook, o budgetOwner, share float64, now time.Time) {
	start, end := o.PeriodStart(now), o.PeriodEnd(now)
	ttl := 400 * 24 * time.Hour // a budget of a whole life: for as long as a key or team is likely to live
	if !end.IsZero() {
		ttl = end.Sub(now) + 24*time.Hour
	}
	name := fmt.Sprintf("%s:%s:%d:%s", o.kind, o.id, start.Unix(), strconv.FormatFloat(share, 'f', -1, 64))
	if ok, err := claims.Claim(ctx, name, ttl); err != nil || !ok {
		return // told already (or, with Redis away, told at the next check)
	}
	a := alerts.Alert{Event: "budget_alert", Threshold: share, SpendUSD: o.Spent(now), BudgetUSD: *o.Budget}
	if o.kind == "team" {
		a.TeamID = o.id
	} else {
		a.KeyID = o.id
	}
	if !end.IsZero() {
		a.PeriodEnd = &end
	}
	e.log.Warn("a budget alert", zap.String("event", "budget_alert"), zap.String(o.kind+"_id", o.id), zap.String(o.kind+"_name", o.name),
		zap.Float64("threshold", share), zap.Stringer("spend_usd", a.SpendUSD), zap.Stringer("budget_usd", a.BudgetUSD), zap.Timep("period_end", a.PeriodEnd))
	if hook == nil {
		return
	}
	body, _ := json.Marshal(a)
	e.background.Go(func() {
		if err := hook.Send(ctx, body); err != nil {
			e.log.Warn("a budget alert did not reach the webhook", zap.String("event", "budget_alert_failed"), zap.String(o.kind+"_id", o.id),
				zap.Float64("threshold", share), zap.Error(err))
		}
	})
}
