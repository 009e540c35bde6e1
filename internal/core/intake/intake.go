// Package intake is the one validation of a route request, whichever door it came in by: the HTTP API's
// /route-thompson and /v1 endpoints, and the remote listener. A door decodes its wire format into a
// messages.RouteRequest (a member of the wrong JSON type is the door's problem, as it cannot decode it)
// and hands the request to Check, which judges what the request says against the blueprints and the
// catalog in force: the task, the category, the models and a direct call's fallbacks, the overrides of
// the blueprint, the timeout, the metadata, and the ask (sampling parameters, tools, tool choice,
// output format and the conversation with its content parts and tool calls).
//
// Problems are named as /route-thompson names its fields (task, models[1], timeout, quorum_tau,
// parameters.temperature, ...), and the parts of an ask /route-thompson does not take as chat
// completions names them (messages[0].content[1].image_url.url, tools[0].function.name, tool_choice,
// response_format.type): a door whose body names a field otherwise renames the problem.
package intake

import (
	"fmt"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/structpb"
)

// Env is what judging a request needs of the running system: the catalog and the blueprints in force.
type Env interface {
	Catalog() *catalog.Catalog
	Blueprints() *blueprints.Set
}

// Bounds of a route request.
const (
	// MaxModels bounds the models a request restricts selection to.
	MaxModels = 64
	// MaxModelIDBytes bounds a model id (a catalog's are far shorter).
	MaxModelIDBytes = 200
	// MaxFallbacks bounds a direct call's fallbacks.
	MaxFallbacks = 8
	// MaxQuorumGraceSeconds bounds the grace an adaptive quorum waits.
	MaxQuorumGraceSeconds = problems.MaxTimeoutSeconds
)

// Verdict is what Check finds wrong with a request: problems of its form (a 400), and names of
// models or blueprints the system does not hold (a 404 when they are the only problems).
type Verdict struct {
	Bad     problems.Errors
	Unknown problems.Errors
}

// OK reports whether the request may go on.
func (v Verdict) OK() bool { return len(v.Bad) == 0 && len(v.Unknown) == 0 }

// NotFound reports whether the only problems are unknown names.
func (v Verdict) NotFound() bool { return len(v.Bad) == 0 && len(v.Unknown) > 0 }

// Problems lists every problem, those of form first, capped (problems.Errors.Capped).
func (v Verdict) Problems() problems.Errors {
	return append(append(problems.Errors{}, v.Bad...), v.Unknown...).Capped()
}

// Check judges a route request, listing every problem at once.
func Check(req *messages.RouteRequest, env Env) Verdict {
	c := &checker{env: env}
	if req == nil {
		c.bad.Add("body", "holds no request")
		return c.verdict()
	}
	if !problems.Visible(req.Task) {
		c.bad.Add("task", "must have at least one visible character")
	}
	if req.Category != "" && !env.Blueprints().Has(req.Category) {
		c.unknown.Add("category", fmt.Sprintf("unknown blueprint %q (GET /blueprints lists them)", problems.Clip(req.Category, 128)))
	}
	c.models(req)
	c.overrides(req)
	c.metadata(req.GetMetadata())
	c.fallbacks(req)
	ask := req.GetAsk()
	c.sampling(ask.GetSampling())
	c.tools(ask.GetTools())
	c.toolChoice(ask.GetToolChoice(), ask.GetTools())
	c.format(ask.GetResponseFormat())
	c.conversation(ask.GetMessages())
	// Overrides that are valid one by one can still contradict the blueprint (min_responses above its
	// workers): the combination is checked when the category is known.
	if req.Category != "" && c.verdict().OK() {
		if bp, err := env.Blueprints().Get(req.Category); err == nil {
			if _, err := bp.Apply(execution.Overrides(req)); err != nil {
				c.bad = append(c.bad, problems.Of(err)...)
			}
		}
	}
	return c.verdict()
}

type checker struct {
	env          Env
	bad, unknown problems.Errors
	// schemaNodes are the objects and booleans of the request's schemas read so far.
	schemaNodes int
}

func (c *checker) verdict() Verdict { return Verdict{Bad: c.bad, Unknown: c.unknown} }

// models checks the models a request names: a direct call's one, or those selection is restricted to.
func (c *checker) models(req *messages.RouteRequest) {
	if req.Direct && len(req.Models) != 1 {
		c.bad.Add("models", "a direct call names exactly one model")
	}
	if len(req.Models) > MaxModels {
		c.bad.Add("models", fmt.Sprintf("must list at most %d models", MaxModels))
		return
	}
	seen := make(map[string]bool, len(req.Models))
	for i, m := range req.Models {
		c.model(fmt.Sprintf("models[%d]", i), m, seen, "is listed twice")
	}
}

