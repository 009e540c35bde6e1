package collect

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is a fake world: two spare workers, providers down on demand, replacements from a list.
type env struct {
	down         map[string]bool
	replacements []Assignment
	noWorker     bool
}

func (e *env) Worker(avoid []string) (string, bool) {
	if e.noWorker {
		return "", false
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		if !slices.Contains(avoid, w) {
			return w, true
		}
	}
	return "w1", true
}

func (e *env) Replace(n int, tried, refused map[string]bool) []Assignment {
	var out []Assignment
	for _, a := range e.replacements {
		if len(out) < n && !tried[a.Model] && !refused[a.Provider] {
			out = append(out, a)
		}
	}
	return out
}

func (e *env) ProviderDown(p string) bool { return e.down[p] }

// harness drives a machine on a fake clock and keeps every effect it asked for.
type harness struct {
	t   *testing.T
	m   *Machine
	env *env
	now time.Time
	all []Effect
}

// defaults: three models of two providers, quorum 2, a 10 s call timeout, collection until 30 s.
func newHarness(t *testing.T, change func(*Config)) *harness {
	cfg := Config{MinResponses: 2, CallTimeout: 10 * time.Second, CollectBy: epoch.Add(30 * time.Second), Rounds: 1, RetryScale: 1}
	if change != nil {
		change(&cfg)
	}
	h := &harness{t: t, env: &env{down: map[string]bool{}, replacements: []Assignment{{Model: "r1", Provider: "p3", Worker: "w3"}}}, now: epoch}
	initial := []Assignment{{"a", "p1", "w1"}, {"b", "p1", "w2"}, {"c", "p2", "w3"}}
	h.m = New(cfg, initial, h.env, rand.New(rand.NewPCG(1, 2)))
	h.keep(h.m.Start(h.now))
	return h
}

func (h *harness) keep(effects []Effect) []Effect {
	out := slices.Clone(effects)
	h.all = append(h.all, out...)
	return out
}

func (h *harness) permit(seq int) []Effect {
	return h.keep(h.m.Permit(h.now, seq, Permit{Granted: true}))
}
func (h *harness) deny(seq int, reason string, after time.Duration) []Effect {
	return h.keep(h.m.Permit(h.now, seq, Permit{Reason: reason, RetryAfter: after}))
}
func (h *harness) started(seq int, budget time.Duration) []Effect {
	return h.keep(h.m.Started(h.now, seq, budget))
}
func (h *harness) answer(seq int, text string) []Effect {
	return h.keep(h.m.Result(h.now, seq, Reply{OK: true, Text: text}))
}
func (h *harness) fail(seq int, kind resilience.Kind, scope resilience.Scope, after time.Duration) []Effect {
	return h.keep(h.m.Result(h.now, seq, Reply{Kind: kind, Scope: scope, RetryAfter: after}))
}
func (h *harness) advance(d time.Duration) []Effect {
	h.now = h.now.Add(d)
	return h.keep(h.m.Tick(h.now))
}

// run gives job seq its permit and starts it with a budget.
func (h *harness) run(seq int, budget time.Duration) {
	h.permit(seq)
	h.started(seq, budget)
}

func (h *harness) record(seq int) *Record {
	h.t.Helper()
	j := h.m.Job(seq)
	if j == nil || j.Record == nil {
		h.t.Fatalf("job %d has no record", seq)
	}
	return j.Record
}

func (h *harness) finished() bool {
	for _, e := range h.all {
		if e.Kind == Finish {
			return true
		}
	}
	return false
}

func kinds(effects []Effect) string {
	var parts []string
	for _, e := range effects {
		name := [...]string{"", "acquire", "dispatch", "settle", "cancel", "wake", "retried", "finish"}[e.Kind]
		if e.Job != nil {
			name += fmt.Sprint(e.Job.Seq)
		}
		parts = append(parts, name)
	}
	return strings.Join(parts, " ")
}

func TestStartAsksAPermitForEachModel(t *testing.T) {
	h := newHarness(t, nil)
	if got := kinds(h.all); got != "acquire0 acquire1 acquire2 wake" {
		t.Fatalf("start: %s", got)
	}
	if got := kinds(h.permit(0)); got != "dispatch0" {
		t.Fatalf("permit: %s", got)
	}
}

