package actors

import (
	"github.com/conclave-ai/conclave/internal/platform/inbox"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/mailboxes"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// BenchmarkRequestHost weighs the two ways a request could be hosted, with the coordinator's own work
// taken out: an actor spawned per request under a supervisor (today), or a goroutine reading an inbox
// that a registered process fills. Both take the same messages as a six-way request's coordinator
// (the request, then a JobStarted and a JobResult from each of six worker actors, which run on the
// engine's pool) and answer the request's future. The difference is what hosting on a goroutine would
// save per request.
func BenchmarkRequestHost(b *testing.B) {
	const calls = 6
	for _, host := range []struct {
		name  string
		spawn func(ctx actor.Context, workers []*actor.PID, pool actor.Dispatcher)
	}{
		{"actor", spawnActorHost},
		{"goroutine", spawnGoroutineHost},
	} {
		b.Run(host.name, func(b *testing.B) {
			system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
			defer system.Shutdown()
			pool := mailboxes.NewPool(300, 10*time.Second)
			defer pool.Stop()
			props := func(p actor.Producer) *actor.Props { return actor.PropsFromProducer(p, actor.WithDispatcher(pool)) }
			workers := make([]*actor.PID, calls)
			for i := range workers {
				workers[i] = system.Root.Spawn(props(func() actor.Actor { return benchWorker{} }))
			}
			parent := system.Root.Spawn(props(func() actor.Actor { return &benchSupervisor{workers: workers, host: host.spawn, pool: pool} }))
			b.ReportAllocs()
			b.SetParallelism(8) // 16 requests in flight on 2 cores, as the load run's c=16
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := system.Root.RequestFuture(parent, &messages.RouteRequest{}, 10*time.Second).Result(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchSupervisor hosts each request it is sent, as the request supervisor does.
type benchSupervisor struct {
	workers []*actor.PID
	host    func(ctx actor.Context, workers []*actor.PID, pool actor.Dispatcher)
	pool    actor.Dispatcher
}

// hostDone is a goroutine host's last word to its supervisor, which must forget the request as it
// forgets a stopped child.
type hostDone struct{}

func (s *benchSupervisor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *messages.RouteRequest:
		s.host(ctx, s.workers, s.pool)
	case *actor.Terminated, hostDone:
		// A request ended: the real supervisor forgets it here.
	}
}

// benchWorker answers a job as a worker with a free slot does: started, then its result.
type benchWorker struct{}

func (benchWorker) Receive(ctx actor.Context) {
	if d, ok := ctx.Message().(*messages.Dispatch); ok {
		ctx.Send(d.ReplyTo, &messages.JobStarted{JobId: d.Job.JobId})
		ctx.Send(d.ReplyTo, &messages.JobResult{JobId: d.Job.JobId, Ok: true})
	}
}

// benchRequest is the coordinator's message pattern: dispatch a job to each worker, count the
// results, answer.
type benchRequest struct {
	workers []*actor.PID
	replyTo *actor.PID
	results int
}

// take handles one message; it reports whether the request is answered.
func (r *benchRequest) take(send func(*actor.PID, any), self *actor.PID, msg any) bool {
	switch msg.(type) {
	case *messages.RouteRequest:
		for _, w := range r.workers {
			send(w, &messages.Dispatch{ReplyTo: self, Job: &messages.Job{JobId: "j"}})
		}
	case *messages.JobResult:
		if r.results++; r.results == len(r.workers) {
			send(r.replyTo, &messages.Execution{})
			return true
		}
	}
	return false
}

// spawnActorHost spawns the request's actor as the supervisor's child, which starts on its Started.
func spawnActorHost(parent actor.Context, workers []*actor.PID, pool actor.Dispatcher) {
	r := &benchRequest{workers: workers, replyTo: parent.Sender()}
	parent.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		msg := ctx.Message()
		if _, ok := msg.(*actor.Started); ok {
			msg = &messages.RouteRequest{}
		}
		if r.take(ctx.Send, ctx.Self(), msg) {
			ctx.Stop(ctx.Self())
		}
	}, actor.WithDispatcher(pool)))
}

// spawnGoroutineHost runs the request on a goroutine of its own, which tells the supervisor its end.
func spawnGoroutineHost(parent actor.Context, workers []*actor.PID, _ actor.Dispatcher) {
	system, supervisor := parent.ActorSystem(), parent.Self()
	r := &benchRequest{workers: workers, replyTo: parent.Sender()}
	in := inbox.New()
	self, _ := system.ProcessRegistry.Add(callerProcess{in}, system.ProcessRegistry.NextId())
	in.Put(&messages.RouteRequest{})
	go func() {
		defer system.Root.Send(supervisor, hostDone{})
		defer system.ProcessRegistry.Remove(self)
		var batch []any
		for range in.Ready() {
			batch = in.Take(batch[:0])
			for _, m := range batch {
				if r.take(system.Root.Send, self, m) {
					return
				}
			}
		}
	}()
}
