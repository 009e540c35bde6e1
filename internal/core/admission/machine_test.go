package admission

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
)

// step is one event at a moment (seconds after the start, on both clocks) and the effects it must
// give, in order. A request's Ask is its id.
type step struct {
	at    float64
	event func(m *Machine, now, clk time.Time)
	want  []Effect
}

var errLimiter = errors.New("redis: connection refused")

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// acquire asks for a permit for id with a deadline in deadline seconds after the start (0: none).
func acquire(id, model string, deadline float64) func(*Machine, time.Time, time.Time) {
	return func(m *Machine, now, _ time.Time) {
		r := Request{ID: id, Model: model, Tokens: 10, Ask: id}
		if deadline > 0 {
			r.Deadline = epoch.Add(secs(deadline))
		}
		m.Acquire(now, now, r)
	}
}

func answer(id string, a Answer) func(*Machine, time.Time, time.Time) {
	return func(m *Machine, now, clk time.Time) { m.Reserved(now, clk, id, a) }
}

func settle(o Outcome) func(*Machine, time.Time, time.Time) {
	return func(m *Machine, now, clk time.Time) { m.Settle(now, clk, o) }
}

func wake(m *Machine, now, clk time.Time) { m.Wake(now, clk) }

func ok(id string) Outcome {
	return Outcome{ID: id, ProviderEffect: resilience.Success, ModelEffect: resilience.Success}
}

var allowed = Answer{Allowed: true}

func at(s float64) time.Time { return epoch.Add(secs(s)) }

// Effects a test expects.
func reserve(id string) Effect { return Effect{Kind: Reserve, ID: id, Tokens: 10} }
func grant(id string) Effect   { return Effect{Kind: Grant, Ask: id, ID: id} }
func wakeAt(s float64) Effect  { return Effect{Kind: Wake, At: at(s)} }
func deny(id, reason string, retry float64) Effect {
	return Effect{Kind: Deny, Ask: id, Reason: reason, RetryAfter: secs(retry)}
}
func release(id string, tokens int) Effect { return Effect{Kind: Release, ID: id, Tokens: tokens} }

// leaseGrace is the tests' grace after a lease's deadline.
const leaseGrace = time.Second

// leaseEnd is the wake-up a grant asks for: its deadline plus the grace.
func leaseEnd(deadline float64) Effect { return wakeAt(deadline + leaseGrace.Seconds()) }

var idle = Effect{Kind: Idle}