func TestVerdicts(t *testing.T) {
	full, short := 10*time.Second, 2*time.Second
	tests := []struct {
		desc   string
		config func(*Config)
		budget time.Duration
		reply  Reply
		status Status
		want   resilience.Verdict
		retry  bool // a retry is scheduled
	}{
		{"an answer", nil, full, Reply{OK: true, Text: "B"}, OK,
			resilience.Verdict{Provider: resilience.Success, Model: resilience.Success, Host: resilience.Success, Arm: resilience.Judged}, false},
		{"an empty answer is a poor one", nil, full, Reply{OK: true, Text: " \n"}, Error,
			resilience.Verdict{Provider: resilience.Success, Model: resilience.Success, Host: resilience.Success, Arm: resilience.Penalty}, false},
		{"an answer of tool calls without text is an answer", nil, full, Reply{OK: true, ToolCalls: 1}, OK,
			resilience.Verdict{Provider: resilience.Success, Model: resilience.Success, Host: resilience.Success, Arm: resilience.Judged}, false},
		{"a timeout after the full timeout is the model's", nil, full, Reply{Kind: resilience.UpstreamTimeout}, Timeout,
			resilience.Verdict{Model: resilience.Failure, Host: resilience.Success, Arm: resilience.Penalty}, true},
		{"a timeout cut by the caller's shorter deadline blames nobody", nil, short, Reply{Kind: resilience.UpstreamTimeout}, Cancelled,
			resilience.Verdict{Host: resilience.Success}, false},
		{"a provider's floor above the blueprint's timeout", func(c *Config) {
			c.FaultAfter = func(string) time.Duration { return 20 * time.Second }
		}, full, Reply{Kind: resilience.UpstreamTimeout}, Cancelled, resilience.Verdict{Host: resilience.Success}, false},
		{"a model's 5xx", nil, full, Reply{Kind: resilience.ProviderUnavailable}, Error,
			resilience.Verdict{Model: resilience.Failure, Host: resilience.Success, Arm: resilience.Penalty}, true},
		{"a provider-wide 5xx", nil, full, Reply{Kind: resilience.ProviderUnavailable, Scope: resilience.ScopeProvider}, Error,
			resilience.Verdict{Provider: resilience.Failure, Host: resilience.Success}, true},
		{"a model's 429", nil, full, Reply{Kind: resilience.RateLimited, RetryAfter: 3 * time.Second}, Error,
			resilience.Verdict{Host: resilience.Success, BlockModel: true}, true},
		{"a refused host", nil, full, Reply{Kind: resilience.SSHRefused}, Error, resilience.Verdict{Host: resilience.Failure}, true},
		{"a host that stopped answering", nil, full, Reply{Kind: resilience.HostTimeout}, Timeout, resilience.Verdict{Host: resilience.Failure}, true},
		{"Conclave's own fault", nil, full, Reply{Kind: resilience.Internal}, Error, resilience.Verdict{}, true},
		{"a model the provider does not know", nil, full, Reply{Kind: resilience.ModelNotFound}, Error,
			resilience.Verdict{Host: resilience.Success, Arm: resilience.Penalty, RemoveModel: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHarness(t, tt.config)
			h.run(0, tt.budget)
			effects := h.keep(h.m.Result(h.now, 0, tt.reply))
			rec := h.record(0)
			if rec.Status != tt.status || rec.Verdict != tt.want {
				t.Fatalf("status %s verdict %+v, want %s %+v", rec.Status, rec.Verdict, tt.status, tt.want)
			}
			if effects[0].Kind != Settle || effects[0].Record != rec {
				t.Fatalf("effects %s: the permit must be settled with the verdict first", kinds(effects))
			}
			if retried := h.m.Slots()[0].state == slotWaiting; retried != tt.retry {
				t.Fatalf("retry scheduled %v, want %v (%+v)", retried, tt.retry, h.m.Retries())
			}
		})
	}
}

