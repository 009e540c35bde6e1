// Package collect owns step 7 of a request: collecting the answers. It is a pure state machine over a
// request's calls. Events come in (a permit, a call started, a result, the clock, the request
// cancelled); effects go out (acquire a permit, dispatch a job, settle a permit with its verdict,
// cancel a job, wake me at, finish). It decides retries by the retry table, quorum rounds, the quorum
// grace period and the end of collection, and whom each settled call blames (resilience.Blame). The
// coordinator actor interprets the effects; tests drive the machine with a fake clock.
package collect

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Config is what the machine needs of the request's plan.
type Config struct {
	// MinResponses is the quorum: fewer answers start a quorum round, or make the answer degraded.
	MinResponses int
	// QuorumGrace, when positive, ends collection that long after the quorum is reached.
	QuorumGrace time.Duration
	// CallTimeout is each call's budget from the moment its worker starts it: the blueprint's timeout.
	CallTimeout time.Duration
	// CollectBy ends collection at the latest; no call runs past it.
	CollectBy time.Time
	// QueueBy ends the waiting for rate limits (the request's receipt plus max_queue_seconds): a call
	// refused for a rate limit, or answered 429, is retried only when its wait ends before it. Zero
	// means CollectBy.
	QueueBy time.Time
	// FaultAfter is how long a call to a provider must have had before its timeout is a fault; nil
	// means CallTimeout.
	FaultAfter func(provider string) time.Duration
	// Rounds is the number of quorum-retry rounds.
	Rounds int
	// MoveOn makes a quorum round replace a failed model rather than ask it again (a direct call's
	// fallbacks: a fault of the model or its provider moves to the next).
	MoveOn bool
	// RetryScale multiplies the retry table's backoffs; an upstream's own Retry-After is kept as given.
	RetryScale float64
	// Adaptive, when set, asks the initial assignments in waves instead of all at once.
	Adaptive *Adaptive
}

// Adaptive is an adaptive quorum: Start asks the first Wave assignments (they are best-first), and
// each time a wave has settled the machine asks Settle of the answers so far; unsettled, the next
// wave is asked, until none is left.
type Adaptive struct {
	Wave int
	// Settle judges the answers so far, knowing how many selected models are not yet asked.
	Settle func(answers []*Job, unasked int) Verdict
}

// Verdict is an adaptive quorum's judgement of the answers at the end of a wave.
type Verdict struct {
	// Settled ends asking. Posterior is the leading answer's.
	Settled   bool
	Posterior float64
	// Next is how many of the unasked the next wave asks: the fewest that could settle the request,
	// so no model is asked whose answer could not matter. Zero means Wave.
	Next int
}

// Quorum is how collection used its models.
type Quorum struct {
	// Asked counts the selected models that were asked (replacements included); Waves the waves.
	Asked, Waves int
	// Stopped is why asking stopped: all_asked (a fixed quorum), settled, cap (every selected model
	// asked), or deadline (collection ended with models unasked).
	Stopped   string
	Posterior float64
}

// Why asking stopped.
const (
	AllAsked = "all_asked"
	Settled  = "settled"
	Cap      = "cap"
	Deadline = "deadline"
)

// Env answers the machine's questions about the world at the moment of an event, from snapshots.
type Env interface {
	// Worker picks a worker for a retry, avoiding those in avoid when any other can take it.
	Worker(avoid []string) (string, bool)
	// Replace selects up to n models in place of failed ones, none of those in tried and none of the
	// providers in refused.
	Replace(n int, tried, refused map[string]bool) []Assignment
	// ProviderDown reports whether a provider's breaker is open.
	ProviderDown(provider string) bool
}

// Assignment is a model to ask and the worker to ask it on.
type Assignment struct {
	Model    string
	Provider string
	Worker   string
}

// Status is how a call ended, as the record shows it.
type Status string

