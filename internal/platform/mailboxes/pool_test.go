package mailboxes

import (
	"runtime"
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

// A steady trickle of batches keeps one goroutine busy, not a burst's worth: the most recently idle
// goroutine takes each batch, and the others end.
func TestPoolShrinksUnderATrickle(t *testing.T) {
	p := NewPool(300, 20*time.Millisecond)
	defer p.Stop()
	base := runtime.NumGoroutine()
	var running sync.WaitGroup
	release := make(chan struct{})
	const burst = 50
	running.Add(burst)
	for range burst {
		p.Schedule(func() { running.Done(); <-release })
	}
	running.Wait()
	close(release)
	for deadline := time.Now().Add(10 * time.Second); ; {
		ran := make(chan struct{})
		p.Schedule(func() { close(ran) })
		<-ran
		if extra := runtime.NumGoroutine() - base; extra <= 3 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d pool goroutines still alive under a trickle of one batch at a time", extra)
		}
		time.Sleep(time.Millisecond)
	}
}
