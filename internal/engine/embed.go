package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/books"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/tokens"
	"github.com/conclave-ai/conclave/messages"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// EmbeddingsBlueprint names the plan of an embeddings call in its record.
const EmbeddingsBlueprint = "embeddings"

// EmbedTimeout bounds an embeddings call, its wait for a permit included.
const EmbedTimeout = 60 * time.Second

// Embed asks one catalog model for the embeddings of its inputs. It is a plain gateway call that the
// controller makes itself, in the caller's goroutine: a permit of the model's provider (its breakers
// and rate limits, as every call takes one), the call through the registry (the provider's key and base
// URL), the permit settled with the call's verdict, then the record (the model, its usage and cost from
// the catalog's prices) to the metrics and the recorder. There is nothing to classify, select, retry on
// another host or vote on, and no arm learns: a vector is not an answer the bandit can judge. The
// answer holds the record and, when the call succeeded, a vector per input.
func (e *Engine) Embed(ctx context.Context, req *messages.EmbedRequest) (*messages.EmbedResult, error) {
	e.inflight.Add(1)
	defer e.inflight.Done()
	exec := &messages.Execution{RequestId: req.RequestId, ClientRequestId: req.ClientRequestId, ReceivedAt: req.ReceivedAt, NodeId: e.cfg.NodeID, KeyId: req.KeyId,
		Task: strings.Join(req.Inputs, "\n\n"), Phases: &messages.Phases{},
		Blueprint: &messages.Blueprint{Name: EmbeddingsBlueprint, Workers: 1, MinResponses: 1, TimeoutSeconds: EmbedTimeout.Seconds()}}
	if e.tracing != nil { // the door's span is the request's
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			exec.TraceId = sc.TraceID().String()
			defer e.tracing.Record(ctx, exec)
		}
	}
	out := &messages.EmbedResult{Execution: exec}
	if e.closing.Load() {
		fail(exec, resilience.ShuttingDown, "conclave is shutting down", 0)
		return out, nil
	}
	if k, ok := keys.CallerOf(ctx); ok && req.KeyId == "" {
		req.KeyId, exec.KeyId = k.ID, k.ID
	}
	if req.KeyId != "" {
		p, _, f := e.keys.admit(ctx, ask{id: req.RequestId, keyID: req.KeyId, named: []string{req.Model}})
		if f != nil {
			exec.Error, exec.StatusCode = f, int32(resilience.StatusOf(resilience.Kind(f.Code)))
			return out, nil
		}
		exec.TeamId = p.teamID
		defer p.settle(exec)
	}
	m, ok := e.embeddingsModel(req, exec)
	if !ok {
		return out, nil
	}
	account, ok := e.deps.Inflight.Open(req.RequestId, int64(len(exec.Task)))
	if !ok {
		fail(exec, resilience.Overloaded, e.inflightFull(), time.Second)
		return out, nil
	}
	defer account.Close()
	ref := e.deps.Dir.Provider(m.Provider)
	if ref == nil {
		return nil, fmt.Errorf("embeddings %s: provider %s has no actor", req.RequestId, m.Provider)
	}
	began := time.Now()
	res := &messages.WorkerResult{JobId: req.RequestId + "/embed", Model: m.ID, Provider: m.Provider, BudgetMs: ms(EmbedTimeout)}
	exec.Results = []*messages.WorkerResult{res}
	if err := e.embedWithPermit(ctx, req, m, ref.PID, out, res, began); err != nil {
		return nil, err
	}
	e.finishEmbed(req, m, exec, res, began)
	return out, nil
}

// embeddingsModel is the catalog model an embeddings request names, and whether it makes embeddings;
// when it does not (or the catalog does not know it), exec says why.
func (e *Engine) embeddingsModel(req *messages.EmbedRequest, exec *messages.Execution) (catalog.Model, bool) {
	m, known := e.catalog.Load().Get(req.Model)
	switch {
	case !known:
		fail(exec, resilience.ModelNotFound, "no such model", 0, &messages.Problem{Field: "model",
			Message: fmt.Sprintf("unknown model %q (GET /v1/models lists them)", problems.Clip(req.Model, 128))})
		return m, false
	case !m.Has(catalog.Embeddings) || !e.registry.Embeds(m.Provider):
		fail(exec, resilience.MalformedRequest, "the model has no embeddings", 0, &messages.Problem{Field: "model", Message: noEmbeddings(m)})
		return m, false
	}
	return m, true
}

