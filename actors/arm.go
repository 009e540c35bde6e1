package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// ArmActor owns one (model, category) arm: its Beta distribution and EWMA recency. It applies rewards in
// order and publishes the new state on the arm board. A restarted arm resumes from its last published
// state, so a crash loses no learning.
type ArmActor struct {
	deps     *Deps
	model    string
	category string
	arm      bandit.Arm
}

// NewArmActor returns the producer of an arm actor.
func NewArmActor(deps *Deps, model, category string) actor.Producer {
	return func() actor.Actor { return &ArmActor{deps: deps, model: model, category: category} }
}

// ArmName is the actor name of an arm under the bandit supervisor.
func ArmName(model, category string) string { return category + "|" + model }

// Receive implements actor.Actor.
func (a *ArmActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.arm = a.deps.Dir.Arms.Arm(a.category, a.model)
	case *messages.Reward:
		if why := checkArmReward(m, a.model, a.category); why != "" {
			// Another arm's reward, or no reward at all: applying it would corrupt this arm.
			a.deps.Drop(KindArm, why, m)
			return
		}
		before := a.arm
		a.arm = a.arm.Update(m.Reward, a.deps.Learning)
		a.deps.Dir.Arms.Publish(a.arm)
		if ce := a.deps.Log.Check(zap.DebugLevel, "bandit arm updated"); ce != nil {
			ce.Write(zap.String("event", "bandit_update"), zap.String("request_id", m.RequestId),
				zap.String("model", a.model), zap.String("category", a.category), zap.Float64("reward", m.Reward), zap.String("reason", m.Reason),
				zap.Float64("alpha_before", before.Alpha), zap.Float64("beta_before", before.Beta),
				zap.Float64("alpha", a.arm.Alpha), zap.Float64("beta", a.arm.Beta), zap.Float64("recency", a.arm.Recency))
		}
	default:
		a.deps.unknown(KindArm, m)
	}
}

// rewards sends rewards to their (model, category) arms and to their models' arms across all
// categories, in one message to the bandit supervisor.
func rewards(ctx actor.SenderContext, banditPID *actor.PID, rs ...*messages.Reward) {
	if len(rs) == 0 {
		return
	}
	batch := &messages.Rewards{Rewards: make([]*messages.Reward, 0, 2*len(rs))}
	for _, r := range rs {
		batch.Rewards = append(batch.Rewards, r)
		if r.Category != bandit.AllCategories {
			batch.Rewards = append(batch.Rewards, &messages.Reward{Model: r.Model, Category: bandit.AllCategories, Reward: r.Reward, Reason: r.Reason, RequestId: r.RequestId})
		}
	}
	ctx.Send(banditPID, batch)
}

// Reward sends a reward from outside the actors (another controller's, read from the store).
func Reward(ctx actor.SenderContext, bandit *actor.PID, r *messages.Reward) { rewards(ctx, bandit, r) }