// The statuses of a call.
const (
	OK Status = "ok"
	// Timeout: the call had its full budget and no answer came (upstream_timeout), or its host stopped
	// answering (host_timeout).
	Timeout Status = "timeout"
	Error   Status = "error"
	// Cancelled: Conclave stopped the call (collection ended first), or a deadline shorter than the
	// blueprint's cut it.
	Cancelled Status = "cancelled"
	// NotSent: the call never reached a worker (it waited for a permit, was refused one, or sat in a
	// busy worker's queue).
	NotSent Status = "not_sent"
	// Late: an answer that came after its call was settled; kept in the record, never used.
	Late Status = "late"
)

// Permit is a provider's answer to an acquisition.
type Permit struct {
	Granted bool
	// Reason says why it was refused.
	Reason string
	// RetryAfter, when refused, is when the reason should pass.
	RetryAfter time.Duration
}

// Reply is a call's result from its worker.
type Reply struct {
	OK   bool
	Text string
	// ToolCalls counts the answer's calls of tools: an answer of calls alone is an answer, not empty.
	ToolCalls int
	Kind      resilience.Kind
	Scope     resilience.Scope
	// RetryAfter is the wait the upstream asked for.
	RetryAfter time.Duration
	// Ref is the caller's own handle on the reply, kept in the call's record.
	Ref any
}

// Slot is one selected model's place in the request; retries and quorum rounds reuse it.
type Slot struct {
	Index    int
	Model    string
	Provider string
	// Wave is the adaptive quorum's wave that asked the slot: 0 for the first (and for every slot of a
	// fixed quorum), more for a model asked because the earlier answers did not settle the request.
	Wave     int
	attempts int
	used     []string // workers already tried
	state    slotState
	retryAt  time.Time
	avoid    bool // the retry goes to another worker
	retry    int  // index in retries of the scheduled retry, or -1
	answer   *Job
}

type slotState uint8

const (
	slotPending slotState = iota // a job is out
	slotWaiting                  // a retry is scheduled
	slotOK
	slotFailed
)

// Job is one call of one model on one worker.
type Job struct {
	Seq     int
	Slot    *Slot
	Worker  string
	Attempt int
	// Initial marks the first dispatches, timed as the dispatch phase.
	Initial bool
	state   jobState
	// Budget is the time the call had from its start, reported by its worker; StartedAt is when the
	// worker said it started (zero while it has not), which places the call in the request's trace.
	Budget    time.Duration
	StartedAt time.Time
	// Probe marks a half-open probe (set by the interpreter from its permit, for the record and the log).
	Probe bool
	// Record is how the call ended, once settled.
	Record *Record
}

type jobState uint8

const (
	acquiring jobState = iota
	dispatched
	running
	settled
)

// Record is a settled call, or a late answer to one.
type Record struct {
	Job     *Job
	Status  Status
	Kind    resilience.Kind
	Scope   resilience.Scope
	Verdict resilience.Verdict
	// RetryAfter is the upstream's requested wait, for a rate limit's block.
	RetryAfter time.Duration
	// WaitedForPermit marks a call that never got its permit before collection ended: the provider was
	// at its rate limit.
	WaitedForPermit bool
	// Ref is the reply's handle (nil for calls settled without a reply).
	Ref any
}

// Retry is one entry of the retry history.
type Retry struct {
	Model      string
	Provider   string
	FromWorker string
	ToWorker   string
	// Attempt is the attempt number of the retry (the first attempt is 0).
	Attempt int
	Kind    resilience.Kind
	Delay   time.Duration
	// Outcome is scheduled, skipped: deadline, skipped: max_queue_seconds (a rate limit's wait ends
	// after the request's queue bound), or quorum round N.
	Outcome string
}

// EffectKind names an effect.
type EffectKind uint8

// The effects.
const (
	// Acquire asks the job's provider for a permit.
	Acquire EffectKind = iota + 1
	// Dispatch sends the job to its worker.
	Dispatch
	// Settle tells the job's provider how its permit ended: the verdict, or all neutral to give back a
	// permit (or a waiting acquisition) unused.
	Settle
	// Cancel tells the job's worker to stop it.
	Cancel
	// Wake asks for a Tick at At; it replaces any earlier wake.
	Wake
	// Retried reports a new entry of the retry history (the last of Retries).
	Retried
	// Finish ends collection: Done has the answers.
	Finish
)

