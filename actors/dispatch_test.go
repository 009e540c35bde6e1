package actors

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// No batch waits for another, however many block at once, and Stop leaves no goroutine behind.
func TestPoolNeverMakesABatchWait(t *testing.T) {
	before := goleak.IgnoreCurrent()
	p := NewPool(300, time.Minute)
	const n = 50
	var running, done sync.WaitGroup
	release := make(chan struct{})
	running.Add(n)
	done.Add(n)
	for range n {
		p.Schedule(func() {
			running.Done()
			<-release
			done.Done()
		})
	}
	running.Wait() // all n run at once: a fixed pool of fewer goroutines would hang here
	close(release)
	done.Wait()
	// Idle goroutines take later batches; after Stop, a batch still runs, on a goroutine of its own.
	for range 3 * n {
		ran := make(chan struct{})
		p.Schedule(func() { close(ran) })
		<-ran
	}
	p.Stop()
	ran := make(chan struct{})
	p.Schedule(func() { close(ran) })
	<-ran
	goleak.VerifyNone(t, before)
}

func TestPoolGoroutinesEndWhenIdle(t *testing.T) {
	before := goleak.IgnoreCurrent()
	p := NewPool(300, 10*time.Millisecond)
	defer p.Stop()
	ran := make(chan struct{})
	p.Schedule(func() { close(ran) })
	<-ran
	goleak.VerifyNone(t, before) // retries until the idle goroutine has ended
}
