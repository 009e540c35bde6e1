package actors

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/core/validation"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CoordinatorActor runs one request through steps 2 to 10 of the pipeline. It is a thin shell: the
// plan (steps 2-5), the collection state machine (6-7) and feedback (9) are pure decisions; the actor
// times and logs each, interprets the machine's effects as messages and timers, hands the answers to a
// consensus actor (8), assembles the record and answers its caller exactly once (10). After answering
// it changes nothing: the record it handed over is never touched again.
type CoordinatorActor struct {
	deps    *Deps
	req     *messages.RouteRequest
	replyTo *actor.PID
	seq     uint64
	rng     *rand.Rand
	log     *zap.Logger
	exec    *messages.Execution
	began   time.Time
	world   plan.World
	plan    *plan.Plan
	machine *collect.Machine
	// audit marks an adaptive request that asks every model.
	audit bool

	due           alarm // the collection machine's next due moment
	dispatchStart time.Time
	undispatched  int // initial jobs not yet given their permit

	answers []*collect.Job // in candidate order
	// round is the rotating arbiter's turn, taken off the actor while the models answer (it may ask
	// Redis); waiting holds the consensus input when collection ends before the turn comes.
	round          *uint64
	waiting        *messages.ConsensusInput
	waitingModels  []string
	consensus      *actor.PID
	consensusStart time.Time
	answered       bool
	// jobIDs are the jobs' names, by number.
	jobIDs      []string
	collectByTS *timestamppb.Timestamp
	queueByTS   *timestamppb.Timestamp
	// jobLines counts the per-call lines logged (replies, retries, denied permits, replacements); past
	// JobLogBudget they are counted instead, so no request logs without bound.
	jobLines int
	// consulting is true while the request waits for its consensus answer.
	consulting bool
	// streaming is the job whose answer is relayed to the caller as it comes (the first to send a
	// piece); broken says it failed after its first piece, so nothing can take its place.
	streaming string
	broken    bool
	// structure is the request's output format and tools, compiled once when it starts; ballots are
	// its answers' ballots once the consensus has read them (nil for answers of text).
	structure *consensus.Structure
	ballots   []*messages.Ballot
}

// JobLogBudget is the most per-call lines one request logs; the rest are counted in its collect_done
// line (`lines_suppressed`), and the record still holds every call.
const JobLogBudget = 64

// jobLog logs a per-call line while the request's budget lasts.
func (c *CoordinatorActor) jobLog(msg string, fields ...zap.Field) {
	if c.jobLines++; c.jobLines <= JobLogBudget {
		c.log.Debug(msg, fields...)
	}
}

// wake is the coordinator's one timer: a tick of the collection machine due at at.
type wake struct{ at time.Time }

// turnTaken brings the rotating arbiter's turn to the coordinator.
type turnTaken struct{ round uint64 }

// NewCoordinatorActor returns the producer of the coordinator of one request.
func NewCoordinatorActor(deps *Deps, req *messages.RouteRequest, replyTo *actor.PID, seq uint64) actor.Producer {
	return func() actor.Actor {
		return &CoordinatorActor{deps: deps, req: req, replyTo: replyTo, seq: seq}
	}
}

// Receive implements actor.Actor.
func (c *CoordinatorActor) Receive(ctx actor.Context) {
	if c.answered {
		return // the record is handed over: nothing may change it
	}
	if why := c.check(ctx.Message()); why != "" {
		c.deps.Drop(KindCoordinator, why, ctx.Message())
		if _, ok := ctx.Message().(*messages.ConsensusResult); ok && c.consulting {
			// The answer it waited for is unusable, and no other comes: the request fails now.
			c.consulting = false
			c.fail(ctx, resilience.Internal, "consensus answered a malformed result ("+why+")", 0, nil)
		}
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.start(ctx)
	case *messages.Permit: // a refusal: a grant comes from the worker the provider dispatched the job to
		seq, _ := jobOf(m.JobId, c.req.RequestId)
		c.onPermit(ctx, time.Now(), seq, m)
	case *messages.JobQueued:
		seq, _ := jobOf(m.JobId, c.req.RequestId)
		c.granted(ctx, time.Now(), seq, m.Probe)
	case *messages.JobStarted:
		seq, _ := jobOf(m.JobId, c.req.RequestId)
		now := time.Now()
		c.granted(ctx, now, seq, m.Probe)
		c.apply(ctx, c.machine.Started(now, seq, seconds(m.BudgetSeconds)))
	case *messages.JobResult:
		c.onResult(ctx, m)
	case *messages.Delta:
		c.onDelta(ctx, m)
	case wake:
		if m.at.Equal(c.due.at) { // not a timer cancelled after it fired
			c.due.rang()
			c.apply(ctx, c.machine.Tick(time.Now()))
		}
	case *messages.CancelRequest:
		c.stop(ctx, resilience.Kind(m.Code))
	case turnTaken:
		c.round = &m.round
		if in := c.waiting; in != nil {
			c.waiting = nil
			c.consult(ctx, in, c.waitingModels)
		}
	case *messages.ConsensusResult:
		c.onConsensus(ctx, m)
	case *actor.DeadLetterResponse:
		// The decider asked is gone (stopped for good after repeated crashes): no answer will come.
		c.consulting = false
		c.fail(ctx, resilience.Internal, "the consensus could not be reached: its decider is stopped", 0, nil)
	case *actor.Stopping:
		c.due.stop()
	default:
		c.deps.unknown(KindCoordinator, m)
	}
}

// check says why a message is dropped, or "": what a job's message says must be of this request's
// jobs (and, for a result, of the job's model); a consensus answer, or a dead letter, must answer the
// consensus asked; nothing about the calls is taken before the calls are planned.
func (c *CoordinatorActor) check(msg any) string {
	switch m := msg.(type) {
	case *messages.Permit:
		return c.jobCheck(checkPermit(m, c.req.RequestId), m.GetJobId())
	case *messages.JobQueued:
		return c.jobCheck(checkJobQueued(m, c.req.RequestId), m.GetJobId())
	case *messages.JobStarted:
		return c.jobCheck(checkJobStarted(m, c.req.RequestId), m.GetJobId())
	case *messages.JobResult:
		why := c.jobCheck(checkJobResult(m, c.req.RequestId), m.GetJobId())
		if why == "" {
			if seq, _ := jobOf(m.JobId, c.req.RequestId); c.machine.Job(seq).Slot.Model != m.Model {
				return DropWrongTarget
			}
		}
		return why
	case *messages.Delta:
		switch {
		case c.req.StreamTo == nil || m.RequestId != c.req.RequestId:
			return DropUnexpected
		case m.JobId == c.req.RequestId+"/arbiter": // the synthesis of the arbiter, from the consensus actor
			if c.consensus == nil {
				return DropUnexpected
			}
			return ""
		}
		return c.jobCheck("", m.GetJobId())
	case *messages.CancelRequest:
		return checkCancelRequest(m, c.req.RequestId)
	case *messages.ConsensusResult:
		if !c.consulting {
			return DropUnexpected
		}
		return checkConsensusResult(m, len(c.answers))
	case *actor.DeadLetterResponse:
		if !c.consulting {
			return DropUnexpected
		}
	}
	return ""
}