// Effect is one thing the machine asks its interpreter to do.
type Effect struct {
	Kind   EffectKind
	Job    *Job
	Record *Record // Settle
	At     time.Time
}

// Done is the end of collection.
type Done struct {
	// Answers are the jobs that answered, one per slot, in slot order.
	Answers []*Job
	// Failure, when not empty, is why there is no answer to give: no_responses, rate_limited, a refusal
	// every call met (invalid_api_key, payment_required, model_not_found, request_too_large), or the
	// kind the request was stopped with.
	Failure resilience.Kind
	// RetryAfter, with a rate-limit failure, is the wait that should cure it.
	RetryAfter time.Duration
	Degraded   bool
	Rounds     int
	Quorum     Quorum
}

// Machine collects one request's answers. It is not safe for concurrent use: its owner feeds it events
// one at a time, and the effects it returns are valid until the next event.
type Machine struct {
	cfg     Config
	initial []Assignment
	env     Env
	rng     *rand.Rand
	slots   []*Slot
	jobs    []*Job
	records []*Record
	retries []Retry
	tried   map[string]bool
	// refused holds the providers whose host refused a connection during the request: nothing listens
	// there, so none of their models is asked again before the request ends.
	refused  map[string]bool
	ok       int
	round    int
	graceAt  time.Time
	wakeAt   time.Time
	reserve  []Assignment // adaptive: the assignments no wave has asked yet, best-first
	quorum   Quorum
	finished bool
	// stopped: the caller's own key refused a call, or the bound of the bytes in flight dropped an
	// answer; nothing more is asked.
	stopped bool
	done    Done
	out     []Effect
	// spareSlots and spareJobs are allocated ahead for the initial assignments.
	spareSlots []Slot
	spareJobs  []Job
}

// New returns a machine for the initial assignments; Start dispatches them.
func New(cfg Config, initial []Assignment, env Env, rng *rand.Rand) *Machine {
	if cfg.FaultAfter == nil {
		cfg.FaultAfter = func(string) time.Duration { return cfg.CallTimeout }
	}
	m := &Machine{cfg: cfg, initial: initial, env: env, rng: rng, tried: make(map[string]bool, len(initial)), quorum: Quorum{Stopped: AllAsked, Waves: 1}}
	if a := cfg.Adaptive; a != nil && a.Wave > 0 && a.Wave < len(initial) {
		m.initial, m.reserve = initial[:a.Wave], initial[a.Wave:]
		for _, r := range m.reserve {
			m.tried[r.Model] = true // replacements never take a model a later wave will ask
		}
	}
	// The initial slots and their first jobs are allocated together: most requests need no others.
	m.slots, m.jobs = make([]*Slot, 0, len(m.initial)), make([]*Job, 0, len(m.initial))
	m.spareSlots, m.spareJobs = make([]Slot, len(m.initial)), make([]Job, len(m.initial))
	for _, a := range m.initial {
		m.newSlot(a)
	}
	return m
}

// Slots returns the slots in selection order.
func (m *Machine) Slots() []*Slot { return m.slots }

// Records returns every settled call and late answer, in the order they settled.
func (m *Machine) Records() []*Record { return m.records }

// Retries returns the retry history.
func (m *Machine) Retries() []Retry { return m.retries }

// Done returns the end of collection, once Finish was emitted.
func (m *Machine) Done() Done { return m.done }

// Job returns a job by its sequence number, or nil.
func (m *Machine) Job(seq int) *Job {
	if seq < 0 || seq >= len(m.jobs) {
		return nil
	}
	return m.jobs[seq]
}

// JobSeq reads the sequence number at the end of a job id of the form "<anything>/<seq>".
func JobSeq(id string) (int, bool) {
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:])
	return n, err == nil
}

func (m *Machine) newSlot(a Assignment) *Slot {
	s := new(Slot)
	if n := len(m.spareSlots); n > 0 {
		s, m.spareSlots = &m.spareSlots[0], m.spareSlots[1:]
	}
	*s = Slot{Index: len(m.slots), Model: a.Model, Provider: a.Provider, Wave: m.quorum.Waves - 1, retry: -1}
	m.slots = append(m.slots, s)
	m.tried[a.Model] = true
	return s
}

