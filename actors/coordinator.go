package actors

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/bandit"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/classify"
	"github.com/conclave-ai/conclave/consensus"
	"github.com/conclave-ai/conclave/fleet"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/resilience"
	"github.com/conclave-ai/conclave/validation"
	"go.uber.org/zap"
)

// CoordinatorActor runs one request through steps 2 to 10 of the pipeline: classify, blueprint, select,
// assign, dispatch, collect, consensus, feedback, respond and record. Every step is a pure call or a
// message; deadlines are scheduled messages. It answers its caller exactly once and then stops.
type CoordinatorActor struct {
	deps    *Deps
	req     *messages.RouteRequest
	replyTo *actor.PID
	seq     uint64
	rng     *rand.Rand
	log     *zap.Logger
	exec    *messages.Execution
	began   time.Time

	category string
	meta     classify.Metadata
	bp       blueprints.Blueprint
	heavy    bool
	tokens   int

	slots   []*slot
	cands   []string // models whose answers went to consensus, in candidate order
	jobs    map[string]*job
	started []*job // jobs in the order they started, for deterministic sweeps
	tried   map[string]bool
	jobSeq  int
	okCount int

	round          int // quorum-retry rounds started
	deadline       time.Time
	cancelDeadline func()
	cancelGrace    func()
	dispatchStart  time.Time
	undispatched   int // initial jobs still waiting for a permit
	collecting     bool
	consensusStart time.Time
}

// slot is one selected model's place in the request; retries and replacements reuse or refill it.
type slot struct {
	pick        bandit.Pick
	arm         bandit.Arm
	capability  float64
	attempts    int
	workersUsed map[string]bool
	state       slotState
	result      *messages.WorkerResult // the final result of the last attempt
	cancelRetry func()
}

type slotState uint8

const (
	slotPending slotState = iota // a job is waiting for a permit or running
	slotWaiting                  // a retry is scheduled
	slotOK
	slotFailed
)

type job struct {
	initial bool // one of the first dispatches, timed as the dispatch phase
	id      string
	slot    *slot
	worker  string
	attempt int
	permit  *messages.Permit
	done    bool
	dueBy   time.Time
}

// Self-messages of the coordinator.
type (
	collectDeadline struct{ round int }
	graceOver       struct{}
	retryDue        struct {
		slot   *slot
		target resilience.Target
	}
)

// NewCoordinatorActor returns the producer of the coordinator of one request.
func NewCoordinatorActor(deps *Deps, req *messages.RouteRequest, replyTo *actor.PID, seq uint64) actor.Producer {
	return func() actor.Actor {
		return &CoordinatorActor{deps: deps, req: req, replyTo: replyTo, seq: seq}
	}
}

// Receive implements actor.Actor.
func (c *CoordinatorActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.start(ctx)
	case *messages.Permit:
		c.onPermit(ctx, m)
	case *messages.JobResult:
		c.onResult(ctx, m)
	case retryDue:
		c.onRetryDue(ctx, m)
	case collectDeadline:
		if c.collecting && m.round == c.round {
			c.onDeadline(ctx)
		}
	case graceOver:
		if c.collecting {
			c.log.Info("quorum grace over", zap.String("event", "quorum_grace_over"), zap.Int("ok", c.okCount))
			c.finishCollection(ctx)
		}
	case *messages.ConsensusResult:
		c.onConsensus(ctx, m)
	case *actor.Stopping:
		c.stopTimers()
	}
}

func (c *CoordinatorActor) start(ctx actor.Context) {
	c.began = time.Now()
	c.rng = rand.New(rand.NewPCG(c.deps.Seed, c.seq))
	c.log = c.deps.Log.With(zap.String("request_id", c.req.RequestId))
	c.jobs = map[string]*job{}
	c.tried = map[string]bool{}
	c.exec = &messages.Execution{
		RequestId: c.req.RequestId, ReceivedAt: c.req.ReceivedAt, Task: c.req.Task, Metadata: c.req.Metadata,
		Phases: &messages.Phases{}, Retries: []*messages.Retry{},
	}

	// 2 CLASSIFY
	t := time.Now()
	c.classify()
	c.exec.Phases.ClassifyMs = ms(time.Since(t))

	// 3 BLUEPRINT
	t = time.Now()
	if err := c.blueprint(); err != nil {
		c.failFrom(ctx, err)
		return
	}
	c.exec.Phases.BlueprintMs = ms(time.Since(t))

	// 4 SELECT
	t = time.Now()
	picks, err := c.selectModels(c.bp.Workers, false)
	c.exec.Phases.SelectMs = ms(time.Since(t))
	if err != nil {
		c.failFrom(ctx, err)
		return
	}

	// 5 ASSIGN
	t = time.Now()
	workers, err := c.assign(len(picks), nil)
	c.exec.Phases.AssignMs = ms(time.Since(t))
	if err != nil {
		c.failFrom(ctx, err)
		return
	}

	// 6 DISPATCH (a permit from each provider, then the job to its worker) and 7 COLLECT
	c.dispatchStart = time.Now()
	c.collecting = true
	c.deadline = time.Now().Add(c.bp.Timeout())
	c.cancelDeadline = c.deps.Timers.SendOnce(c.bp.Timeout(), ctx.Self(), collectDeadline{round: 0})
	for i, p := range picks {
		s := c.newSlot(p)
		c.undispatched++
		c.startJob(ctx, s, workers[i]).initial = true
	}
}