// jobCheck adds to a job message's own check that the job exists: the machine made it.
func (c *CoordinatorActor) jobCheck(why, jobID string) string {
	if why != "" {
		return why
	}
	if seq, _ := jobOf(jobID, c.req.RequestId); c.machine == nil || c.machine.Job(seq) == nil {
		return DropWrongTarget
	}
	return ""
}

func (c *CoordinatorActor) start(ctx actor.Context) {
	c.began = time.Now()
	c.rng = c.deps.Random(c.seq)
	c.log = c.deps.Log.With(zap.String("request_id", c.req.RequestId))
	c.world = c.deps.World()
	c.exec = &messages.Execution{
		RequestId: c.req.RequestId, ClientRequestId: c.req.ClientRequestId, ReceivedAt: c.req.ReceivedAt, Task: c.req.Task,
		Metadata: c.req.Metadata, TimeoutSeconds: c.req.TimeoutSeconds, NodeId: c.deps.NodeID, Phases: &messages.Phases{}, Retries: []*messages.Retry{},
	}
	req := c.planRequest()
	p := plan.New(c.deps.Plan)
	c.plan = p
	phases := c.exec.Phases
	steps := []struct {
		run    func() *plan.Failure
		phase  *float64
		record func()
		// explains is true when the step's record explains its own failure (the skipped models).
		explains bool
	}{
		{func() *plan.Failure { return p.Classify(req) }, &phases.ClassifyMs, c.recordClassification, false},
		{func() *plan.Failure { return p.ChooseBlueprint(req, c.began) }, &phases.BlueprintMs, c.recordBlueprint, false},
		{func() *plan.Failure { return p.Select(c.world, req, c.rng) }, &phases.SelectMs, c.recordSelection, true},
		{func() *plan.Failure { return p.Assign(c.world) }, &phases.AssignMs, c.recordAssignment, true},
	}
	if req.Direct { // the model the caller named, then its fallbacks: nothing to classify or choose
		steps = steps[2:]
		steps[0].run = func() *plan.Failure { return p.Direct(c.world, req, c.began) }
		steps[0].record = func() { c.recordBlueprint(); c.recordSelection() }
	}
	for _, step := range steps {
		t := time.Now()
		f := step.run()
		*step.phase = ms(time.Since(t))
		if f == nil || step.explains {
			step.record()
		}
		if f != nil {
			c.fail(ctx, f.Kind, f.Err.Error(), f.RetryAfter, f.Problems())
			return
		}
		c.progressOf(ctx, step.phase)
	}

	// A schema that cannot be compiled is refused before any model is asked.
	st, err := consensus.Compile(FormatOf(c.req.GetAsk().GetResponseFormat(), c.req.GetAsk().GetTools()))
	if err != nil {
		c.fail(ctx, resilience.MalformedRequest, err.Error(), 0, validation.Errors{{Field: "response_format.schema", Message: err.Error()}})
		return
	}
	c.structure = st

	// 6 DISPATCH (a permit from each provider, then the job to its worker) and 7 COLLECT
	bp := p.Blueprint
	cfg := collect.Config{MinResponses: bp.MinResponses, QuorumGrace: bp.QuorumGrace(), CallTimeout: bp.Timeout(), CollectBy: p.CollectBy,
		QueueBy: p.QueueBy, FaultAfter: p.FaultAfter, Rounds: p.Rounds(), MoveOn: p.IsDirect(), RetryScale: c.deps.RetryScale}
	initial := make([]collect.Assignment, len(p.Selection.Picks))
	for i, pick := range p.Selection.Picks {
		initial[i] = collect.Assignment{Model: pick.Model, Provider: pick.Provider, Worker: p.Workers[i]}
	}
	if bp.Adaptive() {
		// A share of requests asks every model, so that estimates keep learning from the models a
		// settled answer would not have asked.
		if c.audit = c.rng.Float64() < bp.Audit(); !c.audit {
			cfg.Adaptive = &collect.Adaptive{Wave: bp.MinResponses, Settled: c.settled}
		}
	}
	c.machine = collect.New(cfg, initial, env{c}, c.rng)
	c.dispatchStart, c.undispatched = time.Now(), len(initial)
	if consensus.AsksArbiter(bp.Strategy) {
		// The turn is taken now, off the actor (a shared rotation asks Redis), so that neither this
		// actor nor the consensus waits on I/O.
		self, root, dir, category := ctx.Self(), ctx.ActorSystem().Root, c.deps.Dir, p.Category
		go func() { root.Send(self, turnTaken{round: dir.NextRound(category)}) }()
	}
	c.apply(ctx, c.machine.Start(c.dispatchStart))
}

func (c *CoordinatorActor) planRequest() plan.Request {
	r := c.req
	req := plan.Request{Task: r.Task, Category: r.Category, Models: r.Models, Overrides: Overrides(r), Direct: r.Direct && len(r.Models) == 1,
		Fallbacks: r.Fallbacks}
	if r.TimeoutSeconds != nil {
		// A timeout too small to be a duration still ends the request at once.
		req.Timeout = max(seconds(*r.TimeoutSeconds), time.Nanosecond)
	}
	if r.ReceivedAt != nil {
		req.ReceivedAt = r.ReceivedAt.AsTime()
	}
	if v, ok := r.GetMetadata().GetFields()["answer_kind"]; ok {
		req.AnswerKind = v.GetStringValue()
	}
	if ask := r.GetAsk(); ask != nil {
		req.Images = holdsImages(ask)
		if r.StrictParameters {
			req.StrictParams = fleet.ParamsOf(ask.Sampling).Given()
		}
	}
	return req
}

// holdsImages reports whether a conversation holds an image.
func holdsImages(ask *messages.Ask) bool {
	for _, m := range ask.Messages {
		for _, p := range m.Content {
			if p.Type == providers.PartImage {
				return true
			}
		}
	}
	return false
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
	if req.Strategy != nil {
		s := blueprints.Strategy(*req.Strategy)
		o.Strategy = &s
	}
	if req.QuorumGraceSeconds != nil {
		o.QuorumGraceSeconds = req.QuorumGraceSeconds
	}
	o.Quorum, o.QuorumTau = req.Quorum, req.QuorumTau
	return o
}