func TestMachine(t *testing.T) {
	tests := []struct {
		desc  string
		prev  providerstate.Snapshot
		steps []step
	}{
		{"a permit with room: reserved, then granted with its lease's wake-up", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{1, settle(ok("a")), []Effect{release("a", -1), idle}},
		}},
		{"acquisitions go to the limiter one at a time, in order", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, acquire("b", "m", 30), nil},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30), reserve("b")}},
			{0, answer("b", allowed), []Effect{grant("b"), leaseEnd(30)}},
		}},
		{"an answer for another job than the one out changes nothing", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("z", allowed), nil},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
		}},
		{"the window frees within the bound: it waits and asks again then", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", Answer{RetryAfter: 2 * time.Second, Reason: "requests"}),
				[]Effect{{Kind: Limited, Reason: "requests", RetryAfter: 2 * time.Second}, wakeAt(2)}},
			{2, wake, []Effect{reserve("a")}},
			{2, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
		}},
		{"a lease's end coming before the window frees keeps the window's wake-up (once left to the deadline: 480 s)",
			providerstate.Snapshot{}, []step{
				{0, acquire("a", "m", 0.5), []Effect{reserve("a")}},
				{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(0.5)}},
				{0, acquire("b", "m", 30), []Effect{reserve("b")}},
				{0, answer("b", Answer{RetryAfter: 3 * time.Second}), []Effect{{Kind: Limited, RetryAfter: 3 * time.Second}, wakeAt(3)}},
				{1.5, wake, []Effect{release("a", -1), {Kind: Expired, ID: "a"}, wakeAt(3)}},
				{3, wake, []Effect{reserve("b")}},
			}},
		{"the window frees past the bound: refused at once with the wait", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", Answer{RetryAfter: 9 * time.Second}), []Effect{{Kind: Limited, RetryAfter: 9 * time.Second}, deny("a", ReasonRateLimited, 9)}},
		}},
		{"concurrency full: it waits for a call's end, and the release that frees a slot serves it (a missed one waited for its bound)",
			providerstate.Snapshot{}, []step{
				{0, acquire("a", "m", 30), []Effect{reserve("a")}},
				{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
				{0, acquire("b", "m", 30), []Effect{reserve("b")}},
				{0, answer("b", Answer{Reason: "concurrency"}), []Effect{{Kind: Limited, Reason: "concurrency"}, wakeAt(5)}},
				{1, settle(ok("a")), []Effect{release("a", -1), wakeAt(5)}},
				{1, func(m *Machine, now, clk time.Time) { m.Usage(now, clk, 0, true) }, []Effect{reserve("b")}},
			}},
		{"concurrency full, but a slot came back while the limiter answered: it is asked again at once (no later release would wake it)",
			providerstate.Snapshot{}, []step{
				{0, acquire("a", "m", 30), []Effect{reserve("a")}},
				{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
				{0, acquire("b", "m", 30), []Effect{reserve("b")}},
				{1, settle(ok("a")), []Effect{release("a", -1)}},
				{1, func(m *Machine, now, clk time.Time) { m.Usage(now, clk, 0, true) }, nil},
				{1, answer("b", Answer{Reason: "concurrency"}), []Effect{{Kind: Limited, Reason: "concurrency"}, reserve("b")}},
				{1, answer("b", allowed), []Effect{grant("b"), leaseEnd(30)}},
			}},
		{"a usage refresh is not a release: the queue waits on", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", Answer{Reason: "concurrency"}), []Effect{{Kind: Limited, Reason: "concurrency"}, wakeAt(5)}},
			{1, func(m *Machine, now, clk time.Time) { m.Usage(now, clk, 0, false) }, nil},
			{5, wake, []Effect{deny("a", ReasonRateLimited, 1)}},
		}},
		{"a model blocked by its own 429 waits for its reset without holding up the others", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{0, settle(Outcome{ID: "a", ProviderEffect: resilience.Neutral, ModelEffect: resilience.Neutral, ModelWait: 3 * time.Second}),
				[]Effect{release("a", -1), idle}},
			{1, acquire("b", "m", 30), []Effect{wakeAt(3)}},
			{1, acquire("c", "other", 30), []Effect{reserve("c"), wakeAt(3)}},
			{1, answer("c", allowed), []Effect{grant("c"), leaseEnd(30), wakeAt(3)}},
			{3, wake, []Effect{reserve("b"), leaseEnd(30)}},
		}},
		{"the provider's own word blocks every call until its reset", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{0, settle(Outcome{ID: "a", ProviderEffect: resilience.Neutral, ModelEffect: resilience.Neutral, ProviderWait: 2 * time.Second, Words: "429"}),
				[]Effect{{Kind: Release, ID: "a", Tokens: -1, Words: "429"}, idle}},
			{1, acquire("b", "other", 30), []Effect{wakeAt(2)}},
			{2, wake, []Effect{reserve("b")}},
		}},
		{"two failures open the breaker; its refusals say when it half-opens; one probe then", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 60), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(60)}},
			{0, acquire("b", "n", 60), []Effect{reserve("b")}},
			{0, answer("b", allowed), []Effect{grant("b"), leaseEnd(60)}},
			{1, settle(Outcome{ID: "a", ProviderEffect: resilience.Failure, Fault: "upstream 500"}), []Effect{release("a", -1)}},
			{1, settle(Outcome{ID: "b", ProviderEffect: resilience.Failure}), []Effect{release("b", -1), idle}},
			{2, acquire("c", "m", 60), []Effect{deny("c", ReasonBreakerOpen, 9)}},
			{11, acquire("d", "m", 60), []Effect{reserve("d")}},
			{11, acquire("e", "m", 60), nil},
			{11, answer("d", allowed), []Effect{{Kind: Grant, Ask: "d", ID: "d", Probe: true}, leaseEnd(60), deny("e", ReasonProbe, 1)}},
		}},
		{"a model's consecutive failures eject it alone", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 60), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(60)}},
			{0, acquire("b", "m", 60), []Effect{reserve("b")}},
			{0, answer("b", allowed), []Effect{grant("b"), leaseEnd(60)}},
			{1, settle(Outcome{ID: "a", ModelEffect: resilience.Failure}), []Effect{release("a", -1)}},
			{1, settle(Outcome{ID: "b", ModelEffect: resilience.Failure}), []Effect{release("b", -1), idle}},
			{2, acquire("c", "m", 60), []Effect{deny("c", ReasonModelEjected, 9)}},
			{2, acquire("d", "other", 60), []Effect{reserve("d")}},
		}},
		{"an asker that stops after its job was dispatched cancels it; one still waiting is withdrawn", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{0, acquire("b", "m", 30), []Effect{reserve("b")}},
			{0, answer("b", Answer{Reason: "concurrency"}), []Effect{{Kind: Limited, Reason: "concurrency"}, wakeAt(5)}},
			{1, settle(Outcome{ID: "a", Stop: true}), []Effect{{Kind: Cancel, Ask: "a", ID: "a"}, release("a", -1), wakeAt(5)}},
			{1, settle(Outcome{ID: "b", Stop: true}), []Effect{idle}},
		}},
		{"a job settled while its reservation is out gives it back when the limiter answers", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, settle(Outcome{ID: "a"}), []Effect{idle}},
			{0, answer("a", allowed), []Effect{release("a", 0)}},
			{0, acquire("b", "m", 30), []Effect{reserve("b")}},
		}},
		{"a lease whose outcome never comes is given back after its deadline and grace", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 1), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(1)}},
			{1.5, wake, []Effect{leaseEnd(1)}},
			{2, wake, []Effect{release("a", -1), {Kind: Expired, ID: "a"}}},
			{3, settle(ok("a")), []Effect{idle}},
		}},
		{"a refused key disables the provider until it changes", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{0, settle(Outcome{ID: "a", Disable: "invalid_api_key"}), []Effect{{Kind: Disabled, Reason: "invalid_api_key"}, release("a", -1), idle}},
			{1, acquire("b", "m", 30), []Effect{deny("b", ReasonDisabled, 0)}},
			{1, func(m *Machine, _, _ time.Time) { m.Enable() }, nil},
			{1, acquire("c", "m", 30), []Effect{reserve("c")}},
		}},
		{"a model the provider does not know is removed from the pool", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{0, settle(Outcome{ID: "a", RemoveModel: true}), []Effect{{Kind: Removed, Model: "m"}, release("a", -1), idle}},
			{1, acquire("b", "m", 30), []Effect{deny("b", ReasonModelRemoved, 0)}},
		}},
		{"a call larger than the limits is refused; a failed limiter is asked again shortly", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", Answer{TooLarge: true}), []Effect{deny("a", ReasonRequestTooBig, 0)}},
			{0, acquire("b", "m", 30), []Effect{reserve("b")}},
			{0, answer("b", Answer{Failed: errLimiter}), []Effect{{Kind: LimiterDown, Err: errLimiter}, wakeAt(0.1)}},
			{0.1, wake, []Effect{reserve("b")}},
		}},
		{"a deadline passed while waiting is refused with when the limits have room", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 1), []Effect{reserve("a")}},
			{0, answer("a", Answer{Reason: "concurrency", RoomIn: 4 * time.Second}), []Effect{{Kind: Limited, Reason: "concurrency"}, wakeAt(1)}},
			{1, wake, []Effect{deny("a", ReasonRateLimited, 4)}},
		}},
		{"a twin of a leased job is dropped", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, answer("a", allowed), []Effect{grant("a"), leaseEnd(30)}},
			{0, acquire("a", "m", 30), []Effect{{Kind: Duplicate, Ask: "a"}}},
		}},
		{"a stopped provider refuses what waits and what comes", providerstate.Snapshot{}, []step{
			{0, acquire("a", "m", 30), []Effect{reserve("a")}},
			{0, acquire("b", "m", 30), nil},
			{0, func(m *Machine, _, _ time.Time) { m.Stop() }, []Effect{deny("a", ReasonStopped, 0), deny("b", ReasonStopped, 0)}},
			{0, acquire("c", "m", 30), []Effect{deny("c", ReasonStopped, 0)}},
		}},
		{"a restart resumes its models out of the pool", providerstate.Snapshot{Models: map[string]providerstate.ModelState{
			"m": {Reason: providerstate.ModelEjected, Until: at(4)}, "gone": {Reason: providerstate.ModelRemoved},
			"busy": {Reason: providerstate.ModelRateLimited, Until: at(2)}}}, []step{
			{0, acquire("a", "m", 30), []Effect{deny("a", ReasonModelEjected, 4)}},
			{0, acquire("b", "gone", 30), []Effect{deny("b", ReasonModelRemoved, 0)}},
			{0, acquire("c", "busy", 30), []Effect{wakeAt(2)}},
		}},
		{"another controller's open breaker opens this one, for at most its own period", providerstate.Snapshot{}, []step{
			{0, func(m *Machine, now, clk time.Time) { m.PeerOpened(now, clk, at(3600)) }, nil},
			{1, acquire("a", "m", 30), []Effect{deny("a", ReasonBreakerOpen, 9)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			settings := func(s resilience.Settings) resilience.Settings {
				s.Threshold, s.Window, s.OpenFor, s.Clock = 2, time.Minute, 10*time.Second, clk
				return s
			}
			m := New(Config{Breaker: settings(resilience.Settings{}), LeaseGrace: leaseGrace,
				ModelBreaker: func(string) resilience.Settings { return settings(resilience.Settings{Consecutive: true}) }}, tt.prev)
			for i, s := range tt.steps {
				now := at(s.at)
				clk.Advance(now.Sub(clk.Now()))
				s.event(m, now, now)
				if got := m.Effects(); (len(got) > 0 || len(s.want) > 0) && !reflect.DeepEqual(got, s.want) {
					t.Fatalf("step %d (at %gs):\n got  %+v\n want %+v", i, s.at, got, s.want)
				}
			}
		})
	}
}