// Start dispatches the initial assignments: a permit is asked for each.
func (m *Machine) Start(now time.Time) []Effect {
	m.out = m.out[:0]
	for i, a := range m.initial {
		m.startJob(m.slots[i], a.Worker).Initial = true
	}
	return m.emitWake(now)
}

func (m *Machine) startJob(s *Slot, worker string) *Job {
	j := new(Job)
	if n := len(m.spareJobs); n > 0 {
		j, m.spareJobs = &m.spareJobs[0], m.spareJobs[1:]
	}
	*j = Job{Seq: len(m.jobs), Slot: s, Worker: worker, Attempt: s.attempts}
	s.attempts++
	if !slices.Contains(s.used, worker) {
		s.used = append(s.used, worker)
	}
	s.state = slotPending
	if s.retry >= 0 {
		m.retries[s.retry].ToWorker = worker
		s.retry = -1
	}
	m.jobs = append(m.jobs, j)
	m.emit(Effect{Kind: Acquire, Job: j})
	return j
}

// Permit applies a provider's answer to a job's acquisition.
func (m *Machine) Permit(now time.Time, seq int, p Permit) []Effect {
	m.out = m.out[:0]
	j := m.Job(seq)
	if j == nil || j.state != acquiring {
		return m.out // settled while it waited: the provider already took the permit back
	}
	if p.Granted {
		j.state = dispatched
		m.emit(Effect{Kind: Dispatch, Job: j})
		return m.out
	}
	kind := resilience.Kind("permit_" + p.Reason)
	if p.Reason == string(resilience.RequestTooLarge) { // more tokens than the provider's limit: no wait helps
		kind = resilience.RequestTooLarge
	}
	rec := m.settle(j, &Record{Status: NotSent, Kind: kind})
	// A refusal that a wait cures (a rate limit, the model's own 429) is retried after it like a 429;
	// an open breaker or an ejected model is not asked again, though a quorum round may replace it.
	if p.Reason == "rate_limited" || p.Reason == "model_rate_limited" {
		m.retryAfterFailure(j, resilience.RateLimited, p.RetryAfter, now)
	} else {
		j.Slot.state = slotFailed
	}
	rec.RetryAfter = p.RetryAfter
	m.progress(now)
	return m.emitWake(now)
}

// Started records that a job's worker began the call, with the time the call has.
func (m *Machine) Started(now time.Time, seq int, budget time.Duration) []Effect {
	m.out = m.out[:0]
	if j := m.Job(seq); j != nil && j.state == dispatched {
		j.state, j.Budget, j.StartedAt = running, budget, now
	}
	return m.out
}

// Result applies a call's result.
func (m *Machine) Result(now time.Time, seq int, r Reply) []Effect {
	m.out = m.out[:0]
	j := m.Job(seq)
	if j == nil {
		return m.out
	}
	if j.state != dispatched && j.state != running {
		if r.OK && m.finished {
			m.records = append(m.records, &Record{Job: j, Status: Late, Ref: r.Ref})
		}
		return m.out
	}
	kind := replyKind(r)
	if kind == resilience.ConnectionRefused {
		if m.refused == nil {
			m.refused = map[string]bool{}
		}
		m.refused[j.Slot.Provider] = true
	}
	started := j.state == running
	full := started && j.Budget >= m.cfg.FaultAfter(j.Slot.Provider)
	rec := m.settle(j, &Record{Kind: kind, Scope: r.Scope, RetryAfter: r.RetryAfter, Ref: r.Ref,
		Verdict: resilience.Blame(resilience.Call{Kind: kind, Scope: r.Scope, FullBudget: full})})
	rec.Status = callStatus(kind, started, full)
	// Refused before it was sent by the caller's own key (its budget, its limits), or its answer
	// dropped for the bytes of the requests in flight: no other model can be asked in its place (its
	// answer would be dropped too), and nothing is retried; the calls out finish, and collection ends
	// with what they answer.
	own := resilience.CallersOwn(kind)
	if own {
		rec.Status = NotSent
	}
	m.emit(Effect{Kind: Settle, Job: j, Record: rec})
	if endsCollection(kind) {
		m.stopAsking(j)
	} else {
		m.moveOn(j, rec.Status, kind, r.RetryAfter, now)
	}
	m.progress(now)
	return m.emitWake(now)
}