// settled tells an adaptive quorum whether the answers so far settle the request: the leading
// answer's posterior under the reliability-weighted vote reaches the blueprint's tau. Free text never
// settles early; JSON answers and tool calls vote with their ballots.
func (c *CoordinatorActor) settled(answers []*collect.Job) (bool, float64) {
	resps := make([]consensus.Response, len(answers))
	for i, j := range answers {
		res := j.Record.Ref.(*messages.JobResult)
		resps[i] = consensus.Response{Model: j.Slot.Model, Text: res.Text, ToolCalls: toolCalls(res.ToolCalls),
			Accuracy: c.deps.Dir.Arms.Accuracy(c.plan.Category, j.Slot.Model)}
	}
	p, ok := consensus.Leading(resps, c.plan.AnswerKind, c.structure)
	return ok && p >= c.plan.Blueprint.Tau(), p
}

// 2 CLASSIFY
func (c *CoordinatorActor) recordClassification() {
	p := c.plan
	r, md := p.Classification, p.Classification.Metadata
	cls := &messages.Classification{
		Category: p.Category, Confidence: r.Confidence, Best: string(r.Best), Fallback: r.Fallback, LowConfidence: r.LowConfidence,
		Priority: string(r.Priority), Language: md.Language, Complexity: string(md.Complexity),
		ContextLength: int32(md.ContextLength), Explicit: p.Explicit, AnswerKind: string(p.AnswerKind),
	}
	for _, s := range r.Signals {
		cls.Signals = append(cls.Signals, &messages.Signal{Category: string(s.Category), Keyword: s.Keyword})
	}
	c.exec.Classification = cls
	if ce := c.log.Check(zap.DebugLevel, "task classified"); ce != nil {
		ce.Write(zap.String("event", "classification"), zap.String("category", p.Category),
			zap.Float64("confidence", r.Confidence), zap.String("best", string(r.Best)), zap.Bool("fallback", r.Fallback),
			zap.Bool("explicit", cls.Explicit), zap.Array("signals", signalsField(r.Signals)), zap.String("priority", cls.Priority),
			zap.String("language", cls.Language), zap.String("complexity", cls.Complexity), zap.Int("context_length", md.ContextLength),
			zap.String("answer_kind", cls.AnswerKind))
	}
	if r.LowConfidence && !cls.Explicit {
		if ce := c.log.Check(zap.DebugLevel, "low confidence classification"); ce != nil {
			ce.Write(zap.String("event", "low_confidence_classification"),
				zap.String("category", p.Category), zap.String("best", string(r.Best)), zap.Float64("confidence", r.Confidence),
				zap.Array("alternatives", alternativesField(r.Alternatives)))
		}
	}
}

// 3 BLUEPRINT
func (c *CoordinatorActor) recordBlueprint() {
	bp := c.plan.Blueprint
	c.exec.Blueprint = &messages.Blueprint{Name: bp.Name, Workers: int32(bp.Workers), TimeoutSeconds: bp.TimeoutSeconds,
		Strategy: string(bp.Strategy), MinResponses: int32(bp.MinResponses), QuorumGraceSeconds: bp.QuorumGraceSeconds,
		Quorum: bp.Quorum, QuorumTau: bp.QuorumTau}
	c.exec.Overrides = c.plan.Overrides
	c.exec.Deadline = ts(c.plan.Deadline)
	if ce := c.log.Check(zap.DebugLevel, "blueprint chosen"); ce != nil {
		ce.Write(zap.String("event", "blueprint"), zap.String("blueprint", bp.Name), zap.Int("workers", bp.Workers),
			zap.Float64("timeout_seconds", bp.TimeoutSeconds), zap.String("strategy", string(bp.Strategy)),
			zap.Int("min_responses", bp.MinResponses), zap.Float64("quorum_grace_seconds", bp.QuorumGraceSeconds), zap.Strings("overrides", c.exec.Overrides),
			zap.Time("deadline", c.plan.Deadline), zap.Time("collect_by", c.plan.CollectBy))
	}
}

// 4 SELECT
func (c *CoordinatorActor) recordSelection() {
	sel := c.plan.Selection
	counts := sel.SkipCounts()
	skipped := c.plan.SkipsToRecord()
	rec := &messages.Selection{Policy: c.deps.Plan.Policy.String(), Eligible: int32(sel.Eligible)}
	if len(counts) > 0 {
		rec.SkipCounts = make(map[string]int32, len(counts))
		for reason, n := range counts {
			rec.SkipCounts[reason] = int32(n)
		}
	}
	if len(skipped) > 0 {
		rec.Skipped = make([]*messages.Skip, len(skipped))
		skips := make([]messages.Skip, len(skipped)) // one allocation for the list
		for i, s := range skipped {
			skips[i] = messages.Skip{Model: s.Model, Provider: s.Provider, Reason: s.Reason.String()}
			rec.Skipped[i] = &skips[i]
		}
	}
	rec.Picks = make([]*messages.Pick, len(sel.Picks))
	picks := make([]messages.Pick, len(sel.Picks))
	for i, p := range sel.Picks {
		picks[i] = messages.Pick{Model: p.Model, Provider: p.Provider, Sampled: p.Sampled, Score: p.Score,
			Deprioritised: p.Deprioritised, Explored: p.Explored, Alpha: p.Alpha, Beta: p.Beta}
		rec.Picks[i] = &picks[i]
	}
	c.exec.Selection = rec
	c.logSelection(sel.Picks, counts, skipped, sel.Eligible, false)
}

func (c *CoordinatorActor) logSelection(picks []bandit.Pick, counts map[string]int, skipped []bandit.Skip, eligible int, replacing bool) {
	if !c.log.Core().Enabled(zap.DebugLevel) {
		return
	}
	log := c.log.Debug
	if replacing {
		log = c.jobLog
	}
	log("models selected", zap.String("event", "selection"), zap.String("policy", c.deps.Plan.Policy.String()), zap.Bool("replacement", replacing),
		zap.Int("eligible", eligible), zap.Array("picks", picksField(picks)), zap.Object("skip_counts", countsField(counts)),
		zap.Array("skipped", skipsField(skipped)), zap.Uint64("sequence", c.seq))
}

// 5 ASSIGN
func (c *CoordinatorActor) recordAssignment() {
	if ce := c.log.Check(zap.DebugLevel, "workers assigned"); ce != nil {
		ce.Write(zap.String("event", "assignment"), zap.Strings("workers", c.plan.Workers), zap.Bool("heavy", c.plan.Heavy),
			zap.Array("rejected", rejectionsField(c.plan.Rejected)))
	}
}

// env answers the collection machine's questions from the plan and the published snapshots.
type env struct{ c *CoordinatorActor }

func (e env) Worker(avoid []string) (string, bool) { return e.c.plan.Worker(e.c.world, avoid) }

func (e env) ProviderDown(provider string) bool {
	st := e.c.world.Provider(provider, e.c.world.Now())
	return st.BreakerOpen || st.Stopped
}