func TestMachineCountsAndPublishes(t *testing.T) {
	clk := clock.NewFake(epoch)
	m := New(Config{Breaker: resilience.Settings{Clock: clk}, ModelBreaker: func(string) resilience.Settings {
		return resilience.Settings{Clock: clk, Threshold: 1, Consecutive: true}
	}}, providerstate.Snapshot{})
	if _, changed := m.OutOfPool(epoch); !changed {
		t.Fatal("a new machine publishes its models once")
	}
	for i, o := range []Outcome{ok("a"), {ID: "b", ModelEffect: resilience.Failure, Fault: "bad json"}, {ID: "c"}} {
		m.Acquire(epoch, epoch, Request{ID: o.ID, Model: []string{"m", "n", "m"}[i], Deadline: at(30)})
		m.Reserved(epoch, epoch, o.ID, allowed)
		m.Settle(epoch, epoch, o)
	}
	m.Effects()
	if calls, faults := m.Calls24h(epoch); calls != 2 || faults != 1 {
		t.Fatalf("%d calls, %d faults: a neutral verdict is not counted", calls, faults)
	}
	if m.LastFault() != "bad json" {
		t.Fatalf("last fault %q", m.LastFault())
	}
	out, changed := m.OutOfPool(epoch)
	if !changed || len(out) != 1 || out["n"].Reason != providerstate.ModelEjected {
		t.Fatalf("out of the pool %v (changed %v)", out, changed)
	}
	if _, changed := m.OutOfPool(epoch); changed {
		t.Fatal("unchanged models were published again")
	}
	if calls, _ := m.Calls24h(epoch.Add(25 * time.Hour)); calls != 0 {
		t.Fatalf("%d calls a day later", calls)
	}
}
