package slots

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// shell keeps what the host decided and runs no calls: the test ends the jobs.
type shell struct {
	mu       sync.Mutex
	events   []string
	ctxs     map[string]context.Context
	started  chan string
	timedOut chan string
	running  atomic.Int64
	most     atomic.Int64
}

func newShell() *shell {
	return &shell{ctxs: map[string]context.Context{}, started: make(chan string, 1024), timedOut: make(chan string, 16)}
}

func (s *shell) log(e string) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *shell) Queued(j *Job) { s.log("queued " + j.ID) }

func (s *shell) Start(ctx context.Context, _ context.CancelFunc, j *Job, _ time.Duration) {
	s.log("started " + j.ID)
	s.mu.Lock()
	s.ctxs[j.ID] = ctx
	s.mu.Unlock()
	if n := s.running.Add(1); n > s.most.Load() {
		s.most.Store(n)
	}
	s.started <- j.ID
}

func (s *shell) Refuse(j *Job, kind resilience.Kind, _ string) {
	s.log(fmt.Sprintf("refused %s %s", j.ID, kind))
}
func (s *shell) TimedOut(j *Job)                       { s.log("timed out " + j.ID); s.timedOut <- j.ID }
func (s *shell) Duplicate(j *Job)                      { s.log("duplicate " + j.ID) }
func (s *shell) Changed(int, int, resilience.Snapshot) {}

func (s *shell) eventList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

func newHost(t *testing.T, slots int, breaker resilience.Snapshot) (*Host, *shell) {
	t.Helper()
	sh := newShell()
	settings := resilience.WorkerBreakerSettings("w")
	h := New(Config{Slots: slots, Breaker: resilience.ResumeBreaker(settings, breaker), Shell: sh})
	t.Cleanup(func() { h.FailAll() })
	return h, sh
}

func job(id string, deadline time.Duration) *Job {
	return &Job{ID: id, Deadline: time.Now().Add(deadline)}
}

func TestSlots(t *testing.T) {
	for _, tc := range []struct {
		desc string
		run  func(t *testing.T) []string
		want []string
	}{
		{
			desc: "jobs beyond the slots wait, are told so first, and start in order as slots free",
			run: func(t *testing.T) []string {
				h, sh := newHost(t, 2, resilience.Snapshot{})
				for _, id := range []string{"a", "b", "c", "d"} {
					h.Offer(job(id, time.Minute))
				}
				h.Finish("b", true, "")
				h.Finish("a", true, "")
				return sh.eventList()
			},
			want: []string{"started a", "started b", "queued c", "queued d", "started c", "started d"},
		},
		{
			desc: "a second job of a running id is refused and changes nothing",
			run: func(t *testing.T) []string {
				h, sh := newHost(t, 2, resilience.Snapshot{})
				h.Offer(job("a", time.Minute))
				if h.Offer(job("a", time.Minute)) {
					t.Error("the twin was taken")
				}
				return sh.eventList()
			},
			want: []string{"started a"},
		},
		{
			desc: "a queued twin of a job that started first is dropped when its turn comes",
			run: func(t *testing.T) []string {
				h, sh := newHost(t, 2, resilience.Snapshot{})
				for _, id := range []string{"a", "c", "b", "b"} {
					h.Offer(job(id, time.Minute))
				}
				h.Finish("a", true, "")
				h.Finish("c", true, "")
				return sh.eventList()
			},
			want: []string{"started a", "started c", "queued b", "queued b", "started b", "duplicate b"},
		},
		{
			desc: "a job whose deadline passed while it waited is not called",
			run: func(t *testing.T) []string {
				h, sh := newHost(t, 1, resilience.Snapshot{})
				h.Offer(job("a", time.Minute))
				h.Offer(job("b", -time.Second))
				h.Finish("a", true, "")
				return sh.eventList()
			},
			want: []string{"started a", "queued b", "refused b not_sent"},
		},
		{
			desc: "an open breaker refuses the job as the worker's",
			run: func(t *testing.T) []string {
				h, sh := newHost(t, 1, resilience.Snapshot{State: resilience.Open, OpenUntil: time.Now().Add(time.Hour)})
				h.Offer(job("a", time.Minute))
				return sh.eventList()
			},
			want: []string{"refused a worker_unavailable"},
		},
		{
			desc: "a cancelled waiting job leaves the queue; a cancelled running one's call is stopped",
			run: func(t *testing.T) []string {
				h, sh := newHost(t, 1, resilience.Snapshot{})
				h.Offer(job("a", time.Minute))
				h.Offer(job("b", time.Minute))
				h.Cancel("b")
				h.Cancel("a")
				sh.mu.Lock()
				err := sh.ctxs["a"].Err()
				sh.mu.Unlock()
				if err == nil {
					t.Error("the running job's call was not cancelled")
				}
				if _, cancelled, ok := h.Finish("a", false, resilience.Cancelled); !ok || !cancelled {
					t.Errorf("finish: cancelled %v ok %v", cancelled, ok)
				}
				return sh.eventList()
			},
			want: []string{"started a", "queued b"},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got := tc.run(t)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
		})
	}
}

// The watchdog answers a job its host keeps past its budget and grace; the call's own end, when it
// comes, finds it answered already.
func TestTheWatchdogAnswersASilentHost(t *testing.T) {
	h, sh := newHost(t, 1, resilience.Snapshot{})
	h.Offer(&Job{ID: "a", Deadline: time.Now().Add(time.Minute), Timeout: 50 * time.Millisecond})
	h.Offer(job("b", time.Minute))
	select {
	case id := <-sh.timedOut:
		if id != "a" {
			t.Fatalf("timed out %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not answer the silent job")
	}
	if _, _, ok := h.Finish("a", true, ""); ok {
		t.Fatal("a job answered by the watchdog was finished again")
	}
	<-sh.started
	if id := <-sh.started; id != "b" {
		t.Fatalf("started %s after the timeout", id)
	}
}

// Jobs ended on many goroutines at once never hold more slots than the host has, and every job runs.
func TestConcurrentEndsKeepTheBound(t *testing.T) {
	h, sh := newHost(t, 3, resilience.Snapshot{})
	const jobs = 60
	go func() {
		for i := range jobs {
			h.Offer(job(fmt.Sprint("j", i), time.Minute))
		}
	}()
	var wg sync.WaitGroup
	for range jobs {
		id := <-sh.started
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh.running.Add(-1)
			h.Finish(id, true, "")
		}()
	}
	wg.Wait()
	if sh.most.Load() > 3 {
		t.Fatalf("%d jobs ran at once on 3 slots", sh.most.Load())
	}
}

// FailAll hands back every job, running and waiting, and the host holds none after.
func TestFailAllHandsBackEveryJob(t *testing.T) {
	h, _ := newHost(t, 1, resilience.Snapshot{})
	h.Offer(job("a", time.Minute))
	h.Offer(job("b", time.Minute))
	if got := h.FailAll(); len(got) != 2 {
		t.Fatalf("%d jobs handed back", len(got))
	}
	if h.Running("a") {
		t.Fatal("a still runs")
	}
}
