package actors

import (
	"github.com/conclave-ai/conclave/internal/platform/alarm"
	"time"

	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/core/tracing"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// start makes the plan (steps 2 to 5, pure decisions of the plan package, each recorded and logged as
// it is made) and starts the collection (6 and 7); a step that fails answers the request.
func (c *CoordinatorActor) start(ctx host) {
	c.open(ctx)
	if !c.planSteps(ctx) {
		return
	}
	// A schema that cannot be compiled is refused before any model is asked.
	st, err := consensus.Compile(FormatOf(c.req.GetAsk().GetResponseFormat(), c.req.GetAsk().GetTools()))
	if err != nil {
		c.fail(ctx, resilience.MalformedRequest, err.Error(), 0, problems.Errors{{Field: "response_format.schema", Message: err.Error()}})
		return
	}
	c.structure = st
	c.collect(ctx)
}

// open sets the request's random source, log and clock, and starts its record.
func (c *CoordinatorActor) open(ctx host) {
	c.began = time.Now()
	root, self := ctx.ActorSystem().Root, ctx.Self()
	c.due = alarm.New(func() { root.Send(self, wake{}) })
	c.rng = c.deps.Random(c.seq)
	c.log = c.deps.Log
	if c.log.Core().Enabled(zap.DebugLevel) { // the step lines name their request; at info only the summary does
		c.log = c.log.With(zap.String("request_id", c.req.RequestId))
	}
	c.world = c.deps.World()
	c.exec = &messages.Execution{
		RequestId: c.req.RequestId, ClientRequestId: c.req.ClientRequestId, ReceivedAt: c.req.ReceivedAt, Task: c.req.Task,
		Metadata: c.req.Metadata, TimeoutSeconds: c.req.TimeoutSeconds, NodeId: c.deps.NodeID, Phases: &messages.Phases{}, Retries: []*messages.Retry{},
		KeyId: c.req.KeyId, TeamId: c.req.TeamId, TraceId: tracing.TraceID(c.req.TraceParent),
	}
	// The record's moments are counted from the request's receipt; a request that came without one
	// (a caller inside the process) was received now.
	if c.exec.ReceivedAt == nil {
		c.exec.ReceivedAt = ts(c.began)
	}
	c.origin = c.exec.ReceivedAt.AsTime()
}

// planStep is one step of the plan: it runs, is timed into its phase, and is recorded.
type planStep struct {
	run    func() *plan.Failure
	phase  *float64
	record func()
	// explains is true when the step's record explains its own failure (the skipped models).
	explains bool
	// start, for the steps a trace shows, is where the record keeps the step's start.
	start *float64
}

// planSteps runs steps 2 to 5 (a direct call: its model and fallbacks, then the assignment) and
// reports whether they all succeeded; the first that fails answers the request.
func (c *CoordinatorActor) planSteps(ctx host) bool {
	req := c.planRequest()
	p := plan.New(c.deps.Plan)
	c.plan = p
	phases := c.exec.Phases
	steps := []planStep{
		{func() *plan.Failure { return p.Classify(req) }, &phases.ClassifyMs, c.recordClassification, false, &phases.ClassifyStartMs},
		{func() *plan.Failure { return p.ChooseBlueprint(req, c.began) }, &phases.BlueprintMs, c.recordBlueprint, false, nil},
		{func() *plan.Failure { return p.Select(c.world, req, c.rng) }, &phases.SelectMs, c.recordSelection, true, &phases.SelectStartMs},
		{func() *plan.Failure { return p.Assign(c.world) }, &phases.AssignMs, c.recordAssignment, true, nil},
	}
	if req.Direct { // the model the caller named, then its fallbacks: nothing to classify or choose
		steps = steps[2:]
		steps[0].run = func() *plan.Failure { return p.Direct(c.world, req, c.began) }
		steps[0].record = func() { c.recordBlueprint(); c.recordSelection() }
	}
	for _, step := range steps {
		t := time.Now()
		if step.start != nil {
			*step.start = execution.Offset(c.origin, t)
		}
		f := step.run()
		*step.phase = ms(time.Since(t))
		if f == nil || step.explains {
			step.record()
		}
		if f != nil {
			c.fail(ctx, f.Kind, f.Err.Error(), f.RetryAfter, f.Problems())
			return false
		}
		c.progressOf(ctx, step.phase)
	}
	return true
}

// collect starts steps 6 DISPATCH (a permit from each provider, then the job to its worker) and 7
// COLLECT.
func (c *CoordinatorActor) collect(ctx host) {
	p, phases := c.plan, c.exec.Phases
	bp := p.Blueprint
	cfg, initial := execution.Collection(p, c.deps.RetryScale)
	if bp.Adaptive() {
		// A share of requests asks every model, so that estimates keep learning from the models a
		// settled answer would not have asked.
		if c.audit = c.rng.Float64() < bp.Audit(); !c.audit {
			cfg.Adaptive = &collect.Adaptive{Wave: bp.MinResponses, Settle: c.settle}
		}
	}
	c.machine = collect.New(cfg, initial, env{c}, c.rng)
	c.dispatchStart, c.undispatched = time.Now(), len(initial)
	phases.CollectStartMs = execution.Offset(c.origin, c.dispatchStart)
	if consensus.AsksArbiter(bp.Strategy) {
		// The turn is taken now, off the actor (a shared rotation asks Redis), so that neither this
		// actor nor the consensus waits on I/O.
		self, root, dir, category := ctx.Self(), ctx.ActorSystem().Root, c.deps.Dir, p.Category
		go func() { root.Send(self, turnTaken{round: dir.NextRound(category)}) }()
	}
	c.apply(ctx, c.machine.Start(c.dispatchStart))
}

// 2 CLASSIFY
func (c *CoordinatorActor) recordClassification() {
	p := c.plan
	cls := execution.Classification(p)
	c.exec.Classification = cls
	logClassified(c.log, p, cls)
}

// 3 BLUEPRINT
func (c *CoordinatorActor) recordBlueprint() {
	bp := c.plan.Blueprint
	c.exec.Blueprint = execution.Blueprint(bp)
	c.exec.Overrides = c.plan.Overrides
	c.exec.Deadline = ts(c.plan.Deadline)
	logBlueprint(c.log, c.plan, c.exec.Overrides)
}

// 4 SELECT
func (c *CoordinatorActor) recordSelection() {
	sel := c.plan.Selection
	counts := sel.SkipCounts()
	skipped := c.plan.SkipsToRecord()
	c.exec.Selection = execution.Selection(c.deps.Plan.Policy.String(), sel, counts, skipped)
	c.logSelection(sel.Picks, counts, skipped, sel.Eligible, false)
}

// 5 ASSIGN
func (c *CoordinatorActor) recordAssignment() {
	logAssigned(c.log, c.plan)
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