func (e env) Replace(n int, tried, refused map[string]bool) []collect.Assignment {
	picks, workers := e.c.plan.Replace(e.c.world, n, tried, refused, e.c.rng)
	e.c.logSelection(picks, nil, nil, len(picks), true)
	out := make([]collect.Assignment, len(picks))
	for i, p := range picks {
		out[i] = collect.Assignment{Model: p.Model, Provider: p.Provider, Worker: workers[i]}
	}
	return out
}

// collectBy is the end of collection as a message field: one for every message of the request, since
// messages are never changed once sent.
func (c *CoordinatorActor) collectBy() *timestamppb.Timestamp {
	if c.collectByTS == nil {
		c.collectByTS = ts(c.plan.CollectBy)
	}
	return c.collectByTS
}

// queueBy is the request's bound on waiting for rate limits as a message field, made once.
func (c *CoordinatorActor) queueBy() *timestamppb.Timestamp {
	if c.queueByTS == nil {
		c.queueByTS = ts(c.plan.QueueBy)
	}
	return c.queueByTS
}

// jobID names a job across the actors: the request's id and the job's number, made once.
func (c *CoordinatorActor) jobID(j *collect.Job) string {
	for len(c.jobIDs) <= j.Seq { // jobs are numbered in the order they are made
		c.jobIDs = append(c.jobIDs, c.req.RequestId+"/"+strconv.Itoa(len(c.jobIDs)))
	}
	return c.jobIDs[j.Seq]
}

// apply interprets the collection machine's effects.
func (c *CoordinatorActor) apply(ctx actor.Context, effects []collect.Effect) {
	for _, e := range effects {
		j := e.Job
		switch e.Kind {
		case collect.Acquire:
			if c.unreachable(ctx, j) {
				continue
			}
			// The provider dispatches the job itself once it grants the permit.
			ctx.Send(c.deps.Dir.Provider(j.Slot.Provider).PID, &messages.Acquire{JobId: c.jobID(j), Model: j.Slot.Model,
				Tokens: int32(c.plan.ContextTokens), Deadline: c.collectBy(), QueueBy: c.queueBy(), ReplyTo: ctx.Self(),
				Dispatch: &messages.Dispatch{ReplyTo: ctx.Self(), Job: c.job(j)}, DispatchTo: c.deps.Dir.Worker(j.Worker).PID})
		case collect.Dispatch:
			c.dispatched(ctx, j)
		case collect.Settle:
			if p := c.deps.Dir.Provider(j.Slot.Provider); p.Stopped() == "" {
				ctx.Send(p.PID, c.outcome(j, e.Record))
			}
		case collect.Cancel:
			if w := c.deps.Dir.Worker(j.Worker); w.Stopped() == "" {
				ctx.Send(w.PID, &messages.CancelJob{JobId: c.jobID(j)})
			}
		case collect.Wake:
			c.due.set(c.deps.Timers, ctx.Self(), e.At, wake{at: e.At})
		case collect.Retried:
			rs := c.machine.Retries()
			r := rs[len(rs)-1]
			c.jobLog("retry", zap.String("event", "retry"), zap.String("model", r.Model), zap.String("provider", r.Provider),
				zap.String("from_worker", r.FromWorker), zap.Int("attempt", r.Attempt), zap.String("kind", string(r.Kind)),
				zap.Duration("delay", r.Delay), zap.String("outcome", r.Outcome))
			c.progress(ctx, func() *messages.Progress {
				return &messages.Progress{Event: "retry", Model: r.Model, Provider: r.Provider, Worker: r.FromWorker, Attempt: int32(r.Attempt),
					ErrorKind: string(r.Kind), DelayMs: ms(r.Delay), Status: r.Outcome}
			})
		case collect.Finish:
			c.finishCollection(ctx)
			return
		}
	}
}

// unreachable answers a job whose provider or worker actor is stopped for good (after the job was
// planned) on their behalf, through the actor's own mailbox: a refused permit, or a result that sends
// the job to another worker. It reports whether it did.
func (c *CoordinatorActor) unreachable(ctx actor.Context, j *collect.Job) bool {
	id := c.jobID(j)
	if c.deps.Dir.Provider(j.Slot.Provider).Stopped() != "" {
		ctx.Send(ctx.Self(), &messages.Permit{JobId: id, Reason: PermitProviderStopped})
		return true
	}
	if c.deps.Dir.Worker(j.Worker).Stopped() != "" {
		ctx.Send(ctx.Self(), &messages.JobResult{JobId: id, RequestId: c.req.RequestId, Kind: providers.KindAnswer, Model: j.Slot.Model,
			Provider: j.Slot.Provider, Worker: j.Worker, Attempt: int32(j.Attempt), ErrorKind: string(resilience.WorkerUnavailable),
			ErrorMessage: "the worker is stopped"})
		return true
	}
	return false
}

// progress tells the request's listener, if it has one, of a step; the step is built only then.
func (c *CoordinatorActor) progress(ctx actor.Context, step func() *messages.Progress) {
	if c.req.ProgressTo == nil {
		return
	}
	p := step()
	p.RequestId, p.ElapsedMs = c.req.RequestId, ms(time.Since(c.began))
	ctx.Send(c.req.ProgressTo, p)
}

// progressOf reports the planning step whose phase just ended: classification, then selection.
func (c *CoordinatorActor) progressOf(ctx actor.Context, phase *float64) {
	switch phase {
	case &c.exec.Phases.ClassifyMs:
		cls := c.exec.Classification
		c.progress(ctx, func() *messages.Progress {
			return &messages.Progress{Event: "classified", Category: cls.Category, Confidence: cls.Confidence}
		})
	case &c.exec.Phases.SelectMs:
		c.progress(ctx, func() *messages.Progress {
			p := &messages.Progress{Event: "selected", Blueprint: c.plan.Blueprint.Name, Strategy: string(c.plan.Blueprint.Strategy)}
			for _, pick := range c.plan.Selection.Picks {
				p.Models = append(p.Models, pick.Model)
			}
			return p
		})
	}
}

// job is the call a job makes, as its worker runs it.
func (c *CoordinatorActor) job(j *collect.Job) *messages.Job {
	maxTokens, upstream := c.deps.modelLimits(j.Slot.Model)
	if s := c.req.GetAsk().GetSampling(); s != nil && s.MaxTokens != nil {
		maxTokens = int(*s.MaxTokens) // the caller's limit, whatever the reserve
	}
	return &messages.Job{RequestId: c.req.RequestId, JobId: c.jobID(j), Kind: providers.KindAnswer, Model: j.Slot.Model, UpstreamModel: upstream,
		Provider: j.Slot.Provider, Prompt: c.req.Task, Category: c.plan.Category, MaxTokens: int32(maxTokens), Deadline: c.collectBy(),
		TimeoutSeconds: c.plan.Blueprint.TimeoutSeconds, Attempt: int32(j.Attempt), Ask: c.req.Ask,
		Stream: c.req.StreamTo != nil && c.plan.IsDirect()}
}

