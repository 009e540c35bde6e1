package actors

import (
	"sync"
	"time"
)

// Pool runs actor mailboxes as protoactor's default dispatcher does, a goroutine per busy mailbox,
// but keeps the goroutines: a batch runs on an idle goroutine when one waits and on a new one
// otherwise, so no mailbox ever waits for another (as under a fixed pool), and a goroutine whose stack
// grew serves the next batches instead of a fresh one growing its stack again (a request sends a few
// dozen messages, each once a cost of copying stacks). A goroutine idle for idleFor ends, so the pool
// shrinks back after a burst; Stop ends the idle ones and, after it, each batch gets a goroutine of
// its own again.
type Pool struct {
	work       chan func()
	quit       chan struct{}
	stop       sync.Once
	idleFor    time.Duration
	throughput int
}

// NewPool returns a pool whose mailboxes process up to throughput messages per batch.
func NewPool(throughput int, idleFor time.Duration) *Pool {
	return &Pool{work: make(chan func()), quit: make(chan struct{}), idleFor: idleFor, throughput: throughput}
}

// Schedule implements actor.Dispatcher.
func (p *Pool) Schedule(fn func()) {
	select {
	case p.work <- fn: // an idle goroutine took it
	default:
		go p.run(fn)
	}
}

// Throughput implements actor.Dispatcher.
func (p *Pool) Throughput() int { return p.throughput }

// Stop ends the idle goroutines; those running end after their batch.
func (p *Pool) Stop() { p.stop.Do(func() { close(p.quit) }) }

func (p *Pool) run(fn func()) {
	idle := time.NewTimer(p.idleFor)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(p.idleFor)
		select {
		case fn = <-p.work:
		case <-idle.C:
			return
		case <-p.quit:
			return
		}
	}
}