// embedWithPermit waits, until the call's deadline, for a permit of the model's provider and makes the
// call with it, adding its vectors to out; without a permit, res and the record say why. It fails only
// when the exchange with the provider's actor broke.
func (e *Engine) embedWithPermit(ctx context.Context, req *messages.EmbedRequest, m catalog.Model, provider *actor.PID,
	out *messages.EmbedResult, res *messages.WorkerResult, began time.Time) error {
	exec := out.Execution
	deadline := began.Add(EmbedTimeout)
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tokens := 0
	for _, in := range req.Inputs {
		tokens += classify.EstimateTokens(in)
	}
	permit, err := e.permit(callCtx, provider, &messages.Acquire{JobId: res.JobId, Model: m.ID, Tokens: int32(min(tokens, actors.MaxTokens)),
		Deadline: timestamppb.New(deadline)})
	exec.Phases.DispatchMs = ms(time.Since(began))
	switch {
	case err != nil && ctx.Err() != nil:
		res.Status, res.ErrorKind = "cancelled", string(resilience.ClientClosed)
		fail(exec, resilience.ClientClosed, "the caller went away before the answer", 0)
	case err != nil && callCtx.Err() != nil:
		res.Status, res.ErrorKind = "not_sent", string(resilience.RateLimited)
		fail(exec, resilience.RateLimited, "no permit of the provider came before the call's deadline", 0)
	case err != nil:
		return fmt.Errorf("embeddings %s: %w", req.RequestId, err)
	case !permit.Granted:
		kind, msg := permitFailure(permit.Reason, m.Provider)
		res.Status, res.ErrorKind = "not_sent", "permit_"+permit.Reason
		fail(exec, kind, msg, time.Duration(permit.RetryAfterSeconds*float64(time.Second)))
	default:
		vectors := e.embedCall(ctx, callCtx, req, m, provider, res, exec)
		for _, v := range vectors {
			out.Vectors = append(out.Vectors, &messages.Vector{Values: v})
		}
	}
	return nil
}

// finishEmbed completes an embeddings call's record (its status, its end, its phases) and hands it to
// the metrics and the recorder, then logs the call; with a spool, as Route, the answer waits for its
// record.
func (e *Engine) finishEmbed(req *messages.EmbedRequest, m catalog.Model, exec *messages.Execution, res *messages.WorkerResult, began time.Time) {
	exec.StatusCode = int32(http.StatusOK)
	if exec.Error != nil {
		exec.StatusCode = int32(resilience.StatusOf(resilience.Kind(exec.Error.Code)))
	}
	exec.CompletedAt = timestamppb.New(e.deps.Clock.Now())
	// Collection, as a routed request's, is the wait for the model: its permit and its call.
	exec.Phases.CollectMs = ms(time.Since(began))
	exec.Phases.TotalMs = exec.Phases.CollectMs
	e.deps.Metrics.Execution(exec)
	var durable *actor.Future
	if e.deps.AnswersWaitForRecords { // the recorder answers once the record is durable (actors.Answer)
		durable = actor.NewFuture(e.system, actors.DurableWait+time.Second)
		e.system.Root.Send(e.deps.Dir.Recorder, &actors.Answer{Exec: exec, To: durable.PID()})
	} else {
		e.system.Root.Send(e.deps.Dir.Recorder, exec)
	}
	level := zap.InfoLevel
	if exec.Error != nil && actors.Shedding(resilience.Kind(exec.Error.Code)) {
		// Counted in one line for all, as a routed request refused for load.
		e.deps.Shed().Add(exec.Error.Code)
		level = zap.DebugLevel
	}
	e.log.Check(level, "embeddings answered").Write(zap.String("event", "embeddings"), zap.String("request_id", req.RequestId), zap.String("model", m.ID),
		zap.String("provider", m.Provider), zap.Int("inputs", len(req.Inputs)), zap.Int32("status", exec.StatusCode), zap.String("error_kind", res.ErrorKind),
		zap.Float64("latency_ms", res.LatencyMs), zap.Stringer("cost", money.USD(exec.CostNanos)))
	if durable != nil {
		_, _ = durable.Result() // the recorder logs a record that is not durable
	}
}

