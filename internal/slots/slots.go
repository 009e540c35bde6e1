// Package slots owns a worker host's job slots as a plain concurrent object: the jobs running on the
// host and those waiting for a slot, the host's breaker, and the watchdog that answers a job its host
// keeps past its budget. The worker's actor offers and cancels jobs; each job's goroutine ends its job
// in place when its call returns, which frees its slot and starts the next job without a message to
// the actor: one delivery and one wake-up less per call.
//
// A Host does no messaging and no calls of its own: what it decides for a job (queued, started,
// refused, timed out) goes to the Shell it is given, under its lock, so that a job's sender hears
// "queued" before "started".
package slots

import (
	"context"
	"github.com/conclave-ai/conclave/internal/platform/alarm"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Job is one call a worker host is asked to make.
type Job struct {
	ID string
	// Deadline is when its sender stops waiting; Timeout, when not zero, bounds the call from its start.
	Deadline time.Time
	Timeout  time.Duration
	// Ask is the shell's own value (the dispatch), handed back in what the host decides.
	Ask any
}

// Shell carries out what the host decides. Its methods are called under the host's lock, in order,
// and must not block or call the host.
type Shell interface {
	// Queued tells a job's sender that it waits for a slot.
	Queued(j *Job)
	// Start makes the call of a job that took a slot, within budget; ctx ends with the budget, a
	// cancellation or stop, which the shell calls to stop the call itself. The call runs on a goroutine
	// of the shell's, which ends the job with Host.Finish.
	Start(ctx context.Context, stop context.CancelFunc, j *Job, budget time.Duration)
	// Refuse answers a job that was not called, for kind (the host's breaker is open, the deadline
	// passed while it waited).
	Refuse(j *Job, kind resilience.Kind, why string)
	// TimedOut answers a running job whose host did not return it within its budget and grace.
	TimedOut(j *Job)
	// Duplicate reports a job whose twin of the same id started first; it is ignored.
	Duplicate(j *Job)
	// Changed publishes the jobs running and waiting, and the breaker.
	Changed(running, queued int, breaker resilience.Snapshot)
}

// Config is what a host is made of. Slots below 1 mean 1; a nil Grace gives no grace.
type Config struct {
	Slots   int
	Breaker *resilience.Breaker
	// Grace is how long after a call's budget the host may still return it before it counts as timed
	// out.
	Grace func(budget time.Duration) time.Duration
	Shell Shell
}

// Host is one worker host's slots. Its methods may be called from any goroutine.
type Host struct {
	slots   int
	grace   func(time.Duration) time.Duration
	shell   Shell
	mu      sync.Mutex
	breaker *resilience.Breaker
	running map[string]*running
	queue   []*Job
	// watch is when the watchdog next looks for silent hosts: the earliest end of a running job's
	// budget and grace. One timer serves every job, since budgets end in about the order jobs start.
	watch alarm.Alarm
}

// running is a job out on the host.
type running struct {
	job       *Job
	ticket    resilience.Ticket
	cancel    context.CancelFunc
	silentAt  time.Time // its budget and grace are over: the host has not returned it
	cancelled bool      // its sender no longer wants it
}

// New makes a host's slots.
func New(cfg Config) *Host {
	grace := cfg.Grace
	if grace == nil {
		grace = func(time.Duration) time.Duration { return 0 }
	}
	h := &Host{slots: max(cfg.Slots, 1), grace: grace, shell: cfg.Shell, breaker: cfg.Breaker, running: map[string]*running{}}
	h.watch = alarm.New(h.look)
	return h
}

// Running reports whether a job of the id runs: a second job of one id would take the first one's
// place and its answer.
func (h *Host) Running(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.running[id]
	return ok
}

// Offer takes a job: it starts at once when a slot is free, else waits for one. It reports false for
// a job of an id that runs already, which is ignored.
func (h *Host) Offer(j *Job) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.running[j.ID]; ok {
		return false
	}
	if len(h.running) < h.slots {
		h.start(j)
	} else {
		h.queue = append(h.queue, j)
		h.shell.Queued(j)
	}
	h.changed()
	return true
}

