// Package inbox owns the queue of a caller that is addressed like an actor without being one: its
// senders (gates, slots, calls' goroutines, timers) never block on it, and its one reader takes what
// came in the order it came.
package inbox

import "sync"

// Inbox is an unbounded queue with one reader. What bounds it is its senders: a request's messages
// are a few per call, and a streamed answer's pieces count against the in-flight bound before they
// are sent. Once closed it drops what is put in it, so a late sender holding its address leaves
// nothing behind. The zero value is not usable; make one with New.
type Inbox struct {
	mu     sync.Mutex
	items  []any
	ready  chan struct{} // holds a token while items is not empty
	closed bool
}

// New returns an empty, open inbox.
func New() *Inbox { return &Inbox{ready: make(chan struct{}, 1)} }

// Put adds a message; it reports false, and drops it, once the inbox is closed.
func (b *Inbox) Put(m any) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.items = append(b.items, m)
	if len(b.items) == 1 {
		select {
		case b.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// Ready has a token while messages wait; its reader takes them with Take after receiving it.
func (b *Inbox) Ready() <-chan struct{} { return b.ready }

// Take appends every waiting message to dst, oldest first, and empties the inbox.
func (b *Inbox) Take(dst []any) []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	dst = append(dst, b.items...)
	clear(b.items)
	b.items = b.items[:0]
	return dst
}

// Close empties the inbox and makes it drop whatever is put in it from then on.
func (b *Inbox) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.items = nil
}
