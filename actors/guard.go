package actors

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
)

// Kinds of actor, as the dropped-messages metric, the drop log and the registry of stopped actors name
// them: a bounded set, whatever the actors' own names are.
const (
	KindProvider    = "provider"
	KindWorker      = "worker"
	KindArm         = "arm"
	KindBandit      = "bandit"
	KindReliability = "reliability"
	KindRecorder    = "recorder"
	KindCoordinator = "coordinator"
	KindConsensus   = "consensus"
	KindRequests    = "requests"
	KindProgress    = "progress"
	KindSupervisor  = "supervisor"
	KindOther       = "other"
)

// ActorKind is the kind of the actor at a path of the tree (its PID's id).
func ActorKind(path string) string {
	if path == RootName {
		return KindSupervisor
	}
	rest, ok := strings.CutPrefix(path, RootName+"/")
	if !ok {
		return KindOther
	}
	parent, child, nested := strings.Cut(rest, "/")
	if !nested {
		switch parent {
		case RecorderName:
			return KindRecorder
		case BanditName:
			return KindBandit
		case RequestsName:
			return KindRequests
		}
		return KindSupervisor // fleet, providers, consensus: static supervisors
	}
	switch parent {
	case FleetName:
		return KindWorker
	case ProvidersName:
		return KindProvider
	case BanditName:
		if child == ReliabilityName {
			return KindReliability
		}
		return KindArm // arm names hold model ids, which may hold slashes
	case RequestsName:
		if strings.Contains(child, "/") {
			return KindConsensus // a coordinator's own consensus actor
		}
		return KindCoordinator
	}
	return KindOther
}

// DropLogEvery samples the drop log: the first drop of each actor kind and reason is logged, then one in
// every DropLogEvery, so a flood of bad messages writes a few lines, not one per message.
const DropLogEvery = 1000

// Drop is the one place an actor of a kind drops a message it will not act on: counted in the metrics
// and on the directory, and logged sampled (actor_message_dropped). reason is one of the Drop*
// constants; nothing of the message's content is logged but its type.
func (d *Deps) Drop(kind, reason string, msg any) {
	d.Metrics.ActorMessageDropped(kind, reason)
	var n int64 = 1
	if d.Dir != nil {
		n = d.Dir.countDrop(kind, reason)
	}
	if (n == 1 || n%DropLogEvery == 0) && d.Log != nil {
		d.Log.Warn("actor message dropped", zap.String("event", "actor_message_dropped"), zap.String("actor", kind),
			zap.String("reason", reason), zap.String("message", fmt.Sprintf("%T", msg)), zap.Int64("dropped", n))
	}
}

// dropKey is one actor kind and drop reason.
type dropKey struct{ kind, reason string }

// drops counts dropped messages by actor kind and reason; both are constants, so the map stays small.
type drops struct{ m sync.Map } // dropKey -> *atomic.Int64

func (d *Directory) countDrop(kind, reason string) int64 {
	c, ok := d.drops.m.Load(dropKey{kind, reason})
	if !ok {
		c, _ = d.drops.m.LoadOrStore(dropKey{kind, reason}, new(atomic.Int64))
	}
	return c.(*atomic.Int64).Add(1)
}

// Dropped is how many messages actors of a kind dropped for a reason.
func (d *Directory) Dropped(kind, reason string) int64 {
	if c, ok := d.drops.m.Load(dropKey{kind, reason}); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// StoppedActor is an actor its supervisor stopped for good: it crashed more often than its restart
// limit allows. Nothing restarts it; the engine is not ready while one is stopped.
type StoppedActor struct {
	Path   string    `json:"path"`
	Kind   string    `json:"actor"`
	Reason string    `json:"reason"` // the last crash's panic, cut short
	At     time.Time `json:"at"`
}

// stoppedActors is the registry of actors stopped for good, by path: path → StoppedActor. Supervisors
// write it as they stop an actor; the engine reads it for readiness.
type stoppedActors struct{ m sync.Map }

// MaxStoppedReason bounds the panic reason kept for a stopped actor.
const MaxStoppedReason = 512

// MarkStopped records that the actor at path was stopped for good after crashing with reason. A
// provider or worker under path (itself, or all of a stopped supervisor's children) publishes that it
// is stopped, so selection and assignment leave it out at once.
func (d *Directory) MarkStopped(path, reason string, at time.Time) StoppedActor {
	if len(reason) > MaxStoppedReason {
		reason = reason[:MaxStoppedReason] + "…"
	}
	s := StoppedActor{Path: path, Kind: ActorKind(path), Reason: reason, At: at}
	d.stopped.m.Store(path, s)
	under := func(pid *actor.PID) bool { return pid.Id == path || strings.HasPrefix(pid.Id, path+"/") }
	for _, p := range d.Providers {
		if under(p.PID) {
			p.markStopped(reason)
		}
	}
	for _, w := range d.Workers {
		if under(w.PID) {
			w.stopped.Store(&reason)
		}
	}
	return s
}

// Stopped lists the actors stopped for good, by path.
func (d *Directory) Stopped() []StoppedActor {
	out := []StoppedActor{}
	d.stopped.m.Range(func(_, s any) bool {
		out = append(out, s.(StoppedActor))
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// StoppedCounts counts the actors stopped for good by kind.
func (d *Directory) StoppedCounts() map[string]int {
	out := map[string]int{}
	d.stopped.m.Range(func(_, s any) bool {
		out[s.(StoppedActor).Kind]++
		return true
	})
	return out
}

// markStopped publishes that the provider's actor is stopped: its last snapshot with the reason. The
// actor, stopped, publishes nothing after it; Snapshot lays the reason over any snapshot anyway.
func (p *ProviderRef) markStopped(reason string) {
	p.stopped.Store(&reason)
	s := *p.snap.Load()
	s.Stopped = reason
	p.snap.Store(&s)
}

// Stopped says why the provider's actor was stopped for good, or "".
func (p *ProviderRef) Stopped() string {
	if r := p.stopped.Load(); r != nil {
		return *r
	}
	return ""
}

// Stopped says why the worker's actor was stopped for good, or "".
func (w *WorkerRef) Stopped() string {
	if r := w.stopped.Load(); r != nil {
		return *r
	}
	return ""
}

// Processes counts the processes registered in an actor system whose id starts with prefix (all of
// them for ""): its actors, and the futures waiting on them.
func Processes(system *actor.ActorSystem, prefix string) int {
	n := 0
	for _, bucket := range system.ProcessRegistry.LocalPIDs.LocalPIDs {
		if prefix == "" {
			n += bucket.Count()
			continue
		}
		for _, id := range bucket.Keys() {
			if strings.HasPrefix(id, prefix) {
				n++
			}
		}
	}
	return n
}

// Lifecycle reports whether msg is one of protoactor's own (started, stopping, restarting, a child's
// end, a receive timeout): every actor may get these, so they are never counted as unknown.
func Lifecycle(msg any) bool {
	switch msg.(type) {
	case actor.AutoReceiveMessage, actor.SystemMessage, *actor.ReceiveTimeout:
		return true
	}
	return false
}

// unknown drops a message of a type the actor does not take, unless it is protoactor's own.
func (d *Deps) unknown(kind string, msg any) {
	if !Lifecycle(msg) {
		d.Drop(kind, DropUnknownMessage, msg)
	}
}