// embedCall makes a permitted embeddings call, settles its permit and fills in its result; it returns
// the vectors, or nil when the call failed (exec then says why). ctx is the caller's, callCtx the
// call's, which ends at its deadline too.
func (e *Engine) embedCall(ctx, callCtx context.Context, req *messages.EmbedRequest, m catalog.Model, provider *actor.PID,
	res *messages.WorkerResult, exec *messages.Execution) [][]float32 {
	t := time.Now()
	if exec.ReceivedAt != nil {
		res.StartedMs = execution.Offset(exec.ReceivedAt.AsTime(), t)
	}
	// On the books as every call is: held against its key, journaled, then charged what it used.
	metered, err := e.books.Open(callCtx, books.Spec{CallID: res.JobId, RequestID: req.RequestId, KeyID: req.KeyId, Model: m.ID, Provider: m.Provider,
		MaxTokens: -1, Prompt: func(s tokens.Scheme) int {
			n := 0
			for _, in := range req.Inputs {
				n += s.Count(in)
			}
			return n
		}})
	if err != nil {
		kind := resilience.KindOf(err)
		res.Status, res.ErrorKind, res.ErrorMessage = "not_sent", string(kind), err.Error()
		e.system.Root.Send(provider, actors.Settlement(res.JobId, m.ID, resilience.Verdict{}, 0, &messages.JobResult{ErrorKind: string(resilience.NotSent)}))
		fail(exec, kind, err.Error(), 0)
		return nil
	}
	got, err := e.registry.Embed(callCtx, providers.EmbedCall{RequestID: req.RequestId, Provider: m.Provider, Model: m.ID, UpstreamModel: m.UpstreamID,
		Inputs: req.Inputs, Dimensions: int(req.Dimensions), User: req.User})
	// A provider that counts no tokens (Gemini) is counted as the books count a prompt.
	usage := books.Usage(providers.Reply{Usage: got.Usage}, err, metered.Prompt(), "", metered.Scheme())
	cost := metered.Close(usage)
	if usage.InputTokens > 0 {
		res.Usage = &messages.Usage{InputTokens: int32(min(usage.InputTokens, actors.MaxTokens)), Estimated: usage.Estimated}
	}
	res.CostNanos = int64(cost)
	exec.Usage, exec.CostNanos = res.Usage, res.CostNanos
	res.LatencyMs, res.ProviderLatencyMs = ms(time.Since(t)), ms(got.Latency)
	res.ServedModel, res.UpstreamRequestId, res.DroppedParameters = got.ServedModel, got.UpstreamRequestID, got.Dropped
	exec.DroppedParameters = got.Dropped
	kind := fleet.ClassifyError(err)
	// The call's own deadline blames; the caller's leaving (or its shorter deadline) blames nobody.
	full := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	verdict := resilience.Blame(resilience.Call{Kind: kind, Scope: resilience.ScopeOf(err), FullBudget: full})
	var retryAfter time.Duration
	var re *resilience.Error
	if errors.As(err, &re) {
		res.HttpStatus, retryAfter = int32(re.Status), re.RetryAfter
	}
	settled := &messages.JobResult{ErrorKind: string(kind)}
	if got.RateLimit != nil {
		settled.RateLimit = fleet.RateLimitInfo(got.RateLimit)
	}
	if err != nil {
		res.ErrorKind, res.ErrorMessage, res.ErrorScope = string(kind), err.Error(), resilience.ScopeOf(err).String()
		settled.ErrorMessage = res.ErrorMessage
		e.system.Root.Send(provider, actors.Settlement(res.JobId, m.ID, verdict, retryAfter, settled))
		switch {
		case kind == resilience.UpstreamTimeout && full:
			res.Status = "timeout"
		case kind == resilience.UpstreamTimeout, kind == resilience.Cancelled:
			res.Status = "cancelled"
		default:
			res.Status = "error"
		}
		switch {
		case ctx.Err() != nil:
			fail(exec, resilience.ClientClosed, "the caller went away before the answer", 0)
		default:
			fail(exec, kind, fmt.Sprintf("the embeddings call failed: %v", err), retryAfter)
		}
		return nil
	}
	res.Status, res.FinishReason = "ok", "stop"
	settled.Usage = res.Usage
	e.system.Root.Send(provider, actors.Settlement(res.JobId, m.ID, verdict, 0, settled))
	res.Contributed = true
	exec.Decision = &messages.ArbiterDecision{Strategy: EmbeddingsBlueprint, ChosenModel: m.ID, Scores: []float64{1}}
	return got.Vectors
}