func TestRetriesFollowTheTable(t *testing.T) {
	t.Run("a refused host is retried on another worker after the backoff", func(t *testing.T) {
		h := newHarness(t, nil)
		h.run(0, 10*time.Second)
		h.fail(0, resilience.SSHRefused, 0, 0)
		r := h.m.Retries()[0]
		if r.Outcome != "scheduled" || r.Delay < time.Second || r.Delay > 1500*time.Millisecond || r.FromWorker != "w1" {
			t.Fatalf("retry %+v", r)
		}
		if got := kinds(h.advance(r.Delay - time.Millisecond)); got != "" {
			t.Fatalf("before it is due: %s", got)
		}
		if got := kinds(h.advance(time.Millisecond)); !strings.HasPrefix(got, "acquire3") {
			t.Fatalf("when due: %s", got)
		}
		if j := h.m.Job(3); j.Worker == "w1" || j.Attempt != 1 || h.m.Retries()[0].ToWorker != j.Worker {
			t.Fatalf("retry job %+v, history %+v", j, h.m.Retries())
		}
	})
	t.Run("a 429 waits exactly the upstream's Retry-After", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.RetryScale = 0.001 })
		h.run(0, 10*time.Second)
		h.fail(0, resilience.RateLimited, resilience.ScopeModel, 3*time.Second)
		if r := h.m.Retries()[0]; r.Delay != 3*time.Second {
			t.Fatalf("retry %+v: the Retry-After is not scaled", r)
		}
	})
	t.Run("a retry that cannot start before collection ends is skipped", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.CollectBy = epoch.Add(1500 * time.Millisecond) })
		h.run(0, 1500*time.Millisecond)
		h.now = h.now.Add(time.Second)
		h.fail(0, resilience.ProviderUnavailable, 0, 0)
		if r := h.m.Retries()[0]; r.Outcome != "skipped: deadline" {
			t.Fatalf("retry %+v", r)
		}
	})
	t.Run("the table's count bounds the retries", func(t *testing.T) {
		h := newHarness(t, nil)
		seq := 0
		for attempt := 0; attempt < 3; attempt++ {
			h.run(seq, 10*time.Second)
			h.fail(seq, resilience.ProviderUnavailable, 0, 0)
			if attempt < 2 {
				h.advance(h.m.Retries()[attempt].Delay)
				seq = len(h.m.jobs) - 1
			}
		}
		if n := len(h.m.Retries()); n != 2 {
			t.Fatalf("%d retries of a 5xx, want the table's 2: %+v", n, h.m.Retries())
		}
	})
	t.Run("a refused permit for the model's rate limit is retried after it", func(t *testing.T) {
		h := newHarness(t, nil)
		h.deny(0, "model_rate_limited", 4*time.Second)
		rec := h.record(0)
		if rec.Status != NotSent || rec.Kind != "permit_model_rate_limited" || h.m.Retries()[0].Delay != 4*time.Second {
			t.Fatalf("record %+v, retries %+v", rec, h.m.Retries())
		}
	})
	t.Run("an open breaker is not asked again", func(t *testing.T) {
		h := newHarness(t, nil)
		h.deny(0, "breaker_open", 10*time.Second)
		if rec := h.record(0); rec.Status != NotSent || rec.Verdict != (resilience.Verdict{}) || len(h.m.Retries()) != 0 {
			t.Fatalf("record %+v, retries %+v", rec, h.m.Retries())
		}
	})
}

func TestCollectionEndsAtCollectBy(t *testing.T) {
	h := newHarness(t, nil)
	h.run(0, 10*time.Second) // running
	h.permit(1)              // dispatched, never started: queued on a busy worker
	// job 2 still waits for its permit
	effects := h.advance(30 * time.Second)
	if got := kinds(effects); got != "settle0 cancel0 settle1 cancel1 settle2 finish" {
		t.Fatalf("at the deadline: %s", got)
	}
	for seq, want := range map[int]Status{0: Cancelled, 1: NotSent, 2: NotSent} {
		rec := h.record(seq)
		if rec.Status != want || rec.Verdict != (resilience.Verdict{}) {
			t.Fatalf("job %d: %s %+v, want %s with no blame", seq, rec.Status, rec.Verdict, want)
		}
	}
	if !h.record(2).WaitedForPermit || h.record(1).WaitedForPermit {
		t.Fatal("only the job without a permit waited for one")
	}
	if d := h.m.Done(); d.Failure != resilience.NoResponses || len(d.Answers) != 0 {
		t.Fatalf("done %+v", d)
	}
}

func TestNothingButRateLimitsSaysRateLimited(t *testing.T) {
	h := newHarness(t, nil)
	h.deny(0, "model_rate_limited", 40*time.Second) // its retry would come too late
	h.deny(1, "rate_limited", 0)
	h.advance(30 * time.Second) // job 2 still waiting for its permit
	if d := h.m.Done(); d.Failure != resilience.RateLimited || d.RetryAfter != 40*time.Second {
		t.Fatalf("done %+v: want rate_limited with the longest wait", d)
	}
}

func TestQuorumGraceEndsCollection(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.QuorumGrace = 500 * time.Millisecond })
	for seq := 0; seq < 3; seq++ {
		h.run(seq, 10*time.Second)
	}
	h.answer(0, "B")
	effects := h.answer(1, "B")
	if got := kinds(effects); got != "settle1 wake" || !effects[1].At.Equal(h.now.Add(500*time.Millisecond)) {
		t.Fatalf("quorum reached: %s", got)
	}
	if got := kinds(h.advance(500 * time.Millisecond)); got != "settle2 cancel2 finish" {
		t.Fatalf("grace over: %s", got)
	}
	if d := h.m.Done(); len(d.Answers) != 2 || d.Degraded || d.Failure != "" {
		t.Fatalf("done %+v", d)
	}
}

