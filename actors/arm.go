package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// ArmsActor owns the learning of every (model, category) arm: their Beta distributions and EWMA
// recency. It is the board's one writer: it applies each request's rewards, one message per request,
// in order, and publishes every arm's new state on the arm board, from which it also resumes after a
// restart, so a crash loses no learning. An actor per arm cost two deliveries per model of every
// request, for state nobody but the arm's writer touches.
type ArmsActor struct {
	deps *Deps
}

// ArmsName is the actor name of the arms' writer under the bandit supervisor.
const ArmsName = "arms"

// NewArmsActor returns the producer of the arms' writer.
func NewArmsActor(deps *Deps) actor.Producer {
	return func() actor.Actor { return &ArmsActor{deps: deps} }
}

// Receive implements actor.Actor.
func (a *ArmsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.Rewards:
		for _, r := range m.Rewards {
			a.apply(r)
		}
	case *messages.Reward:
		a.apply(m)
	default:
		a.deps.unknown(KindArm, m)
	}
}

// apply teaches one arm its reward. A reward for a model outside the catalog or a category outside
// the board is dropped: the board has no arm for it.
func (a *ArmsActor) apply(r *messages.Reward) {
	if why := checkArmReward(r, a.deps.catalog(), a.deps.Dir.Arms); why != "" {
		a.deps.Drop(KindArm, why, r)
		return
	}
	before := a.deps.Dir.Arms.Arm(r.Category, r.Model)
	after := before.Update(r.Reward, a.deps.Learning)
	a.deps.Dir.Arms.Publish(after)
	if ce := a.deps.Log.Check(zap.DebugLevel, "bandit arm updated"); ce != nil {
		ce.Write(zap.String("event", "bandit_update"), zap.String("request_id", r.RequestId),
			zap.String("model", r.Model), zap.String("category", r.Category), zap.Float64("reward", r.Reward), zap.String("reason", r.Reason),
			zap.Float64("alpha_before", before.Alpha), zap.Float64("beta_before", before.Beta),
			zap.Float64("alpha", after.Alpha), zap.Float64("beta", after.Beta), zap.Float64("recency", after.Recency))
	}
}

// rewards sends rewards to their (model, category) arms and to their models' arms across all
// categories, in one message to the bandit supervisor.
func rewards(ctx sender, banditPID *actor.PID, rs ...*messages.Reward) {
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

// sender sends a message: an actor's context, the root, or a coordinator's host.
type sender interface {
	Send(pid *actor.PID, message any)
}

// Reward sends a reward from outside the actors (another controller's, read from the store).
func Reward(ctx actor.SenderContext, bandit *actor.PID, r *messages.Reward) { rewards(ctx, bandit, r) }
