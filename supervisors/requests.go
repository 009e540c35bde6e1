package supervisors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// requests parents one coordinator per request. It is the supervision strategy of its children itself:
// a coordinator that crashes is stopped, not restarted (its request's state is gone), and its caller is
// answered with a 500 at once instead of waiting for a timeout. It routes a request's cancellation to
// its coordinator, and a cancellation without a request id to all of them (the shutdown timeout).
type requests struct {
	deps      *actors.Deps
	inflight  map[string]inflight   // by coordinator actor id
	byRequest map[string]*actor.PID // coordinator by request id
	stopping  bool
}

type inflight struct {
	requestID string
	replyTo   *actor.PID
}

// Requests returns the props of the request supervisor.
func Requests(deps *actors.Deps) *actor.Props {
	return deps.Props(func() actor.Actor {
		return &requests{deps: deps, inflight: map[string]inflight{}, byRequest: map[string]*actor.PID{}}
	})
}

func (s *requests) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Ping:
		ctx.Respond(&Pong{})
	case *actor.Stopping:
		s.stopping = true // see onDemand: no new children while the old ones stop
	case *messages.RouteRequest:
		if why := checkRoute(m, ctx.Sender()); why != "" {
			s.deps.Drop(actors.KindRequests, why, m)
			if ctx.Sender() != nil { // nobody else would answer it before its deadline
				ctx.Respond(actors.Refusal(m.GetRequestId(), resilience.MalformedRequest, "the request is malformed ("+why+")"))
			}
			return
		}
		if s.stopping {
			ctx.Respond(actors.Refusal(m.RequestId, resilience.ShuttingDown, "conclave is shutting down"))
			return
		}
		seq := s.deps.Dir.NextSequence()
		props := s.deps.Props(actors.NewCoordinatorActor(s.deps, m, ctx.Sender(), seq))
		pid, err := ctx.SpawnNamed(props, m.RequestId)
		if err != nil {
			ctx.Respond(actors.Duplicate(m.RequestId))
			return
		}
		s.inflight[pid.Id] = inflight{requestID: m.RequestId, replyTo: ctx.Sender()}
		s.byRequest[m.RequestId] = pid
	case *messages.CancelRequest:
		if m.RequestId == "" {
			for _, pid := range s.byRequest {
				ctx.Send(pid, m)
			}
		} else if pid, ok := s.byRequest[m.RequestId]; ok {
			ctx.Send(pid, m)
		}
	case *actor.Terminated:
		if f, ok := s.inflight[m.Who.Id]; ok {
			delete(s.byRequest, f.requestID)
			delete(s.inflight, m.Who.Id)
		}
	default:
		if !actors.Lifecycle(m) {
			s.deps.Drop(actors.KindRequests, actors.DropUnknownMessage, m)
		}
	}
}

// checkRoute says why the supervisor cannot take a request, or "": the answer needs an address, and
// the request's id names its coordinator, a child of the supervisor's, so it must be a name and not a
// path. Everything else about a request is judged at the doors.
func checkRoute(m *messages.RouteRequest, sender *actor.PID) string {
	if sender == nil {
		return actors.DropNoReplyTo
	}
	return actors.CheckRequestName(m.GetRequestId())
}

// HandleFailure implements actor.SupervisorStrategy for the coordinators.
func (s *requests) HandleFailure(system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	s.deps.Log.Error("coordinator crashed", zap.String("event", "coordinator_crashed"), zap.String("actor", child.Id), zap.Any("reason", reason))
	if f, ok := s.inflight[child.Id]; ok {
		delete(s.inflight, child.Id)
		delete(s.byRequest, f.requestID)
		system.Root.Send(f.replyTo, actors.Crashed(f.requestID, reason))
	}
	supervisor.StopChildren(child)
}

// Bandit returns the props of the bandit supervisor: the arms' writer, which takes every reward, and
// the reliability estimator, each spawned on its first message.
func Bandit(deps *actors.Deps) *actor.Props {
	arms := func() *actor.Props { return deps.Props(actors.NewArmsActor(deps)) }
	return OnDemand(deps, actors.KindBandit, func(_ actor.Context, msg any) (string, func() *actor.Props, string) {
		switch m := msg.(type) {
		case *messages.Votes:
			if why := actors.CheckVotes(m, deps.Catalog.Load(), deps.Dir.Arms); why != "" {
				return "", nil, why
			}
			return actors.ReliabilityName, func() *actor.Props { return deps.Props(actors.NewReliabilityActor(deps)) }, ""
		case *messages.Rewards, *messages.Reward:
			return actors.ArmsName, arms, ""
		}
		return "", nil, actors.DropUnknownMessage
	}, func(msg any) {
		if _, ok := msg.(*messages.Votes); ok {
			// Its sender counted it as sent: a vote dropped here must not keep Settle waiting.
			deps.Dir.Arms.VoteObserved()
		}
	})
}