// dispatched notes a job its provider dispatched: the first word from its worker says the permit was
// granted.
func (c *CoordinatorActor) dispatched(ctx actor.Context, j *collect.Job) {
	if j.Initial {
		if c.undispatched--; c.undispatched == 0 {
			c.exec.Phases.DispatchMs = ms(time.Since(c.dispatchStart))
		}
	}
	// Debug: the assignment line names the workers, and each reply its worker and attempt.
	if ce := c.log.Check(zap.DebugLevel, "job dispatched"); ce != nil {
		ce.Write(zap.String("event", "dispatch"), zap.Int("job", j.Seq), zap.String("model", j.Slot.Model),
			zap.String("provider", j.Slot.Provider), zap.String("worker", j.Worker), zap.Int("attempt", j.Attempt), zap.Bool("probe", j.Probe))
	}
	c.progress(ctx, func() *messages.Progress {
		return &messages.Progress{Event: "dispatched", Model: j.Slot.Model, Provider: j.Slot.Provider, Worker: j.Worker, Attempt: int32(j.Attempt)}
	})
}

func (c *CoordinatorActor) onPermit(ctx actor.Context, now time.Time, seq int, p *messages.Permit) {
	if p.Granted {
		c.granted(ctx, now, seq, p.Probe)
		return
	}
	if j := c.machine.Job(seq); j != nil {
		c.jobLog("permit denied", zap.String("event", "permit_denied"), zap.Int("job", seq), zap.String("model", j.Slot.Model),
			zap.String("provider", j.Slot.Provider), zap.String("reason", p.Reason), zap.Float64("retry_after_seconds", p.RetryAfterSeconds))
	}
	c.apply(ctx, c.machine.Permit(now, seq, collect.Permit{Reason: p.Reason, RetryAfter: seconds(p.RetryAfterSeconds)}))
}

// granted applies a job's permit, once: the machine takes a grant only while the job waits for it.
func (c *CoordinatorActor) granted(ctx actor.Context, now time.Time, seq int, probe bool) {
	if j := c.machine.Job(seq); j != nil && probe {
		j.Probe = true
	}
	c.apply(ctx, c.machine.Permit(now, seq, collect.Permit{Granted: true}))
}

// onDelta relays a piece of a streamed answer to the caller: the pieces of the first job to stream
// only, so that a retry's answer is never interleaved with a broken one.
func (c *CoordinatorActor) onDelta(ctx actor.Context, d *messages.Delta) {
	if c.streaming == "" {
		c.streaming = d.JobId
	}
	if d.JobId == c.streaming && !c.broken {
		ctx.Send(c.req.StreamTo, d)
	}
}

func (c *CoordinatorActor) onResult(ctx actor.Context, r *messages.JobResult) {
	seq, _ := jobOf(r.JobId, c.req.RequestId)
	now := time.Now()
	if r.JobId == c.streaming && !r.Ok && !c.broken {
		// Its caller holds part of an answer already: another model's, or a retry's, cannot follow it.
		c.broken = true
		// Its result's effects come first: a failure that is not retried finishes the request, and Stop
		// then has nothing left to do. The machine reuses its effect buffer, so they are copied.
		settled := slices.Clone(c.machine.Result(now, seq, collect.Reply{Kind: resilience.Kind(r.ErrorKind), Scope: resilience.ParseScope(r.ErrorScope), Ref: r}))
		c.apply(ctx, settled)
		c.apply(ctx, c.machine.Stop(now, resilience.Kind(r.ErrorKind)))
		return
	}
	c.granted(ctx, now, seq, false) // a result the worker gave without starting the call (its breaker is open)
	reply := collect.Reply{OK: r.Ok, Text: r.Text, ToolCalls: len(r.ToolCalls), Kind: resilience.Kind(r.ErrorKind), Scope: resilience.ParseScope(r.ErrorScope),
		RetryAfter: seconds(r.RetryAfterSeconds), Ref: r}
	effects := c.machine.Result(now, seq, reply)
	if j := c.machine.Job(seq); j != nil && j.Record != nil && j.Record.Ref == r { // a reply that settled its call, not a late one
		// An answer is summarised in collect_done's calls; a failed call has a line of its own.
		if j.Record.Status != collect.OK {
			c.jobLog("reply received", zap.String("event", "reply"), zap.Int("job", seq), zap.String("model", r.Model),
				zap.String("provider", r.Provider), zap.String("worker", r.Worker), zap.String("status", string(j.Record.Status)),
				zap.String("error_kind", string(j.Record.Kind)), zap.String("error_scope", r.ErrorScope), zap.Float64("latency_ms", r.LatencyMs),
				zap.Int32("http_status", r.HttpStatus))
		} else if ce := c.log.Check(zap.DebugLevel, "reply received"); ce != nil {
			ce.Write(zap.String("event", "reply"), zap.Int("job", seq), zap.String("model", r.Model), zap.String("provider", r.Provider),
				zap.String("worker", r.Worker), zap.String("status", string(j.Record.Status)), zap.Float64("latency_ms", r.LatencyMs))
		}
		c.progress(ctx, func() *messages.Progress {
			return &messages.Progress{Event: "reply", Model: r.Model, Provider: r.Provider, Worker: r.Worker, Attempt: int32(j.Attempt),
				Status: string(j.Record.Status), LatencyMs: r.LatencyMs, ErrorKind: string(j.Record.Kind)}
		})
	}
	c.apply(ctx, effects)
}

// outcome is the message that settles a job's permit with its provider. A job settled while it waited
// for its permit may have been dispatched by the provider meanwhile: it is stopped.
func (c *CoordinatorActor) outcome(j *collect.Job, rec *collect.Record) *messages.Outcome {
	r, _ := rec.Ref.(*messages.JobResult)
	o := Settlement(c.jobID(j), j.Slot.Model, rec.Verdict, rec.RetryAfter, r)
	o.Stop = rec.WaitedForPermit
	return o
}

// stop ends the request for a reason outside it: its caller left, or the shutdown timeout ended.
func (c *CoordinatorActor) stop(ctx actor.Context, kind resilience.Kind) {
	if c.machine == nil {
		return // still planning: the request answers on its own in a moment
	}
	if c.consensus != nil {
		ctx.Stop(c.consensus) // it gives its arbiter's permit back
		c.fail(ctx, kind, stopMessage(kind), 0, nil)
		return
	}
	c.apply(ctx, c.machine.Stop(time.Now(), kind))
}

func stopMessage(kind resilience.Kind) string {
	if kind == resilience.ClientClosed {
		return "the caller went away before the answer"
	}
	return "the request was still running when the shutdown timeout ended"
}

