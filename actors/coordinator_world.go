package actors

import (
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/plan"
	"github.com/conclave-ai/conclave/messages"
)

// What a coordinator reads of the world for its decisions: the plan's request, the collection
// machine's questions (workers, providers, replacements), the consensus weights, a provider's last
// fault and the call a job makes. Reads only; coordinator.go acts.

// planRequest is what the plan needs of the request, with the parameters strict_parameters holds it to.
func (c *CoordinatorActor) planRequest() plan.Request {
	// A model must carry what the caller reads in the answer (its log probabilities), and with
	// strict_parameters every parameter.
	params := fleet.ParamsOf(c.req.GetAsk().GetSampling())
	strict := params.Insisted()
	if c.req.StrictParameters {
		strict = params.Given()
	}
	return execution.Request(c.req, strict)
}

// settle tells an adaptive quorum whether the answers so far settle the request: the leading
// answer's posterior under the reliability-weighted vote reaches the blueprint's tau, or the models not
// yet asked could not change what the consensus decides. Free text never settles early; JSON answers
// and tool calls vote with their ballots.
func (c *CoordinatorActor) settle(answers []*collect.Job, unasked int) collect.Verdict {
	arms, category := c.deps.Dir.Arms, c.plan.Category
	resps := make([]consensus.Response, len(answers))
	for i, j := range answers {
		res := j.Record.Ref.(*messages.JobResult)
		resps[i] = consensus.Response{Model: j.Slot.Model, Text: res.Text, ToolCalls: toolCalls(res.ToolCalls),
			Accuracy: arms.Accuracy(category, j.Slot.Model)}
	}
	p, ok := consensus.Leading(resps, c.plan.AnswerKind, c.structure)
	v := collect.Verdict{Settled: ok && p >= c.plan.Blueprint.Tau(), Posterior: p}
	// A plain majority vote (where rewards do not weigh votes by accuracy) is settled as soon as the
	// unasked models could not change it, and the next wave asks only as many as could.
	if !v.Settled && unasked > 0 && c.plan.Blueprint.Strategy == blueprints.Majority && !c.accuracyVotes() {
		v.Settled, v.Next = consensus.Decided(resps, unasked, c.plan.AnswerKind, c.structure)
	}
	return v
}

// accuracyVotes reports whether the consensus weighs votes by accuracy: only where rewards measure it.
func (c *CoordinatorActor) accuracyVotes() bool { return c.deps.Reward == feedback.Reliability }

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

// weights reads what the consensus weighs each answer by, for the request's category.
type weights struct{ c *CoordinatorActor }

func (w weights) Reliability(provider string) float64 {
	return w.c.deps.Dir.Provider(provider).Snapshot().Reliability
}

func (w weights) Capability(model string) float64 {
	if m, ok := w.c.deps.Catalog.Load().Get(model); ok {
		return m.Capability(w.c.plan.Category)
	}
	return 0
}

func (w weights) Accuracy(model string) float64 {
	return w.c.deps.Dir.Arms.Accuracy(w.c.plan.Category, model)
}

func (w weights) Anchored(model string) bool {
	return w.c.deps.Dir.Arms.Anchored(w.c.plan.Category, model)
}

func (w weights) Dependence(model, other string) float64 {
	return w.c.deps.Dir.Arms.Dependence(w.c.plan.Category, model, other)
}

func (w weights) Recency(model string) float64 {
	return w.c.deps.Dir.Arms.Arm(w.c.plan.Category, model).Recency
}

// providerFault is a provider's last fault, as its snapshot publishes it.
func (c *CoordinatorActor) providerFault(provider string) string {
	if ref := c.deps.Dir.Provider(provider); ref != nil {
		return ref.Snapshot().LastFault
	}
	return ""
}

// job is the call a job makes, as its worker runs it.
func (c *CoordinatorActor) job(j *collect.Job) *messages.Job {
	var caller *int32
	if s := c.req.GetAsk().GetSampling(); s != nil {
		caller = s.MaxTokens
	}
	maxTokens, upstream := c.deps.callLimit(j.Slot.Model, j.Slot.Provider, caller)
	return &messages.Job{RequestId: c.req.RequestId, KeyId: c.req.KeyId, JobId: c.jobID(j), Kind: providers.KindAnswer, Model: j.Slot.Model, UpstreamModel: upstream,
		Provider: j.Slot.Provider, Prompt: c.req.Task, Category: c.plan.Category, MaxTokens: int32(maxTokens), Deadline: c.collectBy(),
		TimeoutSeconds: c.plan.Blueprint.TimeoutSeconds, Attempt: int32(j.Attempt), Ask: c.req.Ask,
		Stream: c.streams() && c.plan.IsDirect()}
}
