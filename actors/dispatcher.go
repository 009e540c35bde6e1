package actors

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// Dispatcher runs actors' turns on a fixed set of long-lived goroutines. protoactor's default starts a
// goroutine each time an idle mailbox receives a message; a request wakes dozens of mailboxes, and each
// fresh goroutine then grows its stack for the work, which costs more than the turn itself. Turns never
// block (no I/O in Receive), so a small pool keeps up; when every goroutine is busy and the queue is
// full, and after Close, a turn runs on a goroutine of its own rather than wait.
type Dispatcher struct {
	work       chan func()
	done       chan struct{}
	closed     atomic.Bool
	throughput int
	wg         sync.WaitGroup
	once       sync.Once
}

// NewDispatcher starts a pool of n goroutines; each mailbox turn processes up to throughput messages.
func NewDispatcher(n, throughput int) *Dispatcher {
	d := &Dispatcher{work: make(chan func(), 4096), done: make(chan struct{}), throughput: throughput}
	d.wg.Add(n)
	for i := 0; i < n; i++ {
		go d.serve()
	}
	return d
}

func (d *Dispatcher) serve() {
	defer d.wg.Done()
	for {
		select {
		case fn := <-d.work:
			fn()
		case <-d.done:
			for { // finish what was queued before the close
				select {
				case fn := <-d.work:
					go fn()
				default:
					return
				}
			}
		}
	}
}

// Schedule implements actor.Dispatcher.
func (d *Dispatcher) Schedule(fn func()) {
	if !d.closed.Load() {
		select {
		case d.work <- fn:
			return
		default:
		}
	}
	go fn()
}

// Throughput implements actor.Dispatcher.
func (d *Dispatcher) Throughput() int { return d.throughput }

// Close stops the pool's goroutines; turns scheduled afterwards (the last stop notifications of the
// actor system) run on goroutines of their own.
func (d *Dispatcher) Close() {
	d.once.Do(func() {
		d.closed.Store(true)
		close(d.done)
	})
	d.wg.Wait()
}

// Props makes props that run on the deps' dispatcher, when there is one.
func (d *Deps) Props(producer actor.Producer, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(producer, append(opts, d.PropsOptions()...)...)
}

// PropsOptions are the options every actor's props get: the dispatcher, when there is one.
func (d *Deps) PropsOptions() []actor.PropsOption {
	if d.Dispatcher == nil {
		return nil
	}
	return []actor.PropsOption{actor.WithDispatcher(d.Dispatcher)}
}
