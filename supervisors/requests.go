package supervisors

import (
	"fmt"
	"net/http"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// requests parents one coordinator per request. It is the supervision strategy of its children itself:
// a coordinator that crashes is stopped, not restarted (its request's state is gone), and its caller is
// answered with a 500 at once instead of waiting for a timeout.
type requests struct {
	deps     *actors.Deps
	inflight map[string]inflight // by coordinator actor id
	stopping bool
}

type inflight struct {
	requestID string
	replyTo   *actor.PID
}

// Requests returns the props of the request supervisor.
func Requests(deps *actors.Deps) *actor.Props {
	return deps.Props(func() actor.Actor { return &requests{deps: deps, inflight: map[string]inflight{}} })
}

func (s *requests) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Ping:
		ctx.Respond(&Pong{})
	case *actor.Stopping:
		s.stopping = true // see onDemand: no new children while the old ones stop
	case *messages.RouteRequest:
		if s.stopping {
			ctx.Respond(&messages.Execution{RequestId: m.RequestId, StatusCode: http.StatusServiceUnavailable,
				Error: &messages.Failure{Code: "shutting_down", Message: "conclave is shutting down"}})
			return
		}
		seq := s.deps.Dir.NextSequence()
		props := s.deps.Props(actors.NewCoordinatorActor(s.deps, m, ctx.Sender(), seq))
		pid, err := ctx.SpawnNamed(props, m.RequestId)
		if err != nil {
			ctx.Respond(&messages.Execution{RequestId: m.RequestId, StatusCode: http.StatusConflict,
				Error: &messages.Failure{Code: "duplicate_request", Message: "a request with this id is in progress"}})
			return
		}
		s.inflight[pid.Id] = inflight{requestID: m.RequestId, replyTo: ctx.Sender()}
	case *actor.Terminated:
		delete(s.inflight, m.Who.Id)
	}
}

// HandleFailure implements actor.SupervisorStrategy for the coordinators.
func (s *requests) HandleFailure(system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	s.deps.Log.Error("coordinator crashed", zap.String("event", "coordinator_crashed"), zap.String("actor", child.Id), zap.Any("reason", reason))
	if f, ok := s.inflight[child.Id]; ok {
		delete(s.inflight, child.Id)
		system.Root.Send(f.replyTo, &messages.Execution{RequestId: f.requestID, StatusCode: http.StatusInternalServerError,
			Error: &messages.Failure{Code: "internal", Message: fmt.Sprintf("internal fault while coordinating the request: %v", reason)}})
	}
	supervisor.StopChildren(child)
}

// Bandit returns the props of the bandit supervisor: an arm actor per (model, category), spawned on its
// first reward.
func Bandit(deps *actors.Deps) *actor.Props {
	return OnDemand(func(_ actor.Context, msg any) (string, func() *actor.Props, bool) {
		r, ok := msg.(*messages.Reward)
		if !ok {
			return "", nil, false
		}
		return actors.ArmName(r.Model, r.Category), func() *actor.Props {
			return deps.Props(actors.NewArmActor(deps, r.Model, r.Category))
		}, true
	}, deps.PropsOptions()...)
}