// replyKind is the kind of a call's outcome: none for an answer, EmptyAnswer for a call that worked
// without one, and Internal for a failure that says no kind.
func replyKind(r Reply) resilience.Kind {
	switch {
	case r.OK && strings.TrimSpace(r.Text) == "" && r.ToolCalls == 0:
		return resilience.EmptyAnswer // the call worked, the answer is missing
	case r.OK:
		return ""
	case r.Kind == "":
		return resilience.Internal
	}
	return r.Kind
}

// callStatus is the status of a call that ended with kind, after it started (or not) and with its full
// budget (or not).
func callStatus(kind resilience.Kind, started, full bool) Status {
	switch {
	case kind == "":
		return OK
	case kind == resilience.UpstreamTimeout && !full, kind == resilience.Cancelled:
		return Cancelled // cut by a deadline shorter than the blueprint's: nobody's fault
	case kind == resilience.UpstreamTimeout, kind == resilience.HostTimeout:
		return Timeout
	case !started:
		return NotSent // refused before it started (the worker's breaker is open)
	}
	return Error
}

// stopAsking fails j's slot and every slot waiting for a retry, and asks no model more.
func (m *Machine) stopAsking(j *Job) {
	j.Slot.state = slotFailed
	m.stopped = true
	for _, s := range m.slots {
		if s.state == slotWaiting {
			s.state = slotFailed
		}
	}
}

// moveOn moves j's slot on by its call's status: an answer fills it, a call cut at the end of its time
// fails it, and any other failure may be retried.
func (m *Machine) moveOn(j *Job, status Status, kind resilience.Kind, retryAfter time.Duration, now time.Time) {
	switch status {
	case OK:
		j.Slot.state, j.Slot.answer = slotOK, j
		m.ok++
	case Cancelled:
		j.Slot.state = slotFailed // cut at the end of its time: nothing is left to retry in
	default:
		m.retryAfterFailure(j, kind, retryAfter, now)
	}
}

// Tick applies the passing of time: scheduled retries, the quorum grace period, the end of collection.
func (m *Machine) Tick(now time.Time) []Effect {
	m.out = m.out[:0]
	if m.finished {
		return m.out
	}
	if !now.Before(m.cfg.CollectBy) || (!m.graceAt.IsZero() && !now.Before(m.graceAt)) {
		m.finish(now, "")
		return m.out
	}
	for _, s := range m.slots {
		if s.state != slotWaiting || now.Before(s.retryAt) {
			continue
		}
		var avoid []string
		if s.avoid {
			avoid = s.used
		}
		worker, ok := m.env.Worker(avoid)
		if !ok {
			s.state = slotFailed
			continue
		}
		m.startJob(s, worker)
	}
	m.progress(now)
	return m.emitWake(now)
}

// Stop ends collection at once for a reason outside it: the caller left, or the shutdown timeout ended.
func (m *Machine) Stop(now time.Time, kind resilience.Kind) []Effect {
	m.out = m.out[:0]
	if !m.finished {
		m.finish(now, kind)
	}
	return m.out
}

func (m *Machine) emit(e Effect) { m.out = append(m.out, e) }

func (m *Machine) settle(j *Job, rec *Record) *Record {
	j.state = settled
	rec.Job = j
	j.Record = rec
	m.records = append(m.records, rec)
	return rec
}

// retryAfterFailure decides on a retry of a failed call by the retry table: when the table allows
// another attempt and it can start before collection ends, the same model is tried again after the
// backoff (or the upstream's Retry-After), on another worker when the table says so.
func (m *Machine) retryAfterFailure(j *Job, kind resilience.Kind, retryAfter time.Duration, now time.Time) {
	s := j.Slot
	s.state = slotFailed
	p := resilience.PolicyFor(kind)
	if !p.ShouldRetry(j.Attempt) || m.stopped {
		return
	}
	delay := m.delay(p, j.Attempt, retryAfter)
	if !now.Add(delay).Before(m.cfg.CollectBy) {
		m.note(s, j.Worker, j.Attempt+1, kind, delay, "skipped: deadline")
		return
	}
	if kind == resilience.RateLimited && !now.Add(delay).Before(m.queueBy()) {
		// The limit's window opens too late for the request: retrying would wait into the same wall.
		// The slot fails, and a quorum round may ask a model whose provider has room.
		m.note(s, j.Worker, j.Attempt+1, kind, delay, "skipped: max_queue_seconds")
		return
	}
	s.state, s.retryAt, s.avoid = slotWaiting, now.Add(delay), p.Target == resilience.OtherWorker
	s.retry = m.note(s, j.Worker, j.Attempt+1, kind, delay, "scheduled")
}