// finishCollection hands the answers to a consensus actor, or fails the request when there are none.
func (c *CoordinatorActor) finishCollection(ctx actor.Context) {
	c.due.stop()
	d := c.machine.Done()
	q, mode := d.Quorum, blueprints.FixedQuorum
	if c.plan.Blueprint.Adaptive() {
		mode = blueprints.AdaptiveQuorum
	}
	if c.audit {
		q.Stopped = "audit"
	}
	c.exec.Quorum = &messages.QuorumOutcome{Mode: mode, Asked: int32(q.Asked), Selected: int32(len(c.plan.Selection.Picks)),
		Waves: int32(q.Waves), Stopped: q.Stopped, Posterior: q.Posterior}
	c.exec.Phases.CollectMs = ms(time.Since(c.dispatchStart))
	if c.exec.Phases.DispatchMs == 0 {
		c.exec.Phases.DispatchMs = c.exec.Phases.CollectMs
	}
	if ce := c.log.Check(zap.DebugLevel, "collection finished"); ce != nil {
		ce.Write(zap.String("event", "collect_done"), zap.Int("ok", len(d.Answers)), zap.Int("min_responses", c.plan.Blueprint.MinResponses),
			zap.Int("rounds", d.Rounds), zap.Int("asked", q.Asked), zap.Int("waves", q.Waves), zap.String("stopped", q.Stopped),
			zap.Float64("collect_ms", c.exec.Phases.CollectMs), zap.String("failure", string(d.Failure)),
			zap.Array("calls", callsField(c.machine.Records())), zap.Int("lines_suppressed", max(c.jobLines-JobLogBudget, 0)))
	}
	if c.broken {
		c.fail(ctx, d.Failure, "the answer's stream broke after it began: "+lastError(c.machine.Records()), 0, nil)
		return
	}
	// Without an answer, the details name each model's cause: the caller sees which upstream is down,
	// refused, limited or slow, not only that nothing came.
	var why validation.Errors
	if d.Failure != "" {
		why = causes(c.machine.Records(), c.providerFault)
	}
	switch d.Failure {
	case "":
	case resilience.ClientClosed, resilience.ShuttingDown:
		c.fail(ctx, d.Failure, stopMessage(d.Failure), 0, nil)
		return
	case resilience.RateLimited:
		c.fail(ctx, d.Failure, "every call met a provider's rate limit with no room before the request's queue bound "+
			"(rate_limits.max_queue_seconds) or its deadline, and no other model had room", d.RetryAfter, why)
		return
	case resilience.InvalidAPIKey, resilience.PaymentRequired:
		c.fail(ctx, d.Failure, "the provider refused its key or its account; it takes no call until its key changes", 0, why)
		return
	case resilience.ModelNotFound:
		c.fail(ctx, d.Failure, "the provider does not know the model; it has left the pool", 0, why)
		return
	case resilience.RequestTooLarge:
		c.fail(ctx, d.Failure, "the task is too large for the models asked: split it into chunks, or name models with a larger "+
			"context window (GET /models lists each model's context_window)", 0, why)
		return
	case resilience.AllProvidersDown:
		c.fail(ctx, d.Failure, "no model could answer: the providers of the models asked are down (refused or failed connections, "+
			"open breakers); the details name each model's cause", 0, why)
		return
	default:
		c.fail(ctx, d.Failure, "no worker returned an answer before the deadline", 0, why)
		return
	}
	c.exec.Degraded = d.Degraded
	c.answers = d.Answers
	if c.plan.IsDirect() { // one answer, its own: nothing to merge, but it must be what was asked
		j := d.Answers[0]
		res := j.Record.Ref.(*messages.JobResult)
		if c.structure.JSON() && len(res.ToolCalls) == 0 {
			if b := consensus.Ballots([]consensus.Response{{Model: j.Slot.Model, Text: res.Text}}, c.structure, consensus.Text)[0]; !b.Valid {
				c.fail(ctx, resilience.NoValidAnswer, "the answer is not the JSON the request asks for", 0,
					validation.Errors{{Field: j.Slot.Model, Message: b.Problem}})
				return
			}
		}
		c.consensusStart = time.Now()
		c.onConsensus(ctx, directAnswer(j))
		return
	}
	reliability := map[string]float64{} // one reading per provider, so its candidates are weighed alike
	in := &messages.ConsensusInput{RequestId: c.req.RequestId, Category: c.plan.Category, Strategy: string(c.plan.Blueprint.Strategy), Task: c.req.Task,
		AnswerKind: string(c.plan.AnswerKind), ResponseFormat: c.req.GetAsk().GetResponseFormat(), Tools: c.req.GetAsk().GetTools()}
	models := make([]string, len(d.Answers))
	for i, j := range d.Answers {
		s := j.Slot
		rel, ok := reliability[s.Provider]
		if !ok {
			rel = c.deps.Dir.Provider(s.Provider).Snapshot().Reliability
			reliability[s.Provider] = rel
		}
		var capability float64
		if m, ok := c.deps.Catalog.Load().Get(s.Model); ok {
			capability = m.Capability(c.plan.Category)
		}
		learned := c.deps.Dir.Arms.Accuracy(c.plan.Category, s.Model)
		res := j.Record.Ref.(*messages.JobResult)
		cand := &messages.Candidate{Model: s.Model, Provider: s.Provider, Worker: j.Worker, Text: res.Text, ToolCalls: res.ToolCalls,
			Capability: capability, Recency: c.deps.Dir.Arms.Arm(c.plan.Category, s.Model).Recency, Reliability: rel, Learned: learned}
		if c.deps.Reward == feedback.Reliability { // votes weigh by accuracy only where rewards measure it
			cand.Accuracy = learned
		}
		in.Candidates = append(in.Candidates, cand)
		models[i] = s.Model
	}
	c.consult(ctx, in, models)
}

// consult hands the answers to a consensus actor: one of its own when it asks an arbiter model (after
// waiting for its turn), a shared decider otherwise.
func (c *CoordinatorActor) consult(ctx actor.Context, in *messages.ConsensusInput, models []string) {
	if consensus.AsksArbiter(c.plan.Blueprint.Strategy) && len(in.Candidates) > 1 {
		if c.round == nil {
			c.waiting, c.waitingModels = in, models
			return
		}
		in.Round = *c.round
		in.ArbiterModel = consensus.ArbiterFor(models, in.Round)
		for _, cd := range in.Candidates {
			if cd.Model == in.ArbiterModel {
				in.ArbiterProvider, in.ArbiterWorker = cd.Provider, cd.Worker
			}
		}
		// The arbiter's time ends with the request's: the caller's timeout includes it.
		deadline := time.Now().Add(c.deps.Plan.ArbiterTimeout)
		if c.plan.Deadline.Before(deadline) {
			deadline = c.plan.Deadline
		}
		in.Deadline = ts(deadline)
		// Its permit waits for rate limits no longer than the request's calls did.
		in.QueueBy = c.queueBy()
		in.Stream = c.req.StreamTo != nil // the synthesis goes to the caller as the arbiter writes it
	}
	c.consensusStart = time.Now()
	c.consulting = true
	if in.ArbiterModel == "" {
		ds := c.deps.Dir.Deciders
		ctx.Request(ds[c.seq%uint64(len(ds))], in)
		return
	}
	c.consensus = ctx.Spawn(c.deps.Props(NewConsensusActor(c.deps, in, c.structure)))
}