func TestEverySlotSettledEndsCollectionEarly(t *testing.T) {
	h := newHarness(t, nil)
	for seq := 0; seq < 3; seq++ {
		h.run(seq, 10*time.Second)
		h.answer(seq, "B")
	}
	if !h.finished() || len(h.m.Done().Answers) != 3 {
		t.Fatalf("effects %s", kinds(h.all))
	}
}

func TestQuorumRoundRetriesAndReplaces(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinResponses = 3 })
	h.env.down["p2"] = true
	h.env.replacements = append(h.env.replacements, Assignment{Model: "r2", Provider: "p3", Worker: "w1"})
	h.run(0, 10*time.Second)
	h.answer(0, "B")
	h.run(1, 10*time.Second)
	h.fail(1, resilience.ModelNotFound, 0, 0) // not recoverable
	h.deny(2, "breaker_open", 0)              // its provider is down
	// Both failed for good: a quorum round asks a replacement for each, after the round's backoff.
	var round []Retry
	for _, r := range h.m.Retries() {
		if strings.HasPrefix(r.Outcome, "quorum round 1") {
			round = append(round, r)
		}
	}
	if len(round) != 2 || round[0].Model != "r1" || round[1].Model != "r2" || len(h.m.Slots()) != 5 {
		t.Fatalf("round %+v, slots %d", round, len(h.m.Slots()))
	}
	if d := h.m.Slots()[3]; d.state != slotWaiting {
		t.Fatalf("replacement %+v", d)
	}
}

// A failed recoverable model is asked again in a quorum round; with MoveOn (a direct call's
// fallbacks), the same failure moves the round to the next model instead.
func TestAQuorumRoundAfterAFailure(t *testing.T) {
	tests := []struct {
		desc   string
		moveOn bool
		want   string // the model the round asks
	}{
		{"the failed model is asked again", false, "c"},
		{"the request moves on to the replacement", true, "r1"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MinResponses, c.MoveOn = 3, tt.moveOn })
			for seq := 0; seq < 2; seq++ {
				h.run(seq, 10*time.Second)
				h.answer(seq, "B")
			}
			h.run(2, 10*time.Second)
			h.fail(2, resilience.UpstreamTimeout, 0, 0) // a full timeout: retried on another worker
			for i := 0; i < 3; i++ {
				r := h.m.Retries()[len(h.m.Retries())-1]
				h.advance(r.Delay)
				seq := len(h.m.jobs) - 1
				h.run(seq, 10*time.Second)
				h.fail(seq, resilience.UpstreamTimeout, 0, 0)
			}
			if last := h.m.Retries()[len(h.m.Retries())-1]; last.Outcome != "quorum round 1" || last.Model != tt.want {
				t.Fatalf("history %+v: want the round to ask %s", h.m.Retries(), tt.want)
			}
		})
	}
}

func TestStopEndsAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	h.run(0, 10*time.Second)
	h.answer(0, "B")
	h.run(1, 10*time.Second)
	effects := h.keep(h.m.Stop(h.now, resilience.ClientClosed))
	if got := kinds(effects); got != "settle1 cancel1 settle2 finish" {
		t.Fatalf("stop: %s", got)
	}
	if d := h.m.Done(); d.Failure != resilience.ClientClosed || len(d.Answers) != 1 {
		t.Fatalf("done %+v", d)
	}
}

func TestNothingHappensAfterFinish(t *testing.T) {
	h := newHarness(t, nil)
	h.run(0, 10*time.Second)
	h.advance(30 * time.Second)
	records := len(h.m.Records())
	for _, effects := range [][]Effect{h.permit(1), h.advance(time.Hour), h.fail(0, resilience.Cancelled, 0, 0), h.keep(h.m.Stop(h.now, resilience.ShuttingDown))} {
		if len(effects) != 0 {
			t.Fatalf("effects after finish: %s", kinds(effects))
		}
	}
	// An answer that comes after all is kept as late, and changes nothing.
	h.answer(0, "B")
	if got := h.m.Records(); len(got) != records+1 || got[records].Status != Late {
		t.Fatalf("records %d then %d", records, len(got))
	}
	if d := h.m.Done(); len(d.Answers) != 0 {
		t.Fatalf("a late answer changed the result: %+v", d)
	}
}

func TestAJobRefusedByItsWorkerWasNeverSent(t *testing.T) {
	h := newHarness(t, nil)
	h.permit(0)
	h.fail(0, resilience.WorkerUnavailable, 0, 0) // no start: the worker's breaker is open
	if rec := h.record(0); rec.Status != NotSent || rec.Verdict != (resilience.Verdict{}) || h.m.Slots()[0].state != slotWaiting {
		t.Fatalf("record %+v", rec)
	}
}