// model checks one model a request names in field: not empty, of a bounded length, not named before
// (seen; twice says so), in the catalog and one that answers tasks.
func (c *checker) model(field, id string, seen map[string]bool, twice string) {
	switch {
	case id == "":
		c.bad.Add(field, "must not be empty")
	case len(id) > MaxModelIDBytes:
		c.bad.Add(field, fmt.Sprintf("must be at most %d bytes", MaxModelIDBytes))
	case seen[id]:
		c.bad.Add(field, fmt.Sprintf("model %q %s", problems.Clip(id, 128), twice))
	default:
		if m, known := c.env.Catalog().Get(id); !known {
			c.unknown.Add(field, fmt.Sprintf("unknown model %q (GET /models lists them)", problems.Clip(id, 128)))
		} else if m.Has(catalog.Embeddings) {
			c.bad.Add(field, fmt.Sprintf("%q is an embeddings model: POST /v1/embeddings asks it", problems.Clip(id, 128)))
		}
	}
	seen[id] = true
}

// overrides checks the request's changes to its blueprint one by one, and the caller's timeout.
func (c *checker) overrides(req *messages.RouteRequest) {
	if s := req.Strategy; s != nil && !blueprints.Strategy(*s).Valid() {
		c.bad.Add("strategy", fmt.Sprintf("unknown strategy %q (want majority, weighted, rotating or pairwise)", problems.Clip(*s, 64)))
	}
	// timeout bounds the caller's wait (answer, retries and arbiter included); the blueprint's timeout
	// stays each call's budget.
	if t := req.TimeoutSeconds; t != nil {
		if problem := problems.Timeout(*t); problem != "" {
			c.bad.Add("timeout", problem)
		}
	}
	c.quorum(req)
	c.counts(req)
}

// quorum checks the request's quorum, its tau and its grace.
func (c *checker) quorum(req *messages.RouteRequest) {
	if q := req.Quorum; q != nil && *q != blueprints.FixedQuorum && *q != blueprints.AdaptiveQuorum {
		c.bad.Add("quorum", `must be "fixed" or "adaptive"`)
	}
	if t := req.QuorumTau; t != nil && !(*t > 0 && *t < 1) {
		c.bad.Add("quorum_tau", "must be greater than 0 and less than 1")
	}
	if s := req.QuorumGraceSeconds; s != nil && !(*s >= 0 && *s <= MaxQuorumGraceSeconds) {
		c.bad.Add("quorum_grace_seconds", fmt.Sprintf("must be between 0 and %d seconds", MaxQuorumGraceSeconds))
	}
}

// counts checks the request's workers and min_responses, each in range, and min_responses within the
// workers and the models requested.
func (c *checker) counts(req *messages.RouteRequest) {
	workers, minResponses := req.Workers, req.MinResponses
	for _, n := range []struct {
		field string
		v     **int32
	}{{"workers", &workers}, {"min_responses", &minResponses}} {
		if v := *n.v; v != nil && (*v < 1 || *v > blueprints.MaxWorkers) {
			c.bad.Add(n.field, fmt.Sprintf("must be between 1 and %d", blueprints.MaxWorkers))
			*n.v = nil // out of range: nothing to compare with the other
		}
	}
	n := minResponses
	switch {
	case n == nil:
	case workers != nil && *n > *workers:
		c.bad.Add("min_responses", fmt.Sprintf("must not exceed workers (%d)", *workers))
	case len(req.Models) > 0 && int(*n) > len(req.Models):
		c.bad.Add("min_responses", fmt.Sprintf("must not exceed the number of requested models (%d)", len(req.Models)))
	}
}

// metadata checks what the request's metadata says to the pipeline: the kind of answer it asks for.
func (c *checker) metadata(md *structpb.Struct) {
	kind, ok := md.GetFields()["answer_kind"]
	if !ok {
		return
	}
	k, isString := kind.GetKind().(*structpb.Value_StringValue)
	if !isString {
		c.bad.Add("metadata.answer_kind", "must be a string")
		return
	}
	if _, err := consensus.ParseKind(k.StringValue); err != nil {
		c.bad.Add("metadata.answer_kind", err.Error())
	}
}

// fallbacks checks a direct call's fallbacks: catalog models that answer chats, each once, other than
// the model itself. A panel has none: its blueprint's selection already stands in for a failed model.
func (c *checker) fallbacks(req *messages.RouteRequest) {
	if len(req.Fallbacks) == 0 {
		return
	}
	switch {
	case !req.Direct:
		c.bad.Add("fallbacks", "only a direct call (model names a catalog model) takes fallbacks")
		return
	case len(req.Fallbacks) > MaxFallbacks:
		c.bad.Add("fallbacks", fmt.Sprintf("must list between 1 and %d models", MaxFallbacks))
		return
	}
	seen := map[string]bool{}
	if len(req.Models) > 0 {
		seen[req.Models[0]] = true
	}
	for i, id := range req.Fallbacks {
		c.model(fmt.Sprintf("fallbacks[%d]", i), id, seen, "is the model or an earlier fallback")
	}
}