// lastError is what the last failed call said.
func lastError(records []*collect.Record) string {
	for i := len(records) - 1; i >= 0; i-- {
		if r, ok := records[i].Ref.(*messages.JobResult); ok && !r.Ok {
			return r.ErrorMessage
		}
	}
	return "the call failed"
}

// directAnswer is a direct call's answer as a consensus of one, which judges nobody: the model's
// arm learns only from its faults.
func directAnswer(j *collect.Job) *messages.ConsensusResult {
	return &messages.ConsensusResult{Answer: j.Record.Ref.(*messages.JobResult).Text, Contributed: []bool{true}, Weighted: []float64{1}, Unjudged: true,
		Decision: &messages.ArbiterDecision{Strategy: plan.DirectBlueprint, Scores: []float64{1}, ChosenModel: j.Slot.Model}}
}

func (c *CoordinatorActor) onConsensus(ctx actor.Context, r *messages.ConsensusResult) {
	c.consensus, c.consulting = nil, false
	c.exec.Phases.ConsensusMs = ms(time.Since(c.consensusStart))
	if r.Failure != "" {
		if r.FailureCode != string(resilience.NoValidAnswer) {
			c.fail(ctx, resilience.Internal, "consensus failed: "+r.Failure, 0, nil)
			return
		}
		// The record shows who answered what, and feedback penalises every invalid answer.
		c.exec.Decision, c.ballots = r.Decision, r.GetDecision().GetBallots()
		problems := make(validation.Errors, len(r.FailureDetails))
		for i, p := range r.FailureDetails {
			problems[i] = validation.Problem{Field: p.Field, Message: p.Message}
		}
		c.fail(ctx, resilience.NoValidAnswer, r.Failure, 0, problems)
		return
	}
	c.exec.Decision, c.ballots = r.Decision, r.Decision.Ballots
	c.exec.Answer = r.Answer
	if ce := c.log.Check(zap.DebugLevel, "consensus reached"); ce != nil {
		ce.Write(zap.String("event", "consensus"), zap.String("strategy", r.Decision.Strategy),
			zap.String("arbiter", r.Decision.Arbiter), zap.Int32("chosen", r.Decision.Chosen), zap.Float64s("scores", r.Decision.Scores),
			zap.Bools("contributed", r.Contributed), zap.Strings("agreement", r.Decision.Agreement), zap.Strings("disagreement", r.Decision.Disagreement),
			zap.String("arbiter_error", r.Decision.ArbiterError), zap.Bool("degraded", c.exec.Degraded), zap.Bool("merged", r.Decision.Merged),
			zap.Int("invalid", invalidBallots(r.Decision.Ballots)))
	}
	c.progress(ctx, func() *messages.Progress {
		return &messages.Progress{Event: "consensus", Strategy: r.Decision.Strategy, ChosenModel: r.Decision.ChosenModel}
	})

	c.respond(ctx, r)
}

// feedback is step 9: every model's arm learns from its calls, answers judged by the consensus (none
// when the request failed before one), faults of the model penalised either way.
func (c *CoordinatorActor) feedback(ctx actor.Context, r *messages.ConsensusResult) {
	t := time.Now()
	records := c.machine.Records()
	category := c.plan.Category
	if category == "" { // a direct call: its model learns on its arm over all categories
		category = AllCategories
	}
	calls := make([]feedback.Call, 0, len(records))
	for _, rec := range records {
		call := feedback.Call{Model: rec.Job.Slot.Model, Arm: rec.Verdict.Arm, TimedOut: rec.Status == collect.Timeout}
		if i, ok := c.answerOf(rec.Job); ok && rec.Status == collect.OK {
			call.Invalid = i < len(c.ballots) && !c.ballots[i].Valid
			if r != nil {
				call.Contributed, call.Score = r.Contributed[i], r.Decision.Scores[i]
				if len(r.Groups) > 0 { // a reliability-weighted vote: the scores are posteriors
					call.Posterior = &r.Decision.Scores[i]
				}
			}
		}
		calls = append(calls, call)
	}
	if r != nil && len(r.Groups) == len(c.answers) {
		votes := &messages.Votes{Category: c.plan.Category, Groups: r.Groups}
		for _, j := range c.answers {
			votes.Models = append(votes.Models, j.Slot.Model)
		}
		c.deps.Dir.Arms.VoteSent()
		ctx.Send(c.deps.Dir.Bandit, votes)
	}
	judge := feedback.ByConsensus(c.deps.Reward)
	if r == nil || r.Unjudged { // no consensus, or one that judged nobody: only faults are penalised
		judge = func(feedback.Call) (float64, string, bool) { return 0, "", false }
	}
	updates := feedback.Rewards(calls, judge)
	sent := make([]*messages.Reward, 0, len(updates))
	for _, u := range updates {
		arm := c.deps.Dir.Arms.Arm(category, u.Model)
		sent = append(sent, &messages.Reward{Model: u.Model, Category: category, Reward: u.Reward, Reason: u.Reason, RequestId: c.req.RequestId})
		c.exec.BanditUpdates = append(c.exec.BanditUpdates, &messages.BanditUpdate{Model: u.Model, Category: category, Reward: u.Reward,
			Reason: u.Reason, AlphaBefore: arm.Alpha, BetaBefore: arm.Beta})
	}
	rewards(ctx, c.deps.Dir.Bandit, sent...)
	c.exec.Phases.FeedbackMs = ms(time.Since(t))
	if ce := c.log.Check(zap.DebugLevel, "bandit updated"); ce != nil {
		ce.Write(zap.String("event", "bandit_updates"), zap.String("category", category), zap.Array("updates", updatesField(c.exec.BanditUpdates)))
	}
}

// invalidBallots counts the ballots that were not valid.
func invalidBallots(bs []*messages.Ballot) int {
	n := 0
	for _, b := range bs {
		if !b.Valid {
			n++
		}
	}
	return n
}

// answerOf is a job's place among the answers handed to the consensus, if it gave one.
func (c *CoordinatorActor) answerOf(j *collect.Job) (int, bool) {
	for i, a := range c.answers {
		if a == j {
			return i, true
		}
	}
	return 0, false
}

// providerFault is a provider's last fault, as its snapshot publishes it.
func (c *CoordinatorActor) providerFault(provider string) string {
	if ref := c.deps.Dir.Provider(provider); ref != nil {
		return ref.Snapshot().LastFault
	}
	return ""
}