func (c *CoordinatorActor) classify() {
	task := c.req.Task
	var r classify.Result
	if c.req.Category != "" {
		c.category = c.req.Category
		md := classify.ExtractMetadata(task)
		r = classify.Result{Category: classify.Category(c.req.Category), Best: classify.Category(c.req.Category), Confidence: 1, Metadata: md,
			Priority: classify.PriorityOf(classify.Category(c.req.Category))}
	} else {
		r = c.deps.Classifier.Classify(task)
		c.category = string(r.Category)
	}
	c.meta = r.Metadata
	c.heavy = c.meta.Complexity == classify.ComplexityHigh || c.meta.ContextLength > heavyTokens
	cls := &messages.Classification{
		Category: c.category, Confidence: r.Confidence, Best: string(r.Best), Fallback: r.Fallback, LowConfidence: r.LowConfidence,
		Priority: string(r.Priority), Language: c.meta.Language, Complexity: string(c.meta.Complexity),
		ContextLength: int32(c.meta.ContextLength), Explicit: c.req.Category != "",
	}
	for _, s := range r.Signals {
		cls.Signals = append(cls.Signals, &messages.Signal{Category: string(s.Category), Keyword: s.Keyword})
	}
	c.exec.Classification = cls
	c.log.Info("task classified", zap.String("event", "classification"), zap.String("category", c.category),
		zap.Float64("confidence", r.Confidence), zap.String("best", string(r.Best)), zap.Bool("fallback", r.Fallback),
		zap.Bool("explicit", cls.Explicit), zap.Array("signals", signalsField(r.Signals)), zap.String("priority", cls.Priority),
		zap.String("language", cls.Language), zap.String("complexity", cls.Complexity), zap.Int("context_length", c.meta.ContextLength))
	if r.LowConfidence && !cls.Explicit {
		c.log.Info("low confidence classification", zap.String("event", "low_confidence_classification"),
			zap.String("category", c.category), zap.String("best", string(r.Best)), zap.Float64("confidence", r.Confidence),
			zap.Any("alternatives", r.Alternatives))
	}
}

// heavyTokens is the task size from which a task counts as compute-heavy even when its wording is simple.
const heavyTokens = 2000

func (c *CoordinatorActor) blueprint() error {
	bp, err := c.deps.Blueprints.Get(c.category)
	if err != nil {
		return &requestError{status: http.StatusNotFound, code: "unknown_blueprint", err: err}
	}
	o := Overrides(c.req)
	bp, err = bp.Apply(o)
	if err != nil {
		return &requestError{status: http.StatusBadRequest, code: string(resilience.MalformedRequest), err: err}
	}
	if len(c.req.Models) > 0 && c.req.MinResponses == nil {
		// An explicit models list caps the workers; the quorum follows unless the request set it.
		bp.Workers = min(bp.Workers, len(c.req.Models))
		bp.MinResponses = min(bp.MinResponses, bp.Workers)
	}
	c.bp = bp
	c.exec.Blueprint = &messages.Blueprint{Name: bp.Name, Workers: int32(bp.Workers), TimeoutSeconds: bp.TimeoutSeconds,
		Strategy: string(bp.Strategy), MinResponses: int32(bp.MinResponses), QuorumGraceSeconds: bp.QuorumGraceSeconds}
	c.exec.Overrides = o.Changed()
	c.log.Info("blueprint chosen", zap.String("event", "blueprint"), zap.String("blueprint", bp.Name), zap.Int("workers", bp.Workers),
		zap.Float64("timeout_seconds", bp.TimeoutSeconds), zap.String("strategy", string(bp.Strategy)),
		zap.Int("min_responses", bp.MinResponses), zap.Float64("quorum_grace_seconds", bp.QuorumGraceSeconds), zap.Strings("overrides", c.exec.Overrides))
	return nil
}

// Overrides reads a request's blueprint overrides.
func Overrides(req *messages.RouteRequest) blueprints.Overrides {
	var o blueprints.Overrides
	if req.Workers != nil {
		w := int(*req.Workers)
		o.Workers = &w
	}
	if req.MinResponses != nil {
		m := int(*req.MinResponses)
		o.MinResponses = &m
	}
	if req.TimeoutSeconds != nil {
		o.TimeoutSeconds = req.TimeoutSeconds
	}
	if req.Strategy != nil {
		s := blueprints.Strategy(*req.Strategy)
		o.Strategy = &s
	}
	if req.QuorumGraceSeconds != nil {
		o.QuorumGraceSeconds = req.QuorumGraceSeconds
	}
	return o
}

