package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/messages"
)

// ListenProgress spawns an actor in system that hands every Progress it receives to onProgress (which
// must not block), and returns its PID for RouteRequest.progress_to with the function that ends it: that
// function returns once every step already received is handed over, so the steps sent before a
// request's answer are all told before the caller shows the answer.
func ListenProgress(system *actor.ActorSystem, onProgress func(*messages.Progress)) (*actor.PID, func()) {
	return listenProgress(system, "", onProgress, nil)
}

// ListenProgress is ListenProgress for the request requestID of this engine: the steps of other
// requests are not handed over, and are counted.
func (d *Deps) ListenProgress(system *actor.ActorSystem, requestID string, onProgress func(*messages.Progress)) (*actor.PID, func()) {
	return listenProgress(system, requestID, onProgress, d)
}

func listenProgress(system *actor.ActorSystem, requestID string, onProgress func(*messages.Progress), deps *Deps) (*actor.PID, func()) {
	drop := func(reason string, msg any) {
		if deps != nil {
			deps.Drop(KindProgress, reason, msg)
		}
	}
	pid := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch p := c.Message().(type) {
		case *messages.Progress:
			if requestID != "" && p.GetRequestId() != requestID {
				drop(DropWrongTarget, p)
				return
			}
			onProgress(p)
		default:
			if !Lifecycle(p) {
				drop(DropUnknownMessage, p)
			}
		}
	}))
	return pid, func() { _ = system.Root.PoisonFuture(pid).Wait() }
}

// ListenDeltas spawns an actor in system that hands every piece of request requestID's streamed answer
// to onDelta (which must not block), and returns its PID for RouteRequest.stream_to with the function
// that ends it once every piece received is handed over.
func (d *Deps) ListenDeltas(system *actor.ActorSystem, requestID string, onDelta func(*messages.Delta)) (*actor.PID, func()) {
	pid := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.Delta:
			if m.RequestId != requestID {
				d.Drop(KindProgress, DropWrongTarget, m)
				return
			}
			onDelta(m)
		default:
			d.unknown(KindProgress, m)
		}
	}))
	return pid, func() { _ = system.Root.PoisonFuture(pid).Wait() }
}