// fail answers with a failure; the record is kept like any other.
func (c *CoordinatorActor) fail(ctx actor.Context, kind resilience.Kind, message string, retryAfter time.Duration, problems validation.Errors) {
	f := &messages.Failure{Code: string(kind), Message: message, RetryAfterSeconds: retryAfter.Seconds()}
	for _, p := range problems {
		f.Details = append(f.Details, &messages.Problem{Field: p.Field, Message: p.Message})
	}
	c.exec.Error = f
	c.respond(ctx, nil)
}

// respond is step 10: the record to the metrics and the recorder first (so a caller who scrapes or
// asks for it right after the answer finds it), then the answer, then stop. Nothing changes the record
// afterwards.
func (c *CoordinatorActor) respond(ctx actor.Context, r *messages.ConsensusResult) {
	c.answered = true
	c.due.stop()
	status := 200
	if c.exec.Error != nil {
		status = resilience.StatusOf(resilience.Kind(c.exec.Error.Code))
	}
	c.exec.StatusCode = int32(status)
	if c.machine != nil {
		c.feedback(ctx, r)
		c.assembleResults(r)
	}
	c.exec.CompletedAt = ts(c.deps.now())
	c.exec.Phases.TotalMs = ms(time.Since(c.began))
	c.deps.Metrics.Execution(c.exec)
	ctx.Send(c.deps.Dir.Recorder, c.exec)
	ctx.Send(c.replyTo, c.exec)
	level := zap.InfoLevel
	if status >= 500 {
		level = zap.WarnLevel
	}
	if ce := c.log.Check(level, "request finished"); ce != nil {
		ce.Write(zap.Inline(summary{c.exec, c.plan.Category}))
	}
	ctx.Stop(ctx.Self())
}

// union adds the names of more that names lacks, in order.
func union(names, more []string) []string {
	for _, n := range more {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func addUsage(sum, u *messages.Usage) *messages.Usage {
	if u == nil {
		return sum
	}
	if sum == nil {
		sum = &messages.Usage{}
	}
	sum.InputTokens += u.InputTokens
	sum.OutputTokens += u.OutputTokens
	return sum
}

// assembleResults writes the calls, their usage and cost, and the retry history into the record.
func (c *CoordinatorActor) assembleResults(r *messages.ConsensusResult) {
	records := c.machine.Records()
	results := make([]messages.WorkerResult, len(records)) // one allocation for the list
	c.exec.Results = make([]*messages.WorkerResult, 0, len(records))
	for k, rec := range records {
		j := rec.Job
		wr := &results[k]
		*wr = messages.WorkerResult{JobId: c.jobID(j), Model: j.Slot.Model, Provider: j.Slot.Provider, Worker: j.Worker, Attempt: int32(j.Attempt),
			Status: string(rec.Status), ErrorKind: string(rec.Kind), ErrorScope: rec.Scope.String(), BudgetMs: ms(j.Budget)}
		if res, ok := rec.Ref.(*messages.JobResult); ok {
			wr.Text, wr.LatencyMs, wr.ErrorMessage, wr.HttpStatus, wr.Usage = res.Text, res.LatencyMs, res.ErrorMessage, res.HttpStatus, res.Usage
			wr.FinishReason, wr.ServedModel, wr.Cost, wr.UpstreamRequestId = res.FinishReason, res.ServedModel, res.Cost, res.UpstreamRequestId
			wr.ProviderLatencyMs, wr.ToolCalls, wr.DroppedParameters = res.ProviderLatencyMs, res.ToolCalls, res.DroppedParameters
			c.exec.Cost += res.Cost
			c.exec.Usage = addUsage(c.exec.Usage, res.Usage)
			c.exec.DroppedParameters = union(c.exec.DroppedParameters, res.DroppedParameters)
		}
		if i, ok := c.answerOf(j); ok && r != nil && rec.Status == collect.OK {
			wr.WeightedScore, wr.Contributed = r.Weighted[i], r.Contributed[i]
			if d := r.Decision; d != nil && int(d.Chosen) == i {
				c.exec.FinishReason, c.exec.ToolCalls = wr.FinishReason, wr.ToolCalls
			}
		}
		c.exec.Results = append(c.exec.Results, wr)
	}
	if d := c.exec.Decision; d != nil {
		c.exec.Cost += d.ArbiterCost
		c.exec.Usage = addUsage(c.exec.Usage, d.ArbiterUsage)
	}
	for _, rt := range c.machine.Retries() {
		c.exec.Retries = append(c.exec.Retries, &messages.Retry{Model: rt.Model, Provider: rt.Provider, FromWorker: rt.FromWorker, ToWorker: rt.ToWorker,
			Attempt: int32(rt.Attempt), Kind: string(rt.Kind), DelayMs: ms(rt.Delay), Outcome: rt.Outcome})
	}
}

// ListenProgress spawns an actor in system that hands every Progress it receives to onProgress (which
// must not block), and returns its PID for RouteRequest.progress_to with the function that ends it: that
// function returns once every step already received is handed over, so the steps sent before a
// request's answer are all told before the caller shows the answer. A malformed step is not handed
// over.
func ListenProgress(system *actor.ActorSystem, onProgress func(*messages.Progress)) (*actor.PID, func()) {
	return listenProgress(system, "", onProgress, nil)
}

// ListenProgress is ListenProgress for the request requestID of this engine: the steps of other
// requests and malformed ones are not handed over, and are counted.
func (d *Deps) ListenProgress(system *actor.ActorSystem, requestID string, onProgress func(*messages.Progress)) (*actor.PID, func()) {
	return listenProgress(system, requestID, onProgress, d)
}

func listenProgress(system *actor.ActorSystem, requestID string, onProgress func(*messages.Progress), deps *Deps) (*actor.PID, func()) {
	drop := func(reason string, msg any) {
		if deps != nil {
			deps.Drop(KindProgress, reason, msg)
		}
	}
	pid := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch p := c.Message().(type) {
		case *messages.Progress:
			if why := checkProgress(p, requestID); why != "" {
				drop(why, p)
				return
			}
			onProgress(p)
		default:
			if !Lifecycle(p) {
				drop(DropUnknownMessage, p)
			}
		}
	}))
	return pid, func() { _ = system.Root.PoisonFuture(pid).Wait() }
}

// ListenDeltas spawns an actor in system that hands every piece of request requestID's streamed answer
// to onDelta (which must not block), and returns its PID for RouteRequest.stream_to with the function
// that ends it once every piece received is handed over.
func (d *Deps) ListenDeltas(system *actor.ActorSystem, requestID string, onDelta func(*messages.Delta)) (*actor.PID, func()) {
	pid := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.Delta:
			if m.RequestId != requestID {
				d.Drop(KindProgress, DropWrongTarget, m)
				return
			}
			onDelta(m)
		default:
			d.unknown(KindProgress, m)
		}
	}))
	return pid, func() { _ = system.Root.PoisonFuture(pid).Wait() }
}