// selectModels runs Thompson Sampling over the category's arms. With replacing set it skips models the
// request already tried and records no selection (a replacement during retries).
func (c *CoordinatorActor) selectModels(n int, replacing bool) ([]bandit.Pick, error) {
	now := c.deps.now()
	status := make(map[string]bandit.ProviderStatus, len(c.deps.Dir.Providers))
	removed := map[string]bool{}
	for _, p := range c.deps.Dir.Providers {
		snap := p.Snapshot()
		status[p.Name] = snap.Status(now)
		for m := range snap.Removed {
			removed[m] = true
		}
	}
	q := bandit.Query{
		N: n, ContextTokens: c.contextNeed(), Providers: status, Removed: removed, Policy: c.deps.Policy,
		TotalPulls: c.deps.Dir.Arms.TotalPulls(c.category),
	}
	if len(c.req.Models) > 0 {
		q.Requested = make(map[string]bool, len(c.req.Models))
		for _, m := range c.req.Models {
			q.Requested[m] = true
		}
	}
	if replacing {
		q.Tried = c.tried
	}
	cands := c.deps.Dir.Arms.Candidates(c.category)
	sel := bandit.Select(c.rng, *cands, q)
	c.deps.Dir.Arms.Release(cands)
	counts := sel.SkipCounts()
	skipped := interestingSkips(sel.Skipped)
	if !replacing {
		rec := &messages.Selection{Policy: c.deps.Policy.String(), Eligible: int32(sel.Eligible), SkipCounts: map[string]int32{}}
		for reason, n := range counts {
			rec.SkipCounts[reason] = int32(n)
		}
		for _, s := range skipped {
			rec.Skipped = append(rec.Skipped, &messages.Skip{Model: s.Model, Provider: s.Provider, Reason: s.Reason.String()})
		}
		for _, p := range sel.Picks {
			a := c.deps.Dir.Arms.Arm(c.category, p.Model)
			rec.Picks = append(rec.Picks, &messages.Pick{Model: p.Model, Provider: p.Provider, Sampled: p.Sampled, Score: p.Score,
				Deprioritised: p.Deprioritised, Explored: p.Explored, Alpha: a.Alpha, Beta: a.Beta})
		}
		c.exec.Selection = rec
	}
	c.log.Info("models selected", zap.String("event", "selection"), zap.String("policy", c.deps.Policy.String()), zap.Bool("replacement", replacing),
		zap.Int("requested", n), zap.Int("eligible", sel.Eligible), zap.Array("picks", picksField(sel.Picks)), zap.Object("skip_counts", countsField(counts)),
		zap.Array("skipped", skipsField(skipped)), zap.Uint64("sequence", c.seq))
	if len(sel.Picks) > 0 || n == 0 {
		return sel.Picks, nil
	}
	if replacing {
		return nil, nil
	}
	return nil, noModelError(counts, len(c.req.Models) > 0)
}

// maxRecordedSkips bounds the skipped models kept in a record and a log event.
const maxRecordedSkips = 50

func interestingSkips(skips []bandit.Skip) []bandit.Skip {
	var out []bandit.Skip
	for _, s := range skips {
		if s.Reason != bandit.NotRequested && len(out) < maxRecordedSkips {
			out = append(out, s)
		}
	}
	return out
}

// noModelError explains an empty selection: every provider down is 503; a task too large for every
// model is 413; requested models that are all excluded for other reasons are 503 as well.
func noModelError(counts map[string]int, explicit bool) error {
	down := counts[bandit.BreakerOpen.String()] + counts[bandit.RateLimitExhausted.String()]
	switch {
	case counts[bandit.ContextTooSmall.String()] > 0 && down == 0:
		return &requestError{status: http.StatusRequestEntityTooLarge, code: string(resilience.RequestTooLarge),
			err: errors.New("the task does not fit the context window of any eligible model")}
	case down > 0:
		return &requestError{status: http.StatusServiceUnavailable, code: string(resilience.AllProvidersDown),
			err: fmt.Errorf("no eligible model: the providers of %d models are down or at their rate limit", down)}
	case explicit:
		return &requestError{status: http.StatusServiceUnavailable, code: string(resilience.AllProvidersDown),
			err: errors.New("none of the requested models is available")}
	}
	return &requestError{status: http.StatusServiceUnavailable, code: string(resilience.AllProvidersDown), err: errors.New("no eligible model")}
}

// contextNeed is the context a call needs: the task plus the reserved answer.
func (c *CoordinatorActor) contextNeed() int { return c.meta.ContextLength + c.deps.OutputReserve }

