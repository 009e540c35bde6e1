// Package mailboxes owns the goroutines that run actor mailboxes: a dispatcher for protoactor that
// keeps its goroutines between batches instead of starting one per batch.
package mailboxes

import (
	"slices"
	"sync"
	"time"
)

// Pool runs actor mailboxes as protoactor's default dispatcher does, a goroutine per busy mailbox,
// but keeps the goroutines: a batch runs on an idle goroutine when one waits and on a new one
// otherwise, so no mailbox ever waits for another (as under a fixed pool), and a goroutine whose stack
// grew serves the next batches instead of a fresh one growing its stack again (a request sends a few
// dozen messages, each once a cost of copying stacks). The most recently idle goroutine takes the next
// batch, so under a steady load the same few serve and the rest, idle for idleFor, end: the pool
// shrinks back after a burst. Stop ends the idle ones and, after it, each batch gets a goroutine of
// its own again.
type Pool struct {
	mu         sync.Mutex
	idle       []chan func() // the idle goroutines' inboxes, the most recently idle last
	stopped    bool
	idleFor    time.Duration
	throughput int
}

// NewPool returns a pool whose mailboxes process up to throughput messages per batch.
func NewPool(throughput int, idleFor time.Duration) *Pool {
	return &Pool{idleFor: idleFor, throughput: throughput}
}

// Schedule implements actor.Dispatcher.
func (p *Pool) Schedule(fn func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		inbox := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		inbox <- fn // buffered: never blocks
		return
	}
	p.mu.Unlock()
	go p.run(fn)
}

// Throughput implements actor.Dispatcher.
func (p *Pool) Throughput() int { return p.throughput }

// Stop ends the idle goroutines; those running end after their batch.
func (p *Pool) Stop() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.stopped = nil, true
	p.mu.Unlock()
	for _, inbox := range idle {
		inbox <- nil
	}
}

func (p *Pool) run(fn func()) {
	inbox := make(chan func(), 1)
	idle := time.NewTimer(p.idleFor)
	defer idle.Stop()
	for fn != nil {
		fn()
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, inbox)
		p.mu.Unlock()
		idle.Reset(p.idleFor)
		select {
		case fn = <-inbox:
		case <-idle.C:
			p.mu.Lock()
			i := slices.Index(p.idle, inbox)
			if i >= 0 {
				p.idle = slices.Delete(p.idle, i, i+1)
			}
			p.mu.Unlock()
			if i >= 0 {
				return
			}
			fn = <-inbox // a batch took this goroutine as its timer fired: run it
		}
	}
}
