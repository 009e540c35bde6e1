// Package supervisors owns the shape of the actor tree: which supervisor parents which actors, with
// which directives and restart limits. Supervisors hold no business logic; the two that spawn children
// on demand (the arms' writer on the first reward, coordinators per request) only route the message that
// creates the child, after the actors package's checks say it is one a child may be made for.
package supervisors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"go.uber.org/zap"
)

// Restart limits: a child that fails more than MaxRestarts times within RestartWindow is stopped.
const (
	MaxRestarts   = 10
	RestartWindow = 10 * time.Second
)

// restartOrStop is the directive of the long-lived actors. A crash restarts the actor (its state comes
// back from its published snapshot) without touching its siblings, as protoactor's one-for-one
// strategy does. A child that crashes more than MaxRestarts times within RestartWindow is stopped for
// good, and, unlike with protoactor's strategy, not in silence: an actor_stopped line, and the
// directory's registry of stopped actors, which readiness, the provider and worker views, selection
// and the metrics read. Only a crash comes here, never a supervisor's own stopping, so a shutdown
// records nothing. It reports whether it stopped the child.
func restartOrStop(deps *actors.Deps, system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics,
	reason any) bool {
	rs.Fail()
	if rs.NumberOfFailures(RestartWindow) <= MaxRestarts {
		system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.RestartDirective})
		supervisor.RestartChildren(child)
		return false
	}
	rs.Reset()
	stopped := deps.Dir.MarkStopped(child.Id, fmt.Sprint(reason), time.Now())
	deps.Log.Error("actor stopped after repeated crashes", zap.String("event", "actor_stopped"), zap.String("actor", child.Id),
		zap.String("kind", stopped.Kind), zap.String("reason", stopped.Reason), zap.Int("max_restarts", MaxRestarts),
		zap.Duration("window", RestartWindow))
	system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.StopDirective})
	supervisor.StopChildren(child)
	return true
}

// Child is an actor a supervisor starts with itself.
type Child struct {
	Name  string
	Props *actor.Props
}

// static supervises a fixed set of children, restarting any that crashes (restartOrStop).
type static struct {
	deps     *actors.Deps
	children []Child
}

// Static returns the props of a supervisor of a fixed set of children (the fleet, the providers, the
// root itself).
func Static(deps *actors.Deps, children []Child) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &static{deps: deps, children: children} }, deps.Observed()...)
}

func (s *static) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		for _, c := range s.children {
			if _, err := ctx.SpawnNamed(c.Props, c.Name); err != nil {
				// A name taken twice in the tree's own layout: a bug at start-up, which no message causes.
				panic("supervisor: spawn " + c.Name + ": " + err.Error())
			}
		}
	case *Ping:
		ctx.Respond(&Pong{})
	default:
		if !actors.Lifecycle(m) {
			s.deps.Drop(actors.KindSupervisor, actors.DropUnknownMessage, m)
		}
	}
}

// HandleFailure implements actor.SupervisorStrategy for the children.
func (s *static) HandleFailure(system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, _ any) {
	restartOrStop(s.deps, system, supervisor, child, rs, reason)
}

// Ping asks a supervisor whether it has started its children; it answers Pong.
type Ping struct{}

// Pong answers Ping.
type Pong struct{}

// Router names the child a message belongs to and how to make that child if it does not exist yet, or
// says why the message is dropped (one of actors' Drop reasons): no child is made for it.
type Router func(ctx actor.Context, msg any) (name string, props func() *actor.Props, drop string)

// onDemand spawns a child on the first message routed to it and forwards that message and later ones.
type onDemand struct {
	deps     *actors.Deps
	kind     string // the actor kind its drops are counted under
	route    Router
	dropped  func(msg any)
	children map[string]*actor.PID
	// stopped names the children stopped for good: they are not made again, so what is recorded as
	// stopped stays stopped, and their messages are dropped.
	stopped  map[string]bool
	stopping bool
}

// OnDemand returns the props of a supervisor that creates children as messages for them arrive (the
// bandit's arms' writer and its reliability estimator), restarting a child that crashes
// (restartOrStop). Its drops count under kind, and dropped, when set, hears of each.
func OnDemand(deps *actors.Deps, kind string, route Router, dropped func(msg any)) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &onDemand{deps: deps, kind: kind, route: route, dropped: dropped, children: map[string]*actor.PID{},
			stopped: map[string]bool{}}
	}, deps.Observed()...)
}

func (s *onDemand) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Ping:
		ctx.Respond(&Pong{})
	case *actor.Stopping:
		// A stopping actor still drains its mailbox while its children stop; a child spawned now would
		// never be told to stop, and this supervisor would wait for it forever.
		s.stopping = true
	case *actor.Terminated:
		for name, pid := range s.children {
			if pid.Equal(m.Who) {
				delete(s.children, name)
			}
		}
	default:
		if actors.Lifecycle(m) {
			return
		}
		if pid := s.child(ctx, m); pid != nil {
			ctx.Forward(pid)
		}
	}
}

// HandleFailure implements actor.SupervisorStrategy for the children.
func (s *onDemand) HandleFailure(system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, _ any) {
	if restartOrStop(s.deps, system, supervisor, child, rs, reason) {
		for name, pid := range s.children {
			if pid.Equal(child) {
				s.stopped[name] = true
			}
		}
	}
}

// child returns the child a message goes to, spawning it on its first message; nil when the message
// is dropped or the supervisor is stopping.
func (s *onDemand) child(ctx actor.Context, msg any) *actor.PID {
	name, props, why := s.route(ctx, msg)
	switch {
	case why != "":
	case s.stopping:
		return nil
	case s.stopped[name]:
		why = actors.DropActorStopped
	}
	pid, exists := s.children[name]
	if why == "" && !exists {
		var err error
		if pid, err = ctx.SpawnNamed(props(), name); err != nil {
			why = actors.DropSpawnFailed
		} else {
			s.children[name] = pid
		}
	}
	if why != "" {
		s.deps.Drop(s.kind, why, msg)
		if s.dropped != nil {
			s.dropped(msg)
		}
		return nil
	}
	return pid
}