func (c *CoordinatorActor) assign(n int, exclude func(string) bool) ([]string, error) {
	workers, rejected, err := fleet.Assign(c.deps.Dir.WorkerSnapshots(), n, c.heavy, c.deps.now(), exclude)
	c.log.Info("workers assigned", zap.String("event", "assignment"), zap.Strings("workers", workers), zap.Bool("heavy", c.heavy),
		zap.Array("rejected", rejectionsField(rejected)))
	if err != nil {
		return nil, &requestError{status: http.StatusServiceUnavailable, code: string(resilience.AllWorkersOffline), err: err}
	}
	return workers, nil
}

func (c *CoordinatorActor) newSlot(p bandit.Pick) *slot {
	s := &slot{pick: p, arm: c.deps.Dir.Arms.Arm(c.category, p.Model), workersUsed: map[string]bool{}}
	if m, ok := c.deps.Catalog.Get(p.Model); ok {
		s.capability = m.Capability(c.category)
	}
	c.slots = append(c.slots, s)
	c.tried[p.Model] = true
	return s
}

// startJob asks the model's provider for a permit; the job goes to its worker when the permit comes.
func (c *CoordinatorActor) startJob(ctx actor.Context, s *slot, worker string) *job {
	c.jobSeq++
	j := &job{id: c.req.RequestId + "/" + strconv.Itoa(c.jobSeq), slot: s, worker: worker, attempt: s.attempts, dueBy: c.deadline}
	s.attempts++
	s.workersUsed[worker] = true
	s.state = slotPending
	c.jobs[j.id] = j
	c.started = append(c.started, j)
	ctx.Send(c.deps.Dir.Provider(s.pick.Provider).PID, &messages.Acquire{JobId: j.id, Model: s.pick.Model, Tokens: int32(c.contextNeed()),
		Deadline: ts(j.dueBy), ReplyTo: ctx.Self()})
	return j
}

func (c *CoordinatorActor) onPermit(ctx actor.Context, p *messages.Permit) {
	j := c.jobs[p.JobId]
	if j == nil {
		return
	}
	if j.done {
		if p.Granted { // the job ended while it waited for this permit: give it back unused
			c.outcome(ctx, j, p, false, resilience.Cancelled, nil)
		}
		return
	}
	if j.initial {
		j.initial = false
		c.undispatched--
		if c.undispatched == 0 {
			c.exec.Phases.DispatchMs = ms(time.Since(c.dispatchStart))
		}
	}
	if !p.Granted {
		j.done = true
		kind := resilience.ProviderUnavailable
		if p.Reason == "rate_limited" {
			kind = resilience.RateLimited
		}
		c.log.Info("permit denied", zap.String("event", "permit_denied"), zap.String("job_id", j.id), zap.String("model", j.slot.pick.Model),
			zap.String("provider", j.slot.pick.Provider), zap.String("reason", p.Reason))
		c.recordResult(j, &messages.WorkerResult{JobId: j.id, Model: j.slot.pick.Model, Provider: j.slot.pick.Provider, Worker: j.worker,
			Attempt: int32(j.attempt), Status: "error", ErrorKind: "permit_" + p.Reason, ErrorMessage: "provider refused the call: " + p.Reason})
		c.slotFailed(ctx, j, kind, 0, p.Reason != "rate_limited")
		c.progress(ctx)
		return
	}
	j.permit = p
	m, _ := c.deps.Catalog.Get(j.slot.pick.Model)
	maxTokens := c.deps.OutputReserve
	if m.MaxOutputTokens > 0 {
		maxTokens = min(maxTokens, m.MaxOutputTokens)
	}
	dispatch := &messages.Dispatch{ReplyTo: ctx.Self(), Job: &messages.Job{
		RequestId: c.req.RequestId, JobId: j.id, Kind: providers.KindAnswer, Model: j.slot.pick.Model, Provider: j.slot.pick.Provider,
		Prompt: c.req.Task, Category: c.category, MaxTokens: int32(maxTokens), Deadline: ts(j.dueBy), Attempt: int32(j.attempt),
	}}
	ctx.Send(c.deps.Dir.Worker(j.worker).PID, dispatch)
	c.log.Info("job dispatched", zap.String("event", "dispatch"), zap.String("job_id", j.id), zap.String("model", j.slot.pick.Model),
		zap.String("provider", j.slot.pick.Provider), zap.String("worker", j.worker), zap.Int("attempt", j.attempt), zap.Time("deadline", j.dueBy),
		zap.Bool("probe", p.Probe))
}