func TestWakeAsksForTheEarliestDueMoment(t *testing.T) {
	h := newHarness(t, nil)
	if e := h.all[len(h.all)-1]; e.Kind != Wake || !e.At.Equal(epoch.Add(30*time.Second)) {
		t.Fatalf("first wake %+v", e)
	}
	h.run(0, 10*time.Second)
	effects := h.fail(0, resilience.SSHRefused, 0, 0)
	w := effects[len(effects)-1]
	if w.Kind != Wake || !w.At.Equal(h.now.Add(h.m.Retries()[0].Delay)) {
		t.Fatalf("effects %s: want a wake for the retry", kinds(effects))
	}
	if got := kinds(h.answer(1, "x")); strings.Contains(got, "wake") {
		t.Fatalf("an unchanged wake was asked again: %s", got)
	}
}

func TestJobSeq(t *testing.T) {
	if n, ok := JobSeq("4b1e/12"); !ok || n != 12 {
		t.Fatal(n, ok)
	}
	if _, ok := JobSeq("4b1e/arbiter"); ok {
		t.Fatal("a non-numeric id parsed")
	}
}

func TestARefusalEveryCallMetIsTheAnswer(t *testing.T) {
	for _, kind := range []resilience.Kind{resilience.InvalidAPIKey, resilience.ModelNotFound, resilience.RequestTooLarge, resilience.PaymentRequired} {
		t.Run(string(kind), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Rounds = 0 })
			for seq := 0; seq < 3; seq++ {
				h.run(seq, 10*time.Second)
				h.fail(seq, kind, resilience.ScopeProvider, 0)
			}
			if d := h.m.Done(); d.Failure != kind {
				t.Fatalf("done %+v, want %s", d, kind)
			}
		})
	}
	h := newHarness(t, func(c *Config) { c.Rounds = 0 })
	h.run(0, 10*time.Second)
	h.fail(0, resilience.InvalidAPIKey, resilience.ScopeProvider, 0)
	for seq := 1; seq < 3; seq++ {
		h.run(seq, 10*time.Second)
		h.fail(seq, resilience.ModelNotFound, 0, 0)
	}
	if d := h.m.Done(); d.Failure != resilience.NoResponses {
		t.Fatalf("mixed refusals: %+v", d)
	}
}

func TestAdaptiveQuorumAsksInWaves(t *testing.T) {
	// Answers settle when at least two agree; the harness's three models come in waves of one.
	agree := func(answers []*Job, _ int) Verdict {
		votes := map[string]int{}
		for _, j := range answers {
			votes[j.Record.Ref.(string)]++
		}
		for _, n := range votes {
			if n >= 2 {
				return Verdict{Settled: true, Posterior: 0.97}
			}
		}
		return Verdict{Posterior: 0.5}
	}
	answer := func(h *harness, seq int, text string) {
		h.run(seq, 10*time.Second)
		h.keep(h.m.Result(h.now, seq, Reply{OK: true, Text: text, Ref: text}))
	}
	tests := []struct {
		desc     string
		answers  []string // what each model says, best-first
		want     Quorum
		wantJobs int
	}{
		{"the first two agree: the third is never asked", []string{"B", "B", "C"}, Quorum{Asked: 2, Waves: 2, Stopped: Settled, Posterior: 0.97}, 2},
		{"no agreement: every model is asked", []string{"B", "C", "D"}, Quorum{Asked: 3, Waves: 3, Stopped: Cap, Posterior: 0.5}, 3},
		{"the third settles it", []string{"B", "C", "C"}, Quorum{Asked: 3, Waves: 3, Stopped: Settled, Posterior: 0.97}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHarness(t, func(c *Config) {
				c.MinResponses = 1
				c.Adaptive = &Adaptive{Wave: 1, Settle: agree}
			})
			if got := kinds(h.all); got != "acquire0 wake" {
				t.Fatalf("start: %s", got)
			}
			for seq := 0; !h.finished(); seq++ {
				if seq >= len(tt.answers) {
					t.Fatalf("asked more than the models: %s", kinds(h.all))
				}
				answer(h, seq, tt.answers[seq])
			}
			d := h.m.Done()
			if d.Quorum != tt.want || len(h.m.Slots()) != tt.wantJobs || len(d.Answers) != tt.wantJobs {
				t.Fatalf("quorum %+v with %d slots, want %+v", d.Quorum, len(h.m.Slots()), tt.want)
			}
			for i, s := range h.m.Slots() { // waves of one: the i-th model was asked by the i-th wave
				if s.Wave != i {
					t.Fatalf("slot %d (%s) asked by wave %d", i, s.Model, s.Wave)
				}
			}
		})
	}
}

