package actors

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestDispatcherRunsEveryTurn(t *testing.T) {
	d := NewDispatcher(2, 10)
	var n atomic.Int64
	var wg sync.WaitGroup
	const turns = 10000 // more than the queue holds: some overflow onto their own goroutines
	wg.Add(turns)
	for i := 0; i < turns; i++ {
		d.Schedule(func() { n.Add(1); wg.Done() })
	}
	wg.Wait()
	d.Close()
	wg.Add(1)
	d.Schedule(func() { n.Add(1); wg.Done() }) // after Close: still runs, never panics
	wg.Wait()
	if n.Load() != turns+1 || d.Throughput() != 10 {
		t.Fatalf("%d turns ran", n.Load())
	}
}