func (c *CoordinatorActor) onResult(ctx actor.Context, r *messages.JobResult) {
	j := c.jobs[r.JobId]
	if j == nil {
		return
	}
	if j.done {
		// A job that already timed out or was cancelled: an answer is logged and kept in the record as
		// late, an error (usually the cancellation itself coming back) only logged.
		c.log.Info("late reply discarded", zap.String("event", "late_reply"), zap.String("job_id", j.id), zap.String("model", r.Model),
			zap.String("worker", r.Worker), zap.Bool("ok", r.Ok), zap.String("error_kind", r.ErrorKind), zap.Float64("latency_ms", r.LatencyMs))
		if r.Ok {
			c.recordResult(j, resultOf(r, "late"))
		}
		return
	}
	j.done = true
	kind := resilience.Kind(r.ErrorKind)
	c.outcome(ctx, j, j.permit, r.Ok, kind, r)
	ok := r.Ok
	if ok && strings.TrimSpace(r.Text) == "" {
		ok, kind = false, resilience.EmptyAnswer // the call worked, the answer is missing
	}
	status := "ok"
	switch {
	case ok:
	case kind == resilience.WorkerTimeout || kind == resilience.NetworkTimeout:
		status = "timeout"
	default:
		status = "error"
	}
	wr := resultOf(r, status)
	wr.ErrorKind = string(kind)
	c.recordResult(j, wr)
	c.log.Info("reply received", zap.String("event", "reply"), zap.String("job_id", j.id), zap.String("model", r.Model),
		zap.String("provider", r.Provider), zap.String("worker", r.Worker), zap.String("status", status), zap.String("error_kind", string(kind)),
		zap.Float64("latency_ms", r.LatencyMs), zap.Int32("http_status", r.HttpStatus))
	if ok {
		j.slot.state = slotOK
		c.okCount++
	} else {
		c.slotFailed(ctx, j, kind, seconds(r.RetryAfterSeconds), false)
	}
	c.progress(ctx)
}

func resultOf(r *messages.JobResult, status string) *messages.WorkerResult {
	return &messages.WorkerResult{JobId: r.JobId, Model: r.Model, Provider: r.Provider, Worker: r.Worker, Attempt: r.Attempt,
		Status: status, Text: r.Text, LatencyMs: r.LatencyMs, ErrorKind: r.ErrorKind, ErrorMessage: r.ErrorMessage,
		HttpStatus: r.HttpStatus, Usage: r.Usage}
}

func (c *CoordinatorActor) recordResult(j *job, wr *messages.WorkerResult) {
	c.exec.Results = append(c.exec.Results, wr)
	if wr.Status != "late" {
		j.slot.result = wr
	}
}

// outcome tells the provider how a permitted call went (or that the permit went unused).
func (c *CoordinatorActor) outcome(ctx actor.Context, j *job, p *messages.Permit, ok bool, kind resilience.Kind, r *messages.JobResult) {
	if p == nil || !p.Granted {
		return
	}
	o := &messages.Outcome{JobId: j.id, Model: j.slot.pick.Model, Generation: p.Generation, Probe: p.Probe, Success: ok, ErrorKind: string(kind)}
	if r != nil {
		o.RateLimit = r.RateLimit
		if r.Usage != nil {
			o.Tokens = r.Usage.InputTokens + r.Usage.OutputTokens
		}
	}
	ctx.Send(c.deps.Dir.Provider(j.slot.pick.Provider).PID, o)
}

// slotFailed decides on a retry by the retry table: the same model again, on another worker or after the
// provider's requested wait, when the table allows another attempt and it can still finish before the
// deadline. providerDown marks a refused permit (the breaker is open): no retry on that provider.
func (c *CoordinatorActor) slotFailed(ctx actor.Context, j *job, kind resilience.Kind, retryAfter time.Duration, providerDown bool) {
	s := j.slot
	s.state = slotFailed
	policy := resilience.PolicyFor(kind)
	retry := j.attempt
	if providerDown || !policy.Recoverable || !policy.ShouldRetry(retry) {
		return
	}
	delay := c.backoff(policy, retry, retryAfter)
	if !time.Now().Add(delay).Before(c.deadline) {
		c.addRetry(s, j.worker, "", retry+1, kind, delay, "skipped: deadline")
		return
	}
	s.state = slotWaiting
	s.cancelRetry = c.deps.Timers.SendOnce(delay, ctx.Self(), retryDue{slot: s, target: policy.Target})
	c.addRetry(s, j.worker, "", retry+1, kind, delay, "scheduled")
}

// backoff is the wait before retry number attempt: the upstream's own Retry-After as given, otherwise
// the retry table's schedule scaled by Retry.Scale.
func (c *CoordinatorActor) backoff(p resilience.Policy, attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return p.Delay(attempt, retryAfter, c.rng)
	}
	return time.Duration(float64(p.Delay(attempt, 0, c.rng)) * c.deps.Retry.Scale)
}

func (c *CoordinatorActor) addRetry(s *slot, from, to string, attempt int, kind resilience.Kind, delay time.Duration, outcome string) {
	r := &messages.Retry{Model: s.pick.Model, Provider: s.pick.Provider, FromWorker: from, ToWorker: to, Attempt: int32(attempt),
		Kind: string(kind), DelayMs: ms(delay), Outcome: outcome}
	c.exec.Retries = append(c.exec.Retries, r)
	c.log.Info("retry", zap.String("event", "retry"), zap.String("model", r.Model), zap.String("provider", r.Provider),
		zap.String("from_worker", from), zap.String("to_worker", to), zap.Int("attempt", attempt), zap.String("kind", r.Kind),
		zap.Duration("delay", delay), zap.String("outcome", outcome))
}