func TestALaterWaveAsksAsManyAsTheVerdictNeeds(t *testing.T) {
	// A first wave of one that is not settled, whose verdict needs one more model of the two unasked.
	var unaskedSeen []int
	h := newHarness(t, func(c *Config) {
		c.MinResponses = 1
		c.Adaptive = &Adaptive{Wave: 1, Settle: func(answers []*Job, unasked int) Verdict {
			unaskedSeen = append(unaskedSeen, unasked)
			return Verdict{Settled: len(answers) == 2, Next: 1}
		}}
	})
	h.run(0, 10*time.Second)
	h.keep(h.m.Result(h.now, 0, Reply{OK: true, Text: "A", Ref: "A"}))
	if len(h.m.Slots()) != 2 || h.m.Slots()[1].Wave != 1 {
		t.Fatalf("the second wave asked %d slots, want one more", len(h.m.Slots())-1)
	}
	h.run(1, 10*time.Second)
	h.keep(h.m.Result(h.now, 1, Reply{OK: true, Text: "A", Ref: "A"}))
	d := h.m.Done()
	if want := (Quorum{Asked: 2, Waves: 2, Stopped: Settled}); !h.finished() || d.Quorum != want {
		t.Fatalf("quorum %+v, want %+v", d.Quorum, want)
	}
	if !slices.Equal(unaskedSeen, []int{2, 1}) {
		t.Fatalf("the verdicts saw %v unasked models, want [2 1]", unaskedSeen)
	}
}

func TestAnAdaptiveQuorumCutByTheDeadlineSaysSo(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Adaptive = &Adaptive{Wave: 2, Settle: func([]*Job, int) Verdict { return Verdict{Posterior: 0.4} }}
	})
	h.advance(31 * time.Second)
	if d := h.m.Done(); d.Quorum.Stopped != Deadline || d.Quorum.Asked != 2 {
		t.Fatalf("quorum %+v", d.Quorum)
	}
	// A fixed quorum asks everyone at once.
	f := newHarness(t, nil)
	f.advance(31 * time.Second)
	if q := f.m.Done().Quorum; q.Stopped != AllAsked || q.Asked != 3 || q.Waves != 1 {
		t.Fatalf("fixed quorum %+v", q)
	}
}

func TestRateLimitWaitsEndAtTheQueueBound(t *testing.T) {
	queueBy := epoch.Add(5 * time.Second)
	tests := []struct {
		desc    string
		queueBy time.Time
		at      time.Duration // when the event comes, from the start
		event   func(h *harness)
		outcome string // of the retry decided
		delay   time.Duration
	}{
		{"a window that frees after the queue bound is not waited for", queueBy, 0,
			func(h *harness) { h.deny(0, "rate_limited", 20*time.Second) }, "skipped: max_queue_seconds", 20 * time.Second},
		{"a window that frees after the end of collection, too", queueBy, 0,
			func(h *harness) { h.deny(0, "rate_limited", time.Minute) }, "skipped: deadline", time.Minute},
		{"a window that frees before the queue bound is waited for", queueBy, 0,
			func(h *harness) { h.deny(0, "rate_limited", 2*time.Second) }, "scheduled", 2 * time.Second},
		{"the model's own limit alike", queueBy, 0,
			func(h *harness) { h.deny(0, "model_rate_limited", 10*time.Second) }, "skipped: max_queue_seconds", 10 * time.Second},
		{"a 429 whose Retry-After ends after the bound", queueBy, 0,
			func(h *harness) {
				h.run(0, 10*time.Second)
				h.fail(0, resilience.RateLimited, resilience.ScopeModel, 6*time.Second)
			},
			"skipped: max_queue_seconds", 6 * time.Second},
		{"a 429 whose Retry-After ends before it", queueBy, 0,
			func(h *harness) {
				h.run(0, 10*time.Second)
				h.fail(0, resilience.RateLimited, resilience.ScopeModel, 3*time.Second)
			},
			"scheduled", 3 * time.Second},
		{"late in the request, a short wait passes the bound too", queueBy, 4500 * time.Millisecond,
			func(h *harness) { h.deny(0, "rate_limited", time.Second) }, "skipped: max_queue_seconds", time.Second},
		{"no queue bound: the end of collection", time.Time{}, 0,
			func(h *harness) { h.deny(0, "rate_limited", 20*time.Second) }, "scheduled", 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.QueueBy = tt.queueBy })
			h.now = h.now.Add(tt.at)
			tt.event(h)
			r := h.m.Retries()[0]
			if r.Outcome != tt.outcome || r.Delay != tt.delay || r.Kind != resilience.RateLimited {
				t.Fatalf("retry %+v, want %s after %v", r, tt.outcome, tt.delay)
			}
			if waiting := h.m.Slots()[0].state == slotWaiting; waiting != (tt.outcome == "scheduled") {
				t.Fatalf("slot waiting %v after %s", waiting, r.Outcome)
			}
			if rec := h.record(0); rec.Verdict.Provider != resilience.Neutral || rec.Verdict.Model != resilience.Neutral || rec.Verdict.Arm != resilience.NoReward {
				t.Fatalf("a rate limit blamed someone: %+v", rec.Verdict)
			}
		})
	}
	t.Run("other failures keep to the end of collection", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.QueueBy = queueBy })
		h.now = h.now.Add(4500 * time.Millisecond)
		h.run(0, 10*time.Second)
		h.fail(0, resilience.ProviderUnavailable, 0, 0)
		if r := h.m.Retries()[0]; r.Outcome != "scheduled" || !h.now.Add(r.Delay).After(queueBy) {
			t.Fatalf("retry %+v of a 5xx past the queue bound", r)
		}
	})
}