// start runs a job, the lock held: the call gets its budget from now, cut at its deadline. A queued
// twin of a running job is ignored when its turn comes, without a scan of the queue for every job.
func (h *Host) start(j *Job) {
	if _, ok := h.running[j.ID]; ok {
		h.shell.Duplicate(j)
		return
	}
	ticket, err := h.breaker.Allow()
	if err != nil {
		h.shell.Refuse(j, resilience.WorkerUnavailable, "worker breaker open: "+err.Error())
		return
	}
	now := time.Now()
	budget := j.Deadline.Sub(now)
	if budget <= 0 {
		h.breaker.Release(ticket)
		h.shell.Refuse(j, resilience.NotSent, "the deadline passed while the job waited for a free slot")
		return
	}
	if j.Timeout > 0 {
		budget = min(budget, j.Timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(budget))
	r := &running{job: j, ticket: ticket, cancel: cancel, silentAt: now.Add(budget + h.grace(budget))}
	h.running[j.ID] = r
	h.watch.By(r.silentAt)
	h.shell.Start(ctx, cancel, j, budget)
}

// Finish ends a running job whose call returned: answered says its host returned an answer (the host
// did its part), kind is its error otherwise. It frees the job's slot, starts waiting jobs, and
// returns the job and whether its sender had cancelled it; ok is false for a job no longer running
// (its host timed out first, or a restart failed it), which was answered already.
func (h *Host) Finish(id string, answered bool, kind resilience.Kind) (j *Job, cancelled, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.running[id]
	if !ok {
		return nil, false, false
	}
	h.end(r, answered, kind)
	if len(h.running) == 0 {
		h.watch.Stop() // nothing left to watch: no idle look for silent hosts
	}
	h.changed()
	return r.job, r.cancelled, true
}

// end takes a job off its slot, settles the breaker with the host's part in it and starts waiting
// jobs; the lock is held.
func (h *Host) end(r *running, answered bool, kind resilience.Kind) {
	delete(h.running, r.job.ID)
	r.cancel()
	if answered {
		kind = ""
	}
	h.breaker.Settle(r.ticket, resilience.Blame(resilience.Call{Kind: kind, FullBudget: true}).Host)
	for len(h.queue) > 0 && len(h.running) < h.slots {
		next := h.queue[0]
		h.queue = h.queue[1:]
		h.start(next)
	}
}

// Cancel stops a job its sender no longer wants: a running one's call is cancelled (it returns
// cancelled), a waiting one leaves the queue.
func (h *Host) Cancel(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.running[id]; ok {
		r.cancelled = true
		r.cancel()
	}
	for i, j := range h.queue {
		if j.ID == id {
			h.queue = append(h.queue[:i], h.queue[i+1:]...)
			break
		}
	}
	h.changed()
}

// FailAll takes every job off the host, running and waiting, and returns them: a crashed worker lost
// them, and their senders must not wait for their deadlines to learn it. The host takes no job after.
func (h *Host) FailAll() []*Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Job, 0, len(h.running)+len(h.queue))
	for id, r := range h.running {
		r.cancel()
		out = append(out, r.job)
		delete(h.running, id)
	}
	out = append(out, h.queue...)
	h.queue = nil
	h.watch.Close()
	h.changed()
	return out
}

// Changed publishes the host's state again (its connection changed, for one).
func (h *Host) Changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changed()
}

func (h *Host) changed() { h.shell.Changed(len(h.running), len(h.queue), h.breaker.Snapshot()) }

// look is the watchdog: the running jobs past their budget and grace are answered as host timeouts,
// so that a hung host is the host's fault and never the provider's; it looks again for the next.
func (h *Host) look() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watch.Due() // forgets the moment: the look below sets the next
	now := time.Now()
	for _, r := range h.running {
		if !now.Before(r.silentAt) {
			h.shell.TimedOut(r.job)
			h.end(r, false, resilience.HostTimeout)
		}
	}
	for _, r := range h.running {
		h.watch.By(r.silentAt)
	}
	h.changed()
}