func (c *CoordinatorActor) onRetryDue(ctx actor.Context, m retryDue) {
	s := m.slot
	if !c.collecting || s.state != slotWaiting {
		return
	}
	s.cancelRetry = nil
	var exclude func(string) bool
	if m.target == resilience.OtherWorker {
		exclude = func(w string) bool { return s.workersUsed[w] }
	}
	workers, err := c.assign(1, exclude)
	if err != nil && exclude != nil {
		workers, err = c.assign(1, nil) // no other worker left: the same one beats none
	}
	if err != nil {
		s.state = slotFailed
		c.progress(ctx)
		return
	}
	c.startJob(ctx, s, workers[0])
}

// progress ends collection early when every slot is settled, and starts the quorum grace period once
// min_responses answers are in.
func (c *CoordinatorActor) progress(ctx actor.Context) {
	if !c.collecting {
		return
	}
	if c.okCount >= c.bp.MinResponses && c.bp.QuorumGraceSeconds > 0 && c.cancelGrace == nil {
		c.cancelGrace = c.deps.Timers.SendOnce(c.bp.QuorumGrace(), ctx.Self(), graceOver{})
	}
	for _, s := range c.slots {
		if s.state == slotPending || s.state == slotWaiting {
			return
		}
	}
	c.endRound(ctx)
}

// onDeadline times out every job still out and settles the round.
func (c *CoordinatorActor) onDeadline(ctx actor.Context) {
	c.cancelDeadline = nil
	c.abandon(ctx, "timeout", resilience.WorkerTimeout)
	c.endRound(ctx)
}

// abandon ends every outstanding job and scheduled retry: a timeout at the deadline (which counts
// against the provider), or a cancellation when collection ends early (which does not).
func (c *CoordinatorActor) abandon(ctx actor.Context, status string, kind resilience.Kind) {
	for _, j := range c.started {
		if j.done {
			continue
		}
		j.done = true
		if j.permit != nil {
			c.outcome(ctx, j, j.permit, false, kind, nil)
			ctx.Send(c.deps.Dir.Worker(j.worker).PID, &messages.CancelJob{JobId: j.id})
		}
		c.recordResult(j, &messages.WorkerResult{JobId: j.id, Model: j.slot.pick.Model, Provider: j.slot.pick.Provider, Worker: j.worker,
			Attempt: int32(j.attempt), Status: status, ErrorKind: string(kind)})
		j.slot.state = slotFailed
	}
	for _, s := range c.slots {
		if s.state == slotWaiting {
			if s.cancelRetry != nil {
				s.cancelRetry()
			}
			s.state = slotFailed
		}
	}
}

// endRound settles collection when no job is out: enough answers go to consensus; too few start a
// quorum-retry round on other workers (replacing models whose provider is down), while rounds remain.
func (c *CoordinatorActor) endRound(ctx actor.Context) {
	if c.okCount >= c.bp.MinResponses || c.round >= c.deps.Retry.Rounds {
		c.finishCollection(ctx)
		return
	}
	missing := c.bp.MinResponses - c.okCount
	c.round++
	policy := resilience.PolicyFor(resilience.WorkerTimeout)
	delay := c.backoff(policy, c.round-1, 0)
	c.deadline = time.Now().Add(delay + c.bp.Timeout())
	now := c.deps.now()

	var again []*slot
	for _, s := range c.slots {
		if len(again) == missing {
			break
		}
		if s.state != slotFailed || s.result == nil || !resilience.PolicyFor(resilience.Kind(s.result.ErrorKind)).Recoverable {
			continue
		}
		if snap := c.deps.Dir.Provider(s.pick.Provider).Snapshot(); snap.Status(now).BreakerOpen {
			continue
		}
		again = append(again, s)
	}
	if n := missing - len(again); n > 0 {
		picks, _ := c.selectModels(n, true)
		for _, p := range picks {
			again = append(again, c.newSlot(p))
		}
	}
	if len(again) == 0 {
		c.log.Info("quorum retry impossible", zap.String("event", "quorum_retry"), zap.Int("round", c.round), zap.Int("missing", missing))
		c.finishCollection(ctx)
		return
	}
	for _, s := range again {
		s.state = slotWaiting
		kind := resilience.WorkerTimeout
		if s.result != nil && s.result.ErrorKind != "" {
			kind = resilience.Kind(s.result.ErrorKind)
		}
		from := ""
		if s.result != nil {
			from = s.result.Worker
		}
		c.addRetry(s, from, "", s.attempts, kind, delay, fmt.Sprintf("quorum round %d", c.round))
		s.cancelRetry = c.deps.Timers.SendOnce(delay, ctx.Self(), retryDue{slot: s, target: resilience.OtherWorker})
	}
	c.log.Info("quorum retry", zap.String("event", "quorum_retry"), zap.Int("round", c.round), zap.Int("missing", missing),
		zap.Int("retrying", len(again)), zap.Duration("delay", delay), zap.Time("deadline", c.deadline))
	c.cancelDeadline = c.deps.Timers.SendOnce(delay+c.bp.Timeout(), ctx.Self(), collectDeadline{round: c.round})
}

