// Package supervisors owns the shape of the actor tree: which supervisor parents which actors, with
// which directives and restart limits. Supervisors hold no business logic; the two that spawn children
// on demand (arms on their first reward, coordinators per request) only route the message that
// creates the child.
package supervisors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Restart limits: a child that fails more than MaxRestarts times within RestartWindow is stopped.
const (
	MaxRestarts   = 10
	RestartWindow = 10 * time.Second
)

// restart is the directive of the long-lived actors: a crash restarts the actor (its state comes back
// from its published snapshot) without touching its siblings.
func restart() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(MaxRestarts, RestartWindow, func(any) actor.Directive { return actor.RestartDirective })
}

// Child is an actor a supervisor starts with itself.
type Child struct {
	Name  string
	Props *actor.Props
}

// static supervises a fixed set of children, restarting any that crashes.
type static struct {
	children []Child
}

// Static returns the props of a supervisor of a fixed set of children (the fleet, the providers, the
// root itself).
func Static(children []Child) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &static{children: children} }, actor.WithSupervisor(restart()))
}

func (s *static) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		for _, c := range s.children {
			if _, err := ctx.SpawnNamed(c.Props, c.Name); err != nil {
				panic("supervisor: spawn " + c.Name + ": " + err.Error())
			}
		}
	case *Ping:
		ctx.Respond(&Pong{})
	}
}

// Ping asks a supervisor whether it has started its children; it answers Pong.
type Ping struct{}

// Pong answers Ping.
type Pong struct{}

// Router names the child a message belongs to and how to make that child if it does not exist yet.
type Router func(ctx actor.Context, msg any) (name string, props func() *actor.Props, ok bool)

// onDemand spawns a child on the first message routed to it and forwards that message and later ones.
type onDemand struct {
	route    Router
	split    Splitter
	children map[string]*actor.PID
	stopping bool
}

// Splitter breaks a batch into the messages it carries, each routed on its own; ok is false for a
// message that is not a batch.
type Splitter func(msg any) (parts []any, ok bool)

// OnDemand returns the props of a supervisor that creates children as messages for them arrive (the
// bandit's arms), restarting a child that crashes; split, when set, unpacks batches first.
func OnDemand(route Router, split Splitter) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &onDemand{route: route, split: split, children: map[string]*actor.PID{}} },
		actor.WithSupervisor(restart()))
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
		if s.split != nil {
			if parts, ok := s.split(m); ok {
				for _, part := range parts {
					if pid := s.child(ctx, part); pid != nil {
						ctx.Send(pid, part)
					}
				}
				return
			}
		}
		if pid := s.child(ctx, m); pid != nil {
			ctx.Forward(pid)
		}
	}
}

// child returns the child a message goes to, spawning it on its first message; nil when the message
// has no child or the supervisor is stopping.
func (s *onDemand) child(ctx actor.Context, msg any) *actor.PID {
	name, props, ok := s.route(ctx, msg)
	if !ok || s.stopping {
		return nil
	}
	pid, exists := s.children[name]
	if !exists {
		var err error
		if pid, err = ctx.SpawnNamed(props(), name); err != nil {
			panic("supervisor: spawn " + name + ": " + err.Error())
		}
		s.children[name] = pid
	}
	return pid
}