func TestEveryModelAtItsLimitEndsTheRequestAtOnce(t *testing.T) {
	tests := []struct {
		desc         string
		replacements []Assignment
		// round is the replacement round's retry, when there is one.
		round bool
	}{
		{"no other model has room: rate_limited at once", nil, false},
		{"a model with room is asked at once in their place", []Assignment{{Model: "r1", Provider: "p3", Worker: "w3"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.QueueBy = epoch.Add(5 * time.Second) })
			h.env.replacements = tt.replacements
			h.deny(0, "rate_limited", 40*time.Second)
			h.deny(1, "rate_limited", time.Minute)
			last := h.deny(2, "model_rate_limited", 10*time.Second)
			if !tt.round {
				if !h.finished() {
					t.Fatalf("effects %s: the request waits for windows that open too late", kinds(h.all))
				}
				d := h.m.Done()
				if d.Failure != resilience.RateLimited || d.RetryAfter != time.Minute || len(d.Answers) != 0 {
					t.Fatalf("done %+v: want rate_limited with the longest wait", d)
				}
				for _, rec := range h.m.Records() {
					if rec.Status != NotSent || rec.Verdict != (resilience.Verdict{}) {
						t.Fatalf("record %+v: a refusal for a rate limit blames nobody", rec)
					}
				}
				return
			}
			r := h.m.Retries()[len(h.m.Retries())-1]
			if r.Outcome != "quorum round 1" || r.Model != "r1" || r.Delay != 0 {
				t.Fatalf("round %+v: want the replacement at once", r)
			}
			if w := last[len(last)-1]; w.Kind != Wake || !w.At.Equal(h.now) {
				t.Fatalf("effects %s: want a wake now", kinds(last))
			}
			if got := kinds(h.advance(0)); !strings.HasPrefix(got, "acquire3") {
				t.Fatalf("at once: %s", got)
			}
		})
	}
	t.Run("a round in place of other failures keeps its backoff", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.QueueBy = epoch.Add(5 * time.Second) })
		h.deny(0, "breaker_open", 10*time.Second)
		h.deny(1, "breaker_open", 10*time.Second)
		h.deny(2, "rate_limited", time.Minute)
		if r := h.m.Retries()[len(h.m.Retries())-1]; r.Outcome != "quorum round 1" || r.Delay < time.Second {
			t.Fatalf("round %+v", r)
		}
	})
}

func TestARefusedConnectionFailsOverAtOnce(t *testing.T) {
	tests := []struct {
		desc string
		// refused are the jobs whose provider refuses the connection; the others answer.
		refused      []int
		replacements []Assignment
		// replacement is the model asked in place of the refused ones, at once ("" for none).
		replacement string
		failure     resilience.Kind
	}{
		{"one provider refuses, another answers: a model of a third is asked at once", []int{0, 1},
			[]Assignment{{Model: "x", Provider: "p1", Worker: "w1"}, {Model: "r1", Provider: "p3", Worker: "w3"}}, "r1", ""},
		{"every provider refuses, none is left: all providers down at once", []int{0, 1, 2},
			[]Assignment{{Model: "x", Provider: "p1", Worker: "w1"}, {Model: "y", Provider: "p2", Worker: "w2"}}, "", resilience.AllProvidersDown},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHarness(t, nil)
			h.env.replacements = tt.replacements
			for seq := range 3 {
				h.run(seq, 10*time.Second)
			}
			for seq := range 3 {
				if slices.Contains(tt.refused, seq) {
					h.fail(seq, resilience.ConnectionRefused, resilience.ScopeProvider, 0)
				} else {
					h.answer(seq, "B")
				}
			}
			for _, seq := range tt.refused {
				// The provider's fault: its breaker fails, the model's arm and breaker hear nothing.
				if v := h.record(seq).Verdict; v != (resilience.Verdict{Provider: resilience.Failure, Host: resilience.Success}) {
					t.Fatalf("job %d: verdict %+v", seq, v)
				}
			}
			for _, r := range h.m.Retries() {
				if r.Outcome == "scheduled" || r.Delay != 0 {
					t.Fatalf("retry %+v: a refused connection is not retried, nor waited for", r)
				}
			}
			if tt.replacement == "" {
				d := h.m.Done()
				if !h.finished() || d.Failure != tt.failure || len(d.Answers) != 0 {
					t.Fatalf("done %+v after %s: want %s at once", d, kinds(h.all), tt.failure)
				}
				return
			}
			r := h.m.Retries()[len(h.m.Retries())-1]
			if r.Outcome != "quorum round 1" || r.Model != tt.replacement {
				t.Fatalf("round %+v: want %s in place of the refused, at once", r, tt.replacement)
			}
			if got := kinds(h.advance(0)); !strings.HasPrefix(got, "acquire3") {
				t.Fatalf("at once: %s", got)
			}
		})
	}
}