// permit asks a provider's actor for a permit and waits for it until ctx ends; a permit given up is
// handed back, so that an acquisition that waited for the rate limits leaves the queue and a permit
// granted meanwhile goes back unused.
func (e *Engine) permit(ctx context.Context, provider *actor.PID, a *messages.Acquire) (*messages.Permit, error) {
	f := actor.NewFuture(e.system, time.Until(a.Deadline.AsTime())+Margin)
	a.ReplyTo = f.PID()
	e.system.Root.Send(provider, a)
	type answer struct {
		res any
		err error
	}
	got := make(chan answer, 1) // the future ends by its timeout: the goroutine never outlives it
	go func() {
		res, err := f.Result()
		got <- answer{res, err}
	}()
	select {
	case ans := <-got:
		if ans.err != nil { // checked first: a late reply can race the future's timeout
			return nil, fmt.Errorf("permit %s: %w", a.JobId, ans.err)
		}
		p, ok := ans.res.(*messages.Permit)
		if !ok {
			return nil, fmt.Errorf("permit %s: unexpected reply %T", a.JobId, ans.res)
		}
		return p, nil
	case <-ctx.Done():
		e.system.Root.Send(provider, &messages.Outcome{JobId: a.JobId, Model: a.Model, Stop: true})
		return nil, ctx.Err()
	}
}

// permitFailure is the failure of a call its provider refused a permit, by the refusal's reason.
func permitFailure(reason, provider string) (resilience.Kind, string) {
	switch reason {
	case "rate_limited", "model_rate_limited":
		return resilience.RateLimited, "the provider's rate limit has no room before the call's deadline"
	case "model_removed", actors.PermitModelUnknown:
		return resilience.ModelNotFound, "the provider does not know the model; it has left the pool"
	case string(resilience.RequestTooLarge):
		return resilience.RequestTooLarge, "the inputs hold more tokens than the provider's rate limit allows in a call"
	case "provider_disabled":
		return resilience.InvalidAPIKey, "the provider refused its key or its account; it takes no call until its key changes"
	}
	return resilience.AllProvidersDown, fmt.Sprintf("provider %s takes no call now (%s)", provider, reason)
}

// noEmbeddings says why a model has no embeddings.
func noEmbeddings(m catalog.Model) string {
	if !m.Has(catalog.Embeddings) {
		return fmt.Sprintf("%q is not an embeddings model (its catalog entry lacks the %s capability)", problems.Clip(m.ID, 128), catalog.Embeddings)
	}
	return fmt.Sprintf("%q is served by %s, whose wire format has no embeddings (OpenAI-compatible and Gemini providers have them)",
		problems.Clip(m.ID, 128), m.Provider)
}

// fail makes a record a failure of a kind, with the problems that caused it.
func fail(exec *messages.Execution, kind resilience.Kind, msg string, retryAfter time.Duration, details ...*messages.Problem) {
	exec.Error = &messages.Failure{Code: string(kind), Message: msg, RetryAfterSeconds: retryAfter.Seconds(), Details: details}
	exec.StatusCode = int32(resilience.StatusOf(kind))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// CountTokens counts a request's prompt as the books count a call's (books.PromptTokens): its
// messages, images, tools and output schema, under the tokenizer of its model (a direct call's; a
// panel's under the default). No model is called and nothing is charged.
func (e *Engine) CountTokens(req *messages.RouteRequest) int {
	model := ""
	if req.Direct && len(req.Models) == 1 {
		model = req.Models[0]
	}
	m, _ := e.catalog.Load().Get(model)
	call := fleet.CallOf(&messages.Job{Model: model, Prompt: req.Task, Ask: req.Ask})
	return books.PromptTokens(call, tokens.For(model, m.Family))
}