// finishCollection stops collecting and hands the answers to a consensus actor.
func (c *CoordinatorActor) finishCollection(ctx actor.Context) {
	c.collecting = false
	c.stopTimers()
	c.abandon(ctx, "cancelled", resilience.Cancelled)
	c.exec.Phases.CollectMs = ms(time.Since(c.dispatchStart))
	if c.exec.Phases.DispatchMs == 0 {
		c.exec.Phases.DispatchMs = c.exec.Phases.CollectMs
	}
	var cands []*messages.Candidate
	reliability := map[string]float64{} // one reading per provider, so its candidates are weighed alike
	for _, s := range c.slots {
		if s.state != slotOK {
			continue
		}
		rel, ok := reliability[s.pick.Provider]
		if !ok {
			rel = c.deps.Dir.Provider(s.pick.Provider).Snapshot().Reliability
			reliability[s.pick.Provider] = rel
		}
		cands = append(cands, &messages.Candidate{Model: s.pick.Model, Provider: s.pick.Provider, Worker: s.result.Worker, Text: s.result.Text,
			Capability: s.capability, Recency: s.arm.Recency, Reliability: rel})
		c.cands = append(c.cands, s.pick.Model)
	}
	c.log.Info("collection finished", zap.String("event", "collect_done"), zap.Int("ok", len(cands)), zap.Int("min_responses", c.bp.MinResponses),
		zap.Int("rounds", c.round), zap.Float64("collect_ms", c.exec.Phases.CollectMs))
	if len(cands) == 0 {
		c.fail(ctx, http.StatusServiceUnavailable, "no_responses", "no worker returned an answer before the deadline", nil)
		return
	}
	c.exec.Degraded = len(cands) < c.bp.MinResponses
	in := &messages.ConsensusInput{RequestId: c.req.RequestId, Category: c.category, Strategy: string(c.bp.Strategy), Candidates: cands, Task: c.req.Task}
	if c.bp.Strategy == blueprints.Rotating && len(cands) > 1 {
		in.Round = c.deps.Dir.NextRound(c.category)
		in.ArbiterModel = consensus.ArbiterFor(c.cands, in.Round)
		for _, cd := range cands {
			if cd.Model == in.ArbiterModel {
				in.ArbiterProvider, in.ArbiterWorker = cd.Provider, cd.Worker
			}
		}
		in.Deadline = ts(time.Now().Add(c.deps.ArbiterTimeout))
	}
	c.consensusStart = time.Now()
	ctx.Spawn(c.deps.Props(NewConsensusActor(c.deps, in)))
}

func (c *CoordinatorActor) onConsensus(ctx actor.Context, r *messages.ConsensusResult) {
	c.exec.Phases.ConsensusMs = ms(time.Since(c.consensusStart))
	if r.Failure != "" {
		c.fail(ctx, http.StatusInternalServerError, string(resilience.Internal), "consensus failed: "+r.Failure, nil)
		return
	}
	c.exec.Decision = r.Decision
	c.exec.Answer = r.Answer

	// 9 FEEDBACK
	t := time.Now()
	index := make(map[string]int, len(c.cands))
	for i, m := range c.cands {
		index[m] = i
	}
	scores := make(map[string]float64, len(c.cands))
	for _, res := range c.exec.Results {
		if i, ok := index[res.Model]; ok && res.Status == "ok" {
			res.WeightedScore = r.Weighted[i]
			res.Contributed = r.Contributed[i]
			scores[res.Model] = r.Decision.Scores[i]
		}
	}
	c.feedback(ctx, scores)
	c.exec.Phases.FeedbackMs = ms(time.Since(t))
	c.log.Info("consensus reached", zap.String("event", "consensus"), zap.String("strategy", r.Decision.Strategy),
		zap.String("arbiter", r.Decision.Arbiter), zap.Int32("chosen", r.Decision.Chosen), zap.Float64s("scores", r.Decision.Scores),
		zap.Bools("contributed", r.Contributed), zap.Strings("agreement", r.Decision.Agreement), zap.Strings("disagreement", r.Decision.Disagreement),
		zap.String("arbiter_error", r.Decision.ArbiterError), zap.Bool("degraded", c.exec.Degraded))
	c.respond(ctx, http.StatusOK)
}

