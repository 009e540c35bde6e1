package engine

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"go.uber.org/zap"
)

// CreateTeam makes a team.
func (k *Keys) CreateTeam(ctx context.Context, c keys.Changes) (keys.Team, error) {
	id, err := keys.NewTeamID(rand.Reader)
	if err != nil {
		return keys.Team{}, err
	}
	now := k.Now().Truncate(time.Microsecond) // as PostgreSQL keeps it: periods count from it
	team := c.ApplyTeam(keys.Team{ID: id, CreatedAt: now, Allowance: keys.Allowance{PeriodOrigin: now}}, now)
	team.Spend.PeriodStart = now
	if err := k.teams.CreateTeam(ctx, team); err != nil {
		return keys.Team{}, err
	}
	k.teamsOf.Put(team)
	k.log.Info("team created", zap.String("event", "team_created"), zap.String("team_id", id), zap.String("name", team.Name))
	return team, nil
}

// Teams returns every team.
func (k *Keys) Teams(ctx context.Context) ([]keys.Team, error) {
	_ = k.sync(ctx) // a store that is away answers with why
	return k.teams.Teams(ctx)
}

// GetTeam returns a team as the store has it now.
func (k *Keys) GetTeam(ctx context.Context, id string) (keys.Team, error) {
	_ = k.sync(ctx)
	return k.teams.Team(ctx, id)
}

// UpdateTeam changes a team; every controller hears of it, as of a key's change.
func (k *Keys) UpdateTeam(ctx context.Context, id string, c keys.Changes) (keys.Team, error) {
	team, err := k.teams.UpdateTeam(ctx, id, c, k.Now())
	if err == nil {
		k.changedTeam(team)
		k.log.Info("team updated", zap.String("event", "team_updated"), zap.String("team_id", id), zap.String("name", team.Name))
	}
	return team, err
}

// DeleteTeam deletes a team no unrevoked key belongs to (else a *keys.TeamInUseError).
func (k *Keys) DeleteTeam(ctx context.Context, id string) (keys.Team, error) {
	team, err := k.teams.DeleteTeam(ctx, id)
	if err == nil {
		k.dropLimiters(id)
		k.teamsOf.Forget(id)
		if k.changed != nil {
			k.changed(id)
		}
		k.log.Info("team deleted", zap.String("event", "team_deleted"), zap.String("team_id", id), zap.String("name", team.Name))
	}
	return team, err
}

// changedTeam keeps a team this controller changed, and tells the others.
func (k *Keys) changedTeam(team keys.Team) {
	k.teamsOf.Put(team)
	if k.changed != nil {
		k.changed(team.ID)
	}
}

// refreshTeams reads every team again, so that a controller that missed a word sees the change.
func (k *Keys) refreshTeams(ctx context.Context) error { return k.teamsOf.Refresh(ctx) }