// An answer dropped for the bytes in flight blames nobody and asks no other model in its place (its
// answer would be dropped too): the calls out finish, and collection ends with what they answer.
func TestAnAnswerDroppedForTheBoundEndsCollection(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinResponses = 3; c.Rounds = 2 })
	h.run(0, 10*time.Second)
	h.answer(0, "B")
	h.run(1, 10*time.Second)
	h.fail(1, resilience.Overloaded, 0, 0)
	if rec := h.record(1); rec.Status != Error || rec.Verdict != (resilience.Verdict{}) {
		t.Fatalf("record %+v: want an error that blames nobody", rec)
	}
	h.run(2, 10*time.Second)
	h.fail(2, resilience.ProviderUnavailable, 0, 0)
	if !h.finished() || len(h.m.Slots()) != 3 || len(h.m.Retries()) != 0 {
		t.Fatalf("collection went on: finished %v, %d slots, retries %+v", h.finished(), len(h.m.Slots()), h.m.Retries())
	}
	if d := h.m.Done(); d.Failure != "" || len(d.Answers) != 1 || !d.Degraded {
		t.Fatalf("done %+v: want the one answer", d)
	}

	h = newHarness(t, nil)
	h.run(0, 10*time.Second)
	h.fail(0, resilience.ProviderUnavailable, 0, 0)
	h.run(1, 10*time.Second)
	h.fail(1, resilience.Overloaded, 0, 0)
	h.run(2, 10*time.Second)
	h.fail(2, resilience.Overloaded, 0, 0)
	if d := h.m.Done(); d.Failure != resilience.Overloaded {
		t.Fatalf("done %+v: want overloaded", d)
	}
}

// A call the caller's own key refuses (its budget, its tokens per minute) was never sent: it blames
// nobody, nothing is retried or asked in its place, the calls out finish, and collection ends with
// their answers, or with the refusal when there are none.
func TestTheCallersOwnRefusalEndsCollection(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinResponses = 3; c.Rounds = 2 })
	h.run(0, 10*time.Second)
	h.run(1, 10*time.Second)
	h.fail(1, resilience.BudgetExceeded, 0, 0)
	if rec := h.record(1); rec.Status != NotSent || rec.Verdict != (resilience.Verdict{}) {
		t.Fatalf("record %+v: want a call never sent, blaming nobody", rec)
	}
	if h.finished() {
		t.Fatal("collection ended with a call still out")
	}
	h.answer(0, "B")
	h.run(2, 10*time.Second)
	h.fail(2, resilience.ProviderUnavailable, 0, 0)
	if !h.finished() || len(h.m.Slots()) != 3 || len(h.m.Retries()) != 0 {
		t.Fatalf("collection went on: finished %v, %d slots, retries %+v", h.finished(), len(h.m.Slots()), h.m.Retries())
	}
	if d := h.m.Done(); d.Failure != "" || len(d.Answers) != 1 || !d.Degraded {
		t.Fatalf("done %+v: want the one answer", d)
	}

	h = newHarness(t, nil)
	h.run(0, 10*time.Second)
	h.fail(0, resilience.KeyRateLimited, 0, 0)
	h.run(1, 10*time.Second)
	h.fail(1, resilience.ProviderUnavailable, 0, 0)
	h.run(2, 10*time.Second)
	h.fail(2, resilience.ProviderUnavailable, 0, 0)
	if d := h.m.Done(); d.Failure != resilience.KeyRateLimited {
		t.Fatalf("done %+v: want the key's refusal", d)
	}
}
