package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/jackc/pgx/v5"
)

// teamColumns read a team with its spend, as keyColumns do a key (migration 012).
const teamColumns = `id, name, budget_nanos, budget_period, rpm, tpm, max_concurrency, models, budget_alerts, metadata, created_at, updated_at,
	period_origin, coalesce(l.period_start, period_origin), coalesce(l.spent_nanos, 0), coalesce(s.total, 0)`

const teamFrom = ` FROM auth.teams t
	LEFT JOIN LATERAL (SELECT period_start, spent_nanos FROM books.team_periods p WHERE p.team_id = t.id
		ORDER BY period_start DESC LIMIT 1) l ON true
	LEFT JOIN LATERAL (SELECT sum(spent_nanos)::bigint AS total FROM books.team_periods p WHERE p.team_id = t.id) s ON true`

func scanTeam(row pgx.Row) (keys.Team, error) {
	var t keys.Team
	var period string
	err := row.Scan(&t.ID, &t.Name, &t.Budget, &period, &t.RPM, &t.TPM, &t.MaxConcurrency, &t.Models, &t.BudgetAlerts, &t.Metadata, &t.CreatedAt,
		&t.UpdatedAt, &t.PeriodOrigin, &t.Spend.PeriodStart, &t.Spend.Period, &t.Spend.Total)
	if errors.Is(err, pgx.ErrNoRows) {
		return keys.Team{}, keys.ErrUnknownTeam
	}
	if err != nil {
		return keys.Team{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	t.Period, _ = keys.ParsePeriod(period)
	for _, at := range []*time.Time{&t.CreatedAt, &t.UpdatedAt, &t.PeriodOrigin, &t.Spend.PeriodStart} {
		*at = at.UTC()
	}
	return t, nil
}

// CreateTeam implements TeamStore.
func (p *Postgres) CreateTeam(ctx context.Context, t keys.Team) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO auth.teams (id, name, budget_nanos, budget_period, rpm, tpm, max_concurrency, models, budget_alerts,
	metadata, created_at, updated_at, period_origin) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11)`,
		t.ID, t.Name, t.Budget, t.Period.String(), t.RPM, t.TPM, t.MaxConcurrency, nonNil(t.Models), t.BudgetAlerts, string(t.Metadata), t.CreatedAt)
	return writeError("create team", err)
}

// Team implements TeamStore.
func (p *Postgres) Team(ctx context.Context, id string) (keys.Team, error) {
	return scanTeam(p.pool.QueryRow(ctx, `SELECT `+teamColumns+teamFrom+` WHERE id = $1`, id))
}

// Teams implements TeamStore.
func (p *Postgres) Teams(ctx context.Context) ([]keys.Team, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+teamColumns+teamFrom+` ORDER BY created_at, id`)
	return collect(rows, err, "list teams", scanTeam)
}

// UpdateTeam implements TeamStore, under the team's row lock as Update is a key's.
func (p *Postgres) UpdateTeam(ctx context.Context, id string, c keys.Changes, now time.Time) (keys.Team, error) {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		t, err := scanTeam(tx.QueryRow(ctx, `SELECT `+teamColumns+teamFrom+` WHERE id = $1 FOR UPDATE OF t`, id))
		if err != nil {
			return err
		}
		out := c.ApplyTeam(t, now)
		_, err = tx.Exec(ctx, `UPDATE auth.teams SET name = $2, budget_nanos = $3, budget_period = $4, rpm = $5, tpm = $6, max_concurrency = $7,
	models = $8, budget_alerts = $9, metadata = $10, updated_at = $11, period_origin = CASE WHEN budget_period = $4 THEN period_origin ELSE $11 END
	WHERE id = $1`, id, out.Name, out.Budget, out.Period.String(), out.RPM, out.TPM, out.MaxConcurrency, nonNil(out.Models), out.BudgetAlerts,
			string(out.Metadata), out.UpdatedAt)
		return err
	})
	if errors.Is(err, keys.ErrUnknownTeam) || errors.Is(err, ErrUnavailable) {
		return keys.Team{}, err
	}
	if err := writeError("update team", err); err != nil {
		return keys.Team{}, err
	}
	return p.Team(ctx, id)
}

// DeleteTeam implements TeamStore: the team's row is locked, its keys read, and it is deleted only when
// none is usable, in one transaction (a key moved to it meanwhile waits for the lock, then finds no team).
func (p *Postgres) DeleteTeam(ctx context.Context, id string) (keys.Team, error) {
	var out keys.Team
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		t, err := scanTeam(tx.QueryRow(ctx, `SELECT `+teamColumns+teamFrom+` WHERE id = $1 FOR UPDATE OF t`, id))
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id FROM auth.keys WHERE team_id = $1 AND revoked_at IS NULL ORDER BY id`, id)
		if err != nil {
			return err
		}
		inUse, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(inUse) > 0 {
			return &keys.TeamInUseError{Keys: inUse}
		}
		out = t
		_, err = tx.Exec(ctx, `DELETE FROM auth.teams WHERE id = $1`, id)
		return err
	})
	var inUse *keys.TeamInUseError
	if errors.Is(err, keys.ErrUnknownTeam) || errors.Is(err, ErrUnavailable) || errors.As(err, &inUse) {
		return keys.Team{}, err
	}
	return out, writeError("delete team", err)
}

// TeamPeriodSpend implements TeamStore.
func (p *Postgres) TeamPeriodSpend(ctx context.Context, id string, start time.Time) (money.USD, error) {
	var spent money.USD
	err := p.pool.QueryRow(ctx, `SELECT coalesce(sum(spent_nanos), 0)::bigint FROM books.team_periods WHERE team_id = $1 AND period_start = $2`,
		id, start).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("%w: read team spend: %v", ErrUnavailable, err)
	}
	return spent, nil
}