// queueBy is when the request stops waiting for rate limits.
func (m *Machine) queueBy() time.Time {
	if m.cfg.QueueBy.IsZero() || m.cfg.CollectBy.Before(m.cfg.QueueBy) {
		return m.cfg.CollectBy
	}
	return m.cfg.QueueBy
}

// delay is the wait before retry number attempt: the upstream's own Retry-After as given, otherwise the
// retry table's schedule scaled by RetryScale.
func (m *Machine) delay(p resilience.Policy, attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return p.Delay(attempt, retryAfter, m.rng)
	}
	return time.Duration(float64(p.Delay(attempt, 0, m.rng)) * m.cfg.RetryScale)
}

func (m *Machine) note(s *Slot, from string, attempt int, kind resilience.Kind, delay time.Duration, outcome string) int {
	m.retries = append(m.retries, Retry{Model: s.Model, Provider: s.Provider, FromWorker: from, Attempt: attempt, Kind: kind, Delay: delay, Outcome: outcome})
	m.emit(Effect{Kind: Retried})
	return len(m.retries) - 1
}

// progress starts the quorum grace period once the quorum is in, and settles the round once no call is
// out and no retry is due.
func (m *Machine) progress(now time.Time) {
	if m.finished {
		return
	}
	if m.ok >= m.cfg.MinResponses && m.cfg.QuorumGrace > 0 && m.graceAt.IsZero() && len(m.reserve) == 0 {
		m.graceAt = now.Add(m.cfg.QuorumGrace)
	}
	for _, s := range m.slots {
		if s.state == slotPending || s.state == slotWaiting {
			return
		}
	}
	m.endRound(now)
}

// endRound settles a round: enough answers finish collection; too few start a quorum round while rounds
// and time remain, asking again the failed models whose provider is up (on other workers) and new
// models in place of the others.
func (m *Machine) endRound(now time.Time) {
	if m.stopped {
		m.finish(now, "")
		return
	}
	if m.cfg.Adaptive != nil && m.nextWave(now) {
		return
	}
	if m.ok >= m.cfg.MinResponses || m.round >= m.cfg.Rounds {
		m.finish(now, "")
		return
	}
	m.round++
	missing := m.cfg.MinResponses - m.ok
	again := m.failedToAskAgain(missing)
	delay := m.roundDelay()
	if !now.Add(delay).Before(m.cfg.CollectBy) {
		m.finish(now, "")
		return
	}
	if n := missing - len(again); n > 0 {
		for _, a := range m.env.Replace(n, m.tried, m.refused) {
			again = append(again, m.newSlot(a))
		}
	}
	if len(again) == 0 {
		m.finish(now, "")
		return
	}
	m.scheduleRound(again, delay, now)
}

// failedToAskAgain returns up to missing failed slots that a quorum round may ask again (none when
// the request moves on to other models).
func (m *Machine) failedToAskAgain(missing int) []*Slot {
	var again []*Slot
	for _, s := range m.slots {
		if len(again) == missing || m.cfg.MoveOn {
			break
		}
		if m.recoverable(s) {
			again = append(again, s)
		}
	}
	return again
}

// recoverable reports whether a slot failed in a way that asking again may cure: its last call was
// sent and failed for a recoverable kind, and its provider neither refused connections nor is down.
func (m *Machine) recoverable(s *Slot) bool {
	last := lastRecord(s, m.jobs)
	return s.state == slotFailed && last != nil && last.Status != NotSent && resilience.PolicyFor(last.Kind).Recoverable &&
		!m.refused[s.Provider] && !m.env.ProviderDown(s.Provider)
}

