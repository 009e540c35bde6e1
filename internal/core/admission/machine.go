package admission

import (
	"time"

	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// Machine is one provider's admission: its breaker, a breaker per model (outlier ejection), the
// models' own rate-limit blocks, the queue of acquisitions, the reservation out at the limiter and the
// leases granted. Events go in (an acquisition, the limiter's answer, a call's outcome, a wake-up);
// effects come out (a grant, a refusal, a reservation to ask the limiter for, a release, a wake-up to
// set), which its shell carries out: Effects hands them over. A lease holds the call's breaker
// tickets: if its outcome never comes (the asker stopped first), it is given back once its deadline
// and grace have passed, so no capacity leaks.
//
// Every event takes two times: now on the wall clock (deadlines, queue bounds, leases and the limits'
// windows) and clk on the injected clock (the breakers and the models' blocks). A Machine is not safe
// for concurrent use.
type Machine struct {
	cfg     Config
	breaker *resilience.Breaker
	spread  resilience.Spread
	models  map[string]*model
	waiting []waiter
	// reserving is the acquisition whose reservation is out; only one is, so acquisitions are served
	// in order. Until limitedUntil (or, with waitRelease, until a call of this provider ends) the
	// limiter has said no and is not asked again.
	reserving    *reservation
	limitedUntil time.Time
	waitRelease  bool
	// releases counts the limiter's answers to releases: a refusal for a full limit while one came
	// answered a question the release had changed already, so it is asked again, not waited on.
	releases  uint64
	roomIn    time.Duration
	leases    map[string]lease
	disabled  string
	lastFault string
	stopped   bool
	// modelsChanged says the list of models out of the pool changed since the shell last read it.
	modelsChanged bool
	hours         [24]hourBucket
	out, spare    []Effect
}

// Config is a machine's settings. The zero value of each duration takes its default.
type Config struct {
	// Breaker is the provider's breaker; ModelBreaker returns a model's (nil: the defaults).
	Breaker      resilience.Settings
	ModelBreaker func(model string) resilience.Settings
	// MaxQueue is how long an acquisition without its own bound waits for the limits at most
	// (DefaultMaxQueue).
	MaxQueue time.Duration
	// LeaseGrace is how long after a lease's deadline its outcome may still come (DefaultLeaseGrace).
	LeaseGrace time.Duration
}

// DefaultLeaseGrace is how long after a permit's deadline its outcome may still arrive before the
// permit is presumed abandoned.
const DefaultLeaseGrace = 5 * time.Second

// Request is an acquisition: a permit for one call of Model, with its estimate of tokens, its
// deadline and its request's queue bound (zero when absent). Ask is the shell's own value, handed
// back in the effects that answer it.
type Request struct {
	ID, Model         string
	Tokens            int
	Deadline, QueueBy time.Time
	Ask               any
}

// Answer is the limiter's answer to a reservation.
type Answer struct {
	Allowed bool
	// RetryAfter is the window's next free moment when not allowed; zero when a slot comes back as a
	// call ends.
	RetryAfter time.Duration
	Reason     string
	// RoomIn is how long until the limits have room, as the limiter says.
	RoomIn time.Duration
	// TooLarge says the call can never fit the limits; Failed that the limiter could not answer.
	TooLarge bool
	Failed   error
}

// Outcome settles a call's permit with its verdict.
type Outcome struct {
	ID string
	// ProviderEffect and ModelEffect are the call's effects on the provider's breaker and the model's.
	ProviderEffect, ModelEffect resilience.Effect
	// Tokens is what the call used; zero or less: unknown.
	Tokens int
	// ProviderWait blocks every call of the provider, ModelWait the model's, for that long: the
	// provider's word (a 429, spent limits).
	ProviderWait, ModelWait time.Duration
	// Fault is the failure as callers are told it, when the call failed a breaker.
	Fault string
	// Disable, when not empty, disables the provider until its key changes, for that reason.
	Disable     string
	RemoveModel bool
	// Stop says the asker stopped waiting before it heard of its grant: a dispatched job is cancelled.
	Stop bool
	// Words is the shell's own record of what the provider said of its limits, handed back in the
	// Release.
	Words any
}

// Kind is what an effect asks the shell to do.
type Kind int

const (
	// Grant answers Ask with a permit (Probe: it carries a breaker's probe).
	Grant Kind = iota
	// Deny answers Ask with a refusal: Reason, and RetryAfter when known.
	Deny
	// Reserve asks the limiter for a reservation of Tokens for ID; its answer comes back as Reserved.
	Reserve
	// Release gives ID's reservation back to the limiter with the Tokens it used (-1: unknown; 0: a
	// reservation withdrawn unused), then the provider's Words.
	Release
	// Cancel stops Ask's job at its worker: its asker stopped waiting after it was dispatched.
	Cancel
	// Wake asks for an Event no later than At.
	Wake
	// Idle says no wake-up is needed: no lease runs and nothing waits.
	Idle
	// Expired reports ID's lease given back without its outcome.
	Expired
	// Duplicate drops Ask: a twin of its job holds a lease already.
	Duplicate
	// LimiterDown reports the limiter failed (Err); it is asked again shortly.
	LimiterDown
	// Limited reports the limiter said no (Reason, RetryAfter).
	Limited
	// Disabled reports the provider disabled until its key changes (Reason).
	Disabled
	// Removed reports Model taken out of the pool: the provider does not know it.
	Removed
)

// Effect is one thing the shell does; only the fields its Kind names are set.
type Effect struct {
	Kind       Kind
	Ask        any
	ID, Model  string
	Tokens     int
	Probe      bool
	Reason     string
	RetryAfter time.Duration
	At         time.Time
	Err        error
	Words      any
}

// Refusals that name no limit.
const (
	ReasonBreakerOpen   = "breaker_open"
	ReasonModelEjected  = "model_ejected"
	ReasonProbe         = "probe_in_flight"
	ReasonModelProbe    = "model_probe_in_flight"
	ReasonStopped       = "provider_stopped"
	ReasonRequestTooBig = string(resilience.RequestTooLarge)
)

// limiterRetry is how soon a failed limiter is asked again: admitting unchecked is not an option.
const limiterRetry = 100 * time.Millisecond

// probeRetry is when to come back after a refusal because a half-open breaker's probe is out.
const probeRetry = time.Second

type model struct {
	breaker      *resilience.Breaker
	blockedUntil time.Time // its own 429, until its reset (injected clock)
	removed      bool
}

type waiter struct {
	r     Request
	bound time.Time
}

type reservation struct {
	r                   Request
	ticket, modelTicket resilience.Ticket
	withdrawn           bool
	// releases is the machine's count of released slots when the reservation went out.
	releases uint64
}

type lease struct {
	r                   Request
	until               time.Time
	ticket, modelTicket resilience.Ticket
}

type hourBucket struct {
	hour          int64
	calls, faults int64
}

// New returns a machine that resumes from prev, the provider's last published snapshot (zero at
// first): the breakers keep their state in a newer generation, the models out of the pool stay out.
func New(cfg Config, prev providerstate.Snapshot) *Machine {
	m := &Machine{cfg: cfg, models: map[string]*model{}, leases: map[string]lease{}}
	m.breaker = resilience.ResumeBreaker(cfg.Breaker, prev.Breaker)
	m.spread = resilience.NewSpread(m.breaker.Settings().Threshold)
	for id, st := range prev.Models {
		md := m.model(id)
		switch st.Reason {
		case providerstate.ModelRemoved:
			md.removed = true
		case providerstate.ModelRateLimited:
			md.blockedUntil = st.Until
		case providerstate.ModelEjected:
			md.breaker = resilience.ResumeBreaker(md.breaker.Settings(), resilience.Snapshot{State: resilience.Open, OpenUntil: st.Until})
		}
	}
	m.modelsChanged = true
	return m
}

// Effects hands over the effects of the events since the last call. The slice is the shell's until
// its next call of Effects: the events it applies meanwhile (a limiter's answer in place) add theirs to
// the other of two buffers, which the machine reuses, so that an event allocates no effects.
func (m *Machine) Effects() []Effect {
	out := m.out
	m.out, m.spare = m.spare[:0], out
	return out
}

func (m *Machine) emit(e Effect) { m.out = append(m.out, e) }

// Acquire queues an acquisition and serves the queue. A twin of a leased job is dropped.
func (m *Machine) Acquire(now, clk time.Time, r Request) {
	if _, held := m.leases[r.ID]; held {
		m.emit(Effect{Kind: Duplicate, Ask: r.Ask})
		return
	}
	if m.stopped {
		m.emit(Effect{Kind: Deny, Ask: r.Ask, Reason: ReasonStopped})
		return
	}
	maxQueue := m.cfg.MaxQueue
	if maxQueue <= 0 {
		maxQueue = DefaultMaxQueue
	}
	m.waiting = append(m.waiting, waiter{r: r, bound: QueueBound(now, maxQueue, r.QueueBy, r.Deadline)})
	m.serve(now, clk)
}

// Reserved applies the limiter's answer to the reservation out for id, and serves the queue.
func (m *Machine) Reserved(now, clk time.Time, id string, a Answer) {
	res := m.reserving
	if res == nil || res.r.ID != id {
		return
	}
	m.reserving = nil
	if res.withdrawn {
		m.roomIn = a.RoomIn
		m.releaseTickets(res.r.Model, res.ticket, res.modelTicket)
		if a.Allowed && a.Failed == nil {
			m.emit(Effect{Kind: Release, ID: id})
		}
	} else if !m.settleReservation(now, res, a) {
		m.dropWaiting(id)
	}
	m.serve(now, clk)
}

// Usage applies the limiter's word on its use: when the limits have room, and whether it answers a
// release, which frees a slot the queue may wait for: then the queue is served.
func (m *Machine) Usage(now, clk time.Time, roomIn time.Duration, released bool) {
	m.roomIn = roomIn
	if released {
		m.releases++
		m.waitRelease = false
		m.serve(now, clk)
	}
}

// Settle ends a job: an acquisition still waiting is withdrawn; a lease ends with the call's verdict
// on the provider's breaker and the model's, the blocks the provider's word asks for, the model's
// removal, the provider's disabling; then the queue is served.
func (m *Machine) Settle(now, clk time.Time, o Outcome) {
	m.settle(now, clk, o)
	m.serve(now, clk)
	if len(m.leases) == 0 && len(m.waiting) == 0 {
		m.emit(Effect{Kind: Idle})
	}
}

// settle ends the job o is the outcome of: withdraws it while it waits, or gives back its lease and
// applies what its call says of the provider and the model.
func (m *Machine) settle(now, clk time.Time, o Outcome) {
	if res := m.reserving; res != nil && res.r.ID == o.ID {
		res.withdrawn = true // its reservation is given back when the limiter answers
	}
	if m.dropWaiting(o.ID) {
		return
	}
	l, held := m.leases[o.ID]
	if !held {
		return // expired, or given back already
	}
	delete(m.leases, o.ID)
	if o.Stop {
		m.emit(Effect{Kind: Cancel, Ask: l.r.Ask, ID: o.ID})
	}
	md := m.model(l.r.Model)
	m.blockFor(md, now, clk, o)
	m.judge(&l, md, clk, o)
	m.disableOrRemove(l.r.Model, md, o)
	tokens := -1
	if o.Tokens > 0 {
		tokens = o.Tokens
	}
	m.emit(Effect{Kind: Release, ID: o.ID, Tokens: tokens, Words: o.Words})
}

// blockFor blocks the provider and the model for the waits the provider's word asks for.
func (m *Machine) blockFor(md *model, now, clk time.Time, o Outcome) {
	if o.ProviderWait > 0 {
		m.limitedUntil = later(m.limitedUntil, now.Add(o.ProviderWait))
	}
	if o.ModelWait > 0 {
		md.blockedUntil = later(md.blockedUntil, clk.Add(o.ModelWait))
		m.modelsChanged = true
	}
}

// judge settles the lease's tickets on the provider's breaker and the model's with the call's
// verdict, trips the provider's breaker when faults spread across its models, and counts the call.
func (m *Machine) judge(l *lease, md *model, clk time.Time, o Outcome) {
	m.breaker.Settle(l.ticket, o.ProviderEffect)
	md.breaker.Settle(l.modelTicket, o.ModelEffect)
	failed := o.ProviderEffect == resilience.Failure || o.ModelEffect == resilience.Failure
	switch {
	case o.ModelEffect == resilience.Failure:
		if m.spread.Fault(l.r.Model) {
			m.breaker.Trip() // consecutive faults across several models: the provider itself is failing
		}
	case o.ProviderEffect == resilience.Success:
		m.spread.Success()
	}
	if o.Fault != "" && failed {
		m.lastFault = o.Fault
	}
	if o.ProviderEffect != resilience.Neutral || o.ModelEffect != resilience.Neutral {
		m.count(clk, failed)
	}
}

// disableOrRemove disables the provider, or removes the model id, when the outcome says so and it is
// not done already.
func (m *Machine) disableOrRemove(id string, md *model, o Outcome) {
	if o.Disable != "" && m.disabled == "" {
		m.disabled = o.Disable
		m.emit(Effect{Kind: Disabled, Reason: o.Disable})
	}
	if o.RemoveModel && !md.removed {
		md.removed, m.modelsChanged = true, true
		m.emit(Effect{Kind: Removed, Model: id})
	}
}

// Wake gives back the leases whose outcome never came, serves the queue and asks for the next
// wake-up while leases run.
func (m *Machine) Wake(now, clk time.Time) {
	for id, l := range m.leases {
		if !now.Before(l.until) {
			delete(m.leases, id)
			m.releaseTickets(l.r.Model, l.ticket, l.modelTicket)
			m.emit(Effect{Kind: Release, ID: id, Tokens: -1})
			m.emit(Effect{Kind: Expired, ID: id})
		}
	}
	m.serve(now, clk)
	for _, l := range m.leases {
		m.emit(Effect{Kind: Wake, At: l.until})
	}
}

// PeerOpened opens the breaker because another controller's opened, until until: that controller saw
// the provider fail, so this one stops calling it too, at most for its own open period (whatever the
// other's clock says), and then half-opens on its own. An open breaker keeps its own period. It
// reports whether the breaker opened.
func (m *Machine) PeerOpened(now, clk, until time.Time) bool {
	s := m.breaker.Settings()
	until = earlier(until, clk.Add(s.OpenFor))
	if !until.After(clk) || m.breaker.State() == resilience.Open {
		return false
	}
	m.breaker = resilience.ResumeBreaker(s, resilience.Snapshot{State: resilience.Open, OpenUntil: until, Generation: m.breaker.Snapshot().Generation})
	m.serve(now, clk)
	return true
}

// Enable takes a disabled provider back (its key changed); it reports whether it was disabled.
func (m *Machine) Enable() bool {
	was := m.disabled != ""
	m.disabled = ""
	return was
}

// Stop refuses every waiting acquisition and every one to come: the provider is stopped for good.
func (m *Machine) Stop() {
	m.stopped = true
	for _, w := range m.waiting {
		m.emit(Effect{Kind: Deny, Ask: w.r.Ask, Reason: ReasonStopped})
	}
	m.waiting = nil
}

// serve answers waiting acquisitions in arrival order. A refusal (a removed or ejected model, the
// provider's breaker) is answered at once. An acquisition for a model blocked by its own 429 waits for
// the model's reset when its queue bound allows, without holding up the others. The rest go to the
// limiter one at a time, in order; while it says no, they wait for the window's next free moment, each
// only while that comes by its queue bound: past it, or when the window frees later, it is refused at
// once with the wait (Queue), so that overload is shed instead of held.
func (m *Machine) serve(now, clk time.Time) {
	state := Provider{Now: now, Clock: clk, Disabled: m.disabled != "", Busy: m.reserving != nil,
		Limited: m.waitRelease || now.Before(m.limitedUntil), WindowFree: m.windowFree(now), RoomIn: m.roomIn}
	var next time.Time
	kept := m.waiting[:0]
	for _, w := range m.waiting {
		if m.reserving != nil && m.reserving.r.ID == w.r.ID {
			kept = append(kept, w)
			continue
		}
		if _, held := m.leases[w.r.ID]; held {
			m.emit(Effect{Kind: Duplicate, Ask: w.r.Ask}) // its twin was granted first
			continue
		}
		md := m.model(w.r.Model)
		t := TakeTurn(state, Model{Removed: md.removed, BlockedUntil: md.blockedUntil}, Acquisition{Deadline: w.r.Deadline, Bound: w.bound})
		switch t.Verdict {
		case Refuse:
			m.emit(Effect{Kind: Deny, Ask: w.r.Ask, Reason: t.Reason, RetryAfter: t.RetryAfter})
			continue
		case Hold:
			next = Soonest(next, t.Until)
			kept = append(kept, w)
			continue
		}
		ticket, err := m.breaker.Allow()
		if err != nil {
			m.refuse(w.r, ReasonBreakerOpen, ReasonProbe, err, m.breaker, clk)
			continue
		}
		modelTicket, err := md.breaker.Allow()
		if err != nil {
			m.breaker.Release(ticket)
			m.refuse(w.r, ReasonModelEjected, ReasonModelProbe, err, md.breaker, clk)
			continue
		}
		m.reserving = &reservation{r: w.r, ticket: ticket, modelTicket: modelTicket, releases: m.releases}
		state.Busy = true
		m.emit(Effect{Kind: Reserve, ID: w.r.ID, Tokens: w.r.Tokens})
		kept = append(kept, w)
	}
	clear(m.waiting[len(kept):])
	m.waiting = kept
	if at := WakeAt(next, len(kept), now, m.limitedUntil); !at.IsZero() {
		m.emit(Effect{Kind: Wake, At: at})
	}
}

// settleReservation applies the limiter's answer to a reservation: a grant leases the permit, a
// refusal gives the breaker tickets back. It reports whether the acquisition still waits.
func (m *Machine) settleReservation(now time.Time, res *reservation, a Answer) bool {
	m.roomIn = a.RoomIn
	if !a.Allowed || a.TooLarge || a.Failed != nil {
		m.releaseTickets(res.r.Model, res.ticket, res.modelTicket)
	}
	switch {
	case a.TooLarge:
		m.emit(Effect{Kind: Deny, Ask: res.r.Ask, Reason: ReasonRequestTooBig})
		return false
	case a.Failed != nil:
		m.limitedUntil = now.Add(limiterRetry)
		m.emit(Effect{Kind: LimiterDown, Err: a.Failed})
		return true
	case !a.Allowed:
		switch {
		case a.RetryAfter > 0:
			m.limitedUntil = now.Add(a.RetryAfter)
		case m.releases == res.releases:
			m.waitRelease = true // a slot comes back when one of this provider's calls ends
		}
		// Else a slot came back while the limiter answered: the queue is served again at once, for
		// no later release may come to wake it.
		m.emit(Effect{Kind: Limited, Reason: a.Reason, RetryAfter: a.RetryAfter})
		return true
	}
	until := res.r.Deadline
	if until.IsZero() {
		until = now.Add(time.Minute)
	}
	grace := m.cfg.LeaseGrace
	if grace <= 0 {
		grace = DefaultLeaseGrace
	}
	until = until.Add(grace)
	m.leases[res.r.ID] = lease{r: res.r, until: until, ticket: res.ticket, modelTicket: res.modelTicket}
	m.emit(Effect{Kind: Grant, Ask: res.r.Ask, ID: res.r.ID, Probe: res.ticket.Probe() || res.modelTicket.Probe()})
	m.emit(Effect{Kind: Wake, At: until})
	return false
}

// refuse answers an acquisition a breaker refused: open (until its open period ends) or half-open
// with its probe out.
func (m *Machine) refuse(r Request, open, probe string, err error, b *resilience.Breaker, clk time.Time) {
	if err == resilience.ErrProbeInFlight {
		m.emit(Effect{Kind: Deny, Ask: r.Ask, Reason: probe, RetryAfter: probeRetry})
		return
	}
	m.emit(Effect{Kind: Deny, Ask: r.Ask, Reason: open, RetryAfter: max(b.Snapshot().OpenUntil.Sub(clk), 0)})
}

func (m *Machine) releaseTickets(id string, ticket, modelTicket resilience.Ticket) {
	m.breaker.Release(ticket)
	m.model(id).breaker.Release(modelTicket)
}

// dropWaiting drops the acquisition id from the queue, and reports whether it was waiting there.
func (m *Machine) dropWaiting(id string) bool {
	for i, w := range m.waiting {
		if w.r.ID == id {
			m.waiting = append(m.waiting[:i], m.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// windowFree is the rate window's next free moment as far as the machine knows it, or zero when no
// time is known: a reservation is out, or a concurrency slot comes back when a call ends.
func (m *Machine) windowFree(now time.Time) time.Time {
	if now.Before(m.limitedUntil) {
		return m.limitedUntil
	}
	return time.Time{}
}

// model returns a model's state, creating it on first use.
func (m *Machine) model(id string) *model {
	if md, ok := m.models[id]; ok {
		return md
	}
	var s resilience.Settings
	if m.cfg.ModelBreaker != nil {
		s = m.cfg.ModelBreaker(id)
	} else {
		s = resilience.ModelBreakerSettings(id)
	}
	then := s.OnStateChange
	s.OnStateChange = func(t resilience.Transition) {
		m.modelsChanged = true
		if then != nil {
			then(t)
		}
	}
	md := &model{breaker: resilience.NewBreaker(s)}
	m.models[id] = md
	return md
}

func (m *Machine) count(clk time.Time, fault bool) {
	hour := clk.Unix() / 3600
	b := &m.hours[hour%24]
	if b.hour != hour {
		*b = hourBucket{hour: hour}
	}
	b.calls++
	if fault {
		b.faults++
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Leased reports whether id holds a lease, and for which model.
func (m *Machine) Leased(id string) (model string, held bool) {
	l, held := m.leases[id]
	return l.r.Model, held
}

// Breaker is the provider's breaker as it stands.
func (m *Machine) Breaker() resilience.Snapshot { return m.breaker.Snapshot() }

// BreakerSettings are the provider's breaker's settings.
func (m *Machine) BreakerSettings() resilience.Settings { return m.breaker.Settings() }

// Waiting is how many acquisitions wait.
func (m *Machine) Waiting() int { return len(m.waiting) }

// Disabled is why the provider takes no call until its key changes, or empty.
func (m *Machine) Disabled() string { return m.disabled }

// LastFault is the last failure that failed the provider's breaker or a model's, as callers were told
// it: it names why a breaker is open.
func (m *Machine) LastFault() string { return m.lastFault }

// Calls24h counts the calls with a verdict in the 24 hours up to clk, and the faults among them.
func (m *Machine) Calls24h(clk time.Time) (calls, faults int64) {
	hour := clk.Unix() / 3600
	for _, b := range m.hours {
		if b.hour > hour-24 {
			calls += b.calls
			faults += b.faults
		}
	}
	return calls, faults
}

// OutOfPool lists the models out of the pool at clk and why, when that list may have changed since
// the last call; changed is false otherwise.
func (m *Machine) OutOfPool(clk time.Time) (out map[string]providerstate.ModelState, changed bool) {
	if !m.modelsChanged {
		return nil, false
	}
	m.modelsChanged = false
	for id, md := range m.models {
		var st providerstate.ModelState
		switch b := md.breaker.Snapshot(); {
		case md.removed:
			st = providerstate.ModelState{Reason: providerstate.ModelRemoved}
		case b.State == resilience.Open:
			st = providerstate.ModelState{Reason: providerstate.ModelEjected, Until: b.OpenUntil}
		case clk.Before(md.blockedUntil):
			st = providerstate.ModelState{Reason: providerstate.ModelRateLimited, Until: md.blockedUntil}
		default:
			continue
		}
		if out == nil {
			out = map[string]providerstate.ModelState{}
		}
		out[id] = st
	}
	return out, true
}

// Models is how many models the machine holds state for: only those it was asked for.
func (m *Machine) Models() int { return len(m.models) }