// feedback rewards each model once, by its best outcome in the request: an answer that contributed to
// the consensus earns alpha + 1; an answer that did not (a poor answer), a timeout or a provider error
// earns beta + 1. Failures that say nothing about the model (rate limits, an open breaker, a refused
// worker, a cancellation, a bad request) leave its arm alone. Under the arbiter reward an answer earns
// its consensus score instead, and under the external reward answers wait for the feedback API.
func (c *CoordinatorActor) feedback(ctx actor.Context, scores map[string]float64) {
	type outcome struct {
		reward float64
		reason string
		rank   int
	}
	const noReward = -1
	best := map[string]outcome{}
	var order []string
	for _, res := range c.exec.Results {
		var o outcome
		switch {
		case res.Status == "ok" && c.deps.Reward == RewardExternal:
			o = outcome{noReward, "external", 4}
		case res.Status == "ok" && c.deps.Reward == RewardArbiter:
			o = outcome{scores[res.Model], "arbiter_score", 4}
		case res.Status == "ok" && res.Contributed:
			o = outcome{1, "contributed", 4}
		case res.Status == "ok":
			o = outcome{0, "poor", 3}
		case res.Status == "timeout":
			o = outcome{0, "timeout", 2}
		case res.Status == "error" && penalised(resilience.Kind(res.ErrorKind)):
			o = outcome{0, "error", 1}
		default:
			continue
		}
		prev, seen := best[res.Model]
		if !seen {
			order = append(order, res.Model)
		}
		if !seen || o.rank > prev.rank {
			best[res.Model] = o
		}
	}
	for _, model := range order {
		o := best[model]
		if o.reward == noReward {
			continue
		}
		arm := c.deps.Dir.Arms.Arm(c.category, model)
		reward(ctx, c.deps.Dir.Bandit, &messages.Reward{Model: model, Category: c.category, Reward: o.reward, Reason: o.reason, RequestId: c.req.RequestId})
		c.exec.BanditUpdates = append(c.exec.BanditUpdates, &messages.BanditUpdate{Model: model, Category: c.category, Reward: o.reward,
			Reason: o.reason, AlphaBefore: arm.Alpha, BetaBefore: arm.Beta})
	}
	c.log.Info("bandit updated", zap.String("event", "bandit_updates"), zap.String("category", c.category), zap.Array("updates", updatesField(c.exec.BanditUpdates)))
}

func penalised(kind resilience.Kind) bool {
	switch kind {
	case resilience.ProviderUnavailable, resilience.WorkerTimeout, resilience.NetworkTimeout, resilience.Internal, resilience.EmptyAnswer:
		return true
	}
	return false
}

// fail answers with an error status; the record is kept like any other.
func (c *CoordinatorActor) fail(ctx actor.Context, status int, code, message string, details []*messages.Problem) {
	c.exec.Error = &messages.Failure{Code: code, Message: message, Details: details}
	c.respond(ctx, status)
}

func (c *CoordinatorActor) failFrom(ctx actor.Context, err error) {
	var re *requestError
	if errors.As(err, &re) {
		c.fail(ctx, re.status, re.code, re.err.Error(), Problems(re.err))
		return
	}
	c.fail(ctx, http.StatusInternalServerError, string(resilience.Internal), err.Error(), nil)
}

// respond is step 10: the record to the recorder first (so a caller who asks for it right after the
// answer finds it), then the answer, then stop.
func (c *CoordinatorActor) respond(ctx actor.Context, status int) {
	c.collecting = false
	c.stopTimers()
	c.abandon(ctx, "cancelled", resilience.Cancelled)
	c.exec.StatusCode = int32(status)
	c.exec.CompletedAt = ts(c.deps.now())
	c.exec.Phases.TotalMs = ms(time.Since(c.began))
	ctx.Send(c.deps.Dir.Recorder, c.exec)
	ctx.Send(c.replyTo, c.exec)
	fields := []zap.Field{zap.String("event", "request_completed"), zap.Int("status", status), zap.String("category", c.category),
		zap.Bool("degraded", c.exec.Degraded), zap.Int("retries", len(c.exec.Retries)), zap.Float64("total_ms", c.exec.Phases.TotalMs)}
	if c.exec.Error != nil {
		fields = append(fields, zap.String("error_code", c.exec.Error.Code), zap.String("error", c.exec.Error.Message))
		fields[0] = zap.String("event", "request_failed")
	}
	c.log.Info("request finished", fields...)
	ctx.Stop(ctx.Self())
}

func (c *CoordinatorActor) stopTimers() {
	if c.cancelDeadline != nil {
		c.cancelDeadline()
		c.cancelDeadline = nil
	}
	if c.cancelGrace != nil {
		c.cancelGrace()
		c.cancelGrace = nil
	}
}

// requestError is a failure with the HTTP status it answers.
type requestError struct {
	status int
	code   string
	err    error
}

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// Problems lists the validation problems carried by err, if any.
func Problems(err error) []*messages.Problem {
	var verrs validation.Errors
	if !errors.As(err, &verrs) {
		return nil
	}
	out := make([]*messages.Problem, len(verrs))
	for i, p := range verrs {
		out[i] = &messages.Problem{Field: p.Field, Message: p.Message}
	}
	return out
}