// roundDelay is the wait before a quorum round. The backoff gives failed models time to recover.
// Calls held back by rate limits failed for want of room, not of the model, and a provider that
// refused its connections is not asked again (it is failed over at once): when those are all the
// failures, the request has no time to lose waiting for nothing.
func (m *Machine) roundDelay() time.Duration {
	if m.onlyRateLimitedOrRefused() {
		return 0
	}
	return m.delay(resilience.PolicyFor(resilience.UpstreamTimeout), m.round-1, 0)
}

// scheduleRound schedules the slots of a quorum round to start after delay, on other workers.
func (m *Machine) scheduleRound(again []*Slot, delay time.Duration, now time.Time) {
	outcome := "quorum round " + strconv.Itoa(m.round)
	for _, s := range again {
		s.state, s.retryAt, s.avoid = slotWaiting, now.Add(delay), true
		kind, from := resilience.Kind(""), ""
		if last := lastRecord(s, m.jobs); last != nil {
			kind, from = last.Kind, last.Job.Worker
		}
		s.retry = m.note(s, from, s.attempts, kind, delay, outcome)
	}
}

// onlyRateLimitedOrRefused reports whether every failed call of the request failed for a rate limit
// or a refused connection.
func (m *Machine) onlyRateLimitedOrRefused() bool {
	failed := false
	for _, s := range m.slots {
		if s.state != slotFailed {
			continue
		}
		if last := lastRecord(s, m.jobs); last == nil || !(last.rateLimited() || last.Kind == resilience.ConnectionRefused) {
			return false
		}
		failed = true
	}
	return failed
}

// rateLimited reports whether a call ended for a rate limit: it waited for its permit until the end,
// was refused one for the provider's or the model's limit, or was answered 429.
func (r *Record) rateLimited() bool {
	return r.WaitedForPermit || r.Kind == permitRateLimited || r.Kind == permitModelRateLimited || r.Kind == resilience.RateLimited
}

// providerDown reports whether a call found its provider down: its connection refused or failed, or
// its permit refused for an open breaker or a stopped provider.
func (r *Record) providerDown() bool {
	switch r.Kind {
	case resilience.ConnectionRefused, resilience.ProviderUnreachable, permitBreakerOpen, permitProviderStopped:
		return true
	}
	return false
}

// The records' kinds of permits refused for rate limits, and for a provider that is down.
const (
	permitRateLimited      resilience.Kind = "permit_rate_limited"
	permitModelRateLimited resilience.Kind = "permit_model_rate_limited"
	permitBreakerOpen      resilience.Kind = "permit_breaker_open"
	permitProviderStopped  resilience.Kind = "permit_provider_stopped"
)

// nextWave decides an adaptive quorum at the end of a wave: settled answers (or nothing left to ask)
// end it; otherwise the next wave is asked at once, and nextWave reports true.
func (m *Machine) nextWave(now time.Time) bool {
	a := m.cfg.Adaptive
	var v Verdict
	if m.ok > 0 {
		v = a.Settle(m.answers(), len(m.reserve))
		m.quorum.Posterior = v.Posterior
	}
	switch {
	case v.Settled:
		m.quorum.Stopped = Settled
		return false
	case len(m.reserve) == 0:
		m.quorum.Stopped = Cap
		return false
	}
	n := a.Wave
	if v.Next > 0 {
		n = v.Next
	}
	n = min(n, len(m.reserve))
	m.quorum.Waves++
	for _, r := range m.reserve[:n] {
		m.startJob(m.newSlot(r), r.Worker) // planning assigned every selected model a worker
	}
	m.reserve = m.reserve[n:]
	m.progress(now)
	return true
}

// answers are the jobs that answered so far, in slot order.
func (m *Machine) answers() []*Job {
	var out []*Job
	for _, s := range m.slots {
		if s.state == slotOK {
			out = append(out, s.answer)
		}
	}
	return out
}

