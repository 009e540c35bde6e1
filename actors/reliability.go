package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/core/accuracy"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// ReliabilityName is the reliability estimator's actor name under the bandit supervisor.
const ReliabilityName = "reliability"

// ReliabilityActor owns the reliability estimator: it takes every reliability-weighted vote in the
// order votes arrive, refits when a category is due, and publishes the estimates on the arm board, where
// selection and the next votes read them. A restarted estimator starts empty: selection then reads
// the arms, which learned the same credits, until new votes come.
type ReliabilityActor struct {
	deps *Deps
	est  *accuracy.Estimator
}

// NewReliabilityActor returns the producer of the reliability actor.
func NewReliabilityActor(deps *Deps) actor.Producer {
	return func() actor.Actor { return &ReliabilityActor{deps: deps} }
}

// Receive implements actor.Actor.
func (a *ReliabilityActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.est = accuracy.New(a.deps.Reliability)
	case *messages.Votes:
		// Counted even when Observe fails or the vote is dropped: a vote the estimator lost must not keep
		// Settle waiting.
		defer a.deps.Dir.Arms.VoteObserved()
		if why := CheckVotes(m, a.deps.catalog(), a.deps.Dir.Arms); why != "" {
			a.deps.Drop(KindReliability, why, m)
			return
		}
		votes := make([]accuracy.Vote, len(m.Models))
		cat := a.deps.catalog()
		for i, model := range m.Models {
			votes[i] = accuracy.Vote{Model: model, Group: int(m.Groups[i]), Later: len(m.Later) > 0 && m.Later[i]}
			if cat != nil {
				info, _ := cat.Get(model)
				votes[i].Family = info.Family
			}
		}
		var refit bool
		if len(m.Right) > 0 {
			refit = a.est.Confirm(m.Category, m.RequestId, votes, m.Right)
		} else {
			refit = a.est.ObserveRequest(m.Category, m.RequestId, votes)
		}
		a.deps.Dir.Arms.SetEstimates(a.est.View())
		if ce := a.deps.Log.Check(zap.DebugLevel, "reliability observed"); ce != nil {
			ce.Write(zap.String("event", "reliability_observed"), zap.String("category", m.Category), zap.Int("votes", len(votes)), zap.Bool("truth", len(m.Right) > 0), zap.Bool("refit", refit))
		}
	default:
		a.deps.unknown(KindReliability, m)
	}
}