// lastRecord is the record of a slot's latest settled call, or nil.
func lastRecord(s *Slot, jobs []*Job) *Record {
	for i := len(jobs) - 1; i >= 0; i-- {
		if jobs[i].Slot == s && jobs[i].Record != nil {
			return jobs[i].Record
		}
	}
	return nil
}

// finish ends collection: every call still out is settled (not sent, or cancelled when it was running)
// with no blame, its permit given back and its worker told to stop.
func (m *Machine) finish(now time.Time, kind resilience.Kind) {
	m.finished = true
	for _, j := range m.jobs {
		if j.state == settled {
			continue
		}
		status, k := NotSent, resilience.NotSent
		if j.state == running {
			status, k = Cancelled, resilience.Cancelled
		}
		sent := j.state != acquiring
		rec := m.settle(j, &Record{Status: status, Kind: k, WaitedForPermit: !sent})
		m.emit(Effect{Kind: Settle, Job: j, Record: rec})
		if sent {
			m.emit(Effect{Kind: Cancel, Job: j})
		}
	}
	if m.cfg.Adaptive != nil && len(m.reserve) > 0 && m.quorum.Stopped == AllAsked {
		m.quorum.Stopped = Deadline
	}
	m.quorum.Asked = len(m.slots)
	d := Done{Rounds: m.round, Failure: kind, Quorum: m.quorum}
	for _, s := range m.slots {
		switch s.state {
		case slotOK:
			d.Answers = append(d.Answers, s.answer)
		case slotWaiting:
			s.state = slotFailed
		}
	}
	d.Degraded = len(d.Answers) < m.cfg.MinResponses
	if kind == "" && len(d.Answers) == 0 {
		d.Failure, d.RetryAfter = m.nothing()
	}
	m.done = d
	m.emit(Effect{Kind: Finish, At: now})
}

// nothing explains a collection without an answer: a refusal that ended collection (the caller's key,
// or an answer dropped for the bytes in flight) is why; when every call waited for a permit, was refused
// one for a rate limit or was answered 429, the rate limits are why (and a wait cures it); when every
// call was refused for one reason the caller must hear (a refused key or account, a model not found,
// a task too large), that reason; when every call found its provider down (refused or failed
// connections, open breakers), all providers are down; otherwise nothing came back.
func (m *Machine) nothing() (resilience.Kind, time.Duration) {
	if len(m.records) == 0 {
		return resilience.NoResponses, 0
	}
	wait, limited, down := time.Duration(0), true, true
	refusal := m.records[0].Kind
	for _, r := range m.records {
		if endsCollection(r.Kind) {
			return r.Kind, 0 // what ended collection
		}
		if !r.rateLimited() {
			limited = false
		}
		if !r.providerDown() {
			down = false
		}
		if r.Kind != refusal {
			refusal = ""
		}
		wait = max(wait, r.RetryAfter)
	}
	switch {
	case limited:
		return resilience.RateLimited, max(wait, time.Second)
	case down:
		return resilience.AllProvidersDown, 0
	case refusal == resilience.InvalidAPIKey, refusal == resilience.PaymentRequired, refusal == resilience.ModelNotFound, refusal == resilience.RequestTooLarge:
		return refusal, 0
	}
	return resilience.NoResponses, 0
}

// emitWake asks for a tick at the earliest moment something is due: a retry, the grace period's end,
// the end of collection.
func (m *Machine) emitWake(now time.Time) []Effect {
	if m.finished {
		return m.out
	}
	at := m.cfg.CollectBy
	if !m.graceAt.IsZero() && m.graceAt.Before(at) {
		at = m.graceAt
	}
	for _, s := range m.slots {
		if s.state == slotWaiting && s.retryAt.Before(at) {
			at = s.retryAt
		}
	}
	if !at.Equal(m.wakeAt) {
		m.wakeAt = at
		m.emit(Effect{Kind: Wake, At: at})
	}
	return m.out
}

// endsCollection reports a failure after which no other model is asked: the caller's own refusal (the
// key's budget, limits or models: another model would be refused alike) or an answer dropped for the
// bytes in flight (another's would be dropped too). The calls out finish, and collection ends.
func endsCollection(kind resilience.Kind) bool {
	return resilience.CallersOwn(kind) || kind == resilience.Overloaded
}
