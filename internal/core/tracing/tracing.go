// Package tracing turns a finished execution record into the spans of its request's trace: a span for
// each phase a caller waits through (classify, select, collect, consensus) and one for each model call,
// named and described by OpenTelemetry's semantic conventions for generative AI. It is pure: the record
// holds every moment (counted from the request's receipt), and the shell that owns the tracer emits the
// spans with these explicit times after the request has answered, so that no actor on the request's
// path touches a tracer, and a request costs nothing when tracing is off.
package tracing

import (
	"time"

	"github.com/conclave-ai/conclave/messages"
)

// The attributes' names: OpenTelemetry's (GenAI and the general error.type), then Conclave's own.
const (
	OperationName     = "gen_ai.operation.name"
	ProviderName      = "gen_ai.provider.name"
	RequestModel      = "gen_ai.request.model"
	ResponseModel     = "gen_ai.response.model"
	ResponseID        = "gen_ai.response.id"
	FinishReasons     = "gen_ai.response.finish_reasons"
	InputTokens       = "gen_ai.usage.input_tokens"
	OutputTokens      = "gen_ai.usage.output_tokens"
	ErrorType         = "error.type"
	RequestID         = "conclave.request_id"
	ClientRequestID   = "conclave.client_request_id"
	KeyID             = "conclave.key_id"
	Category          = "conclave.category"
	Confidence        = "conclave.confidence"
	LowConfidence     = "conclave.low_confidence"
	Blueprint         = "conclave.blueprint"
	Strategy          = "conclave.strategy"
	Policy            = "conclave.selection.policy"
	Eligible          = "conclave.selection.eligible"
	Picked            = "conclave.selection.models"
	Asked             = "conclave.quorum.asked"
	Stopped           = "conclave.quorum.stopped"
	Degraded          = "conclave.degraded"
	Chosen            = "conclave.consensus.chosen_model"
	DecidedBy         = "conclave.consensus.decided_by"
	Agreement         = "conclave.consensus.agreement"
	ArbiterError      = "conclave.consensus.arbiter_error"
	Role              = "conclave.call.role" // arbiter; a panel's calls have none
	JobID             = "conclave.call.job_id"
	Worker            = "conclave.call.worker"
	Attempt           = "conclave.call.attempt"
	Status            = "conclave.call.status"
	Contributed       = "conclave.call.contributed"
	Cost              = "conclave.cost_nanos"
	StatusCode        = "conclave.status_code"
	OperationChat     = "chat"
	OperationEmbed    = "embeddings"
	RoleArbiter       = "arbiter"
	embeddingsRecords = "embeddings" // the blueprint an embeddings request's record names
	directRecords     = "direct"     // the blueprint a direct call's record names
)

// The phases' span names.
const (
	Classify  = "classify"
	Select    = "select"
	Collect   = "collect"
	Consensus = "consensus"
)

// Kind is a span's kind, as OpenTelemetry names them.
type Kind uint8

// The kinds a request's spans take: its phases are internal work, a model call is a client's call.
const (
	Internal Kind = iota
	Client
)

// Type is the type of an attribute's value.
type Type uint8

// The types of the attributes' values.
const (
	String Type = iota
	Int
	Float
	Bool
	Strings
)

// Attr is one attribute of a span.
type Attr struct {
	Key   string
	Type  Type
	Str   string
	Int   int64
	Float float64
	Bool  bool
	Strs  []string
}

// Str, Integer, Number, Flag and List make attributes of each type.
func Str(k, v string) Attr            { return Attr{Key: k, Type: String, Str: v} }
func Integer(k string, v int64) Attr  { return Attr{Key: k, Type: Int, Int: v} }
func Number(k string, v float64) Attr { return Attr{Key: k, Type: Float, Float: v} }
func Flag(k string, v bool) Attr      { return Attr{Key: k, Type: Bool, Bool: v} }
func List(k string, v []string) Attr  { return Attr{Key: k, Type: Strings, Strs: v} }

// Root is the parent of the spans that hang from the request's own span.
const Root = -1

// Span is one span of a request's trace below the request's own span.
type Span struct {
	Name string
	Kind Kind
	// Parent is the index of the parent span in the list, or Root; a parent comes before its children.
	Parent     int
	Start, End time.Time
	Attrs      []Attr
	// Error is the span's error.type when it failed ("" when it did not): its status is then an error.
	Error string
}

// Spans are the spans of a finished request below its own span, parents first: its phases, the model
// calls of its panel under collect and the arbiter's call under consensus. A phase or a call the record
// has no start for (it did not run, or the record is older than the moments it keeps) has no span.
func Spans(e *messages.Execution) []Span {
	if e.GetReceivedAt() == nil || e.GetPhases() == nil {
		return nil
	}
	p := e.Phases
	b := spanBuilder{origin: e.ReceivedAt.AsTime(), spans: make([]Span, 0, 4+len(e.Results)+1)}
	b.phase(Classify, p.ClassifyStartMs, p.ClassifyMs, classifyAttrs(e))
	b.phase(Select, p.SelectStartMs, p.SelectMs, selectAttrs(e))
	collect := b.phase(Collect, p.CollectStartMs, p.CollectMs, collectAttrs(e))
	var consensus = Root
	if e.GetBlueprint().GetName() != directRecords { // a direct call's one answer is merged with nothing
		consensus = b.phase(Consensus, p.ConsensusStartMs, p.ConsensusMs, consensusAttrs(e))
	}
	operation := OperationChat
	if e.GetBlueprint().GetName() == embeddingsRecords {
		operation = OperationEmbed
	}
	for _, r := range e.Results {
		if r.StartedMs <= 0 || r.Status == "late" { // never started; a late answer's call has its span already
			continue
		}
		b.call(r, operation, collect)
	}
	if d := e.GetDecision(); d != nil && d.ArbiterModel != "" && d.ArbiterStartedMs > 0 && consensus != Root {
		b.arbiter(d, consensus)
	}
	for i := range b.spans {
		if b.spans[i].Error != "" {
			b.spans[i].Attrs = append(b.spans[i].Attrs, Str(ErrorType, b.spans[i].Error))
		}
	}
	return b.spans
}

// spanBuilder lists a request's spans, parents first, its moments counted from origin.
type spanBuilder struct {
	origin time.Time
	spans  []Span
}

// at is the moment offsetMs milliseconds after the request's receipt.
func (b *spanBuilder) at(offsetMs float64) time.Time { return b.origin.Add(duration(offsetMs)) }

// phase adds the span of a phase that started startMs after the request's receipt and took tookMs,
// and returns its index; a phase that did not start has no span (Root).
func (b *spanBuilder) phase(name string, startMs, tookMs float64, attrs []Attr) int {
	if startMs <= 0 {
		return Root
	}
	b.spans = append(b.spans, Span{Name: name, Kind: Internal, Parent: Root, Start: b.at(startMs), End: b.at(startMs + tookMs), Attrs: attrs})
	return len(b.spans) - 1
}

// call adds the span of a panel's model call under the collect phase's span.
func (b *spanBuilder) call(r *messages.WorkerResult, operation string, collect int) {
	start := b.at(r.StartedMs)
	end := start.Add(duration(r.LatencyMs))
	// A call without a result's latency (cut when collection ended, or its host went silent) lasted
	// until collection ended, as far as the request knows.
	if collect != Root && r.LatencyMs <= 0 && b.spans[collect].End.After(start) {
		end = b.spans[collect].End
	}
	b.spans = append(b.spans, Span{Name: operation + " " + r.Model, Kind: Client, Parent: collect, Start: start, End: end,
		Attrs: resultAttrs(r, operation), Error: callError(r.Status, r.ErrorKind)})
}

// resultAttrs are the attributes of a panel's model call. What the call's span says beyond the GenAI
// attributes is what tells calls apart (its job and worker) and what a reader looks for (its cost, a
// retry's attempt, a status other than ok): every attribute costs each exported span an allocation or
// two.
func resultAttrs(r *messages.WorkerResult, operation string) []Attr {
	attrs := callAttrs(operation, r.Provider, r.Model, r.ServedModel, r.GetUsage(), "")
	attrs = append(attrs, Str(JobID, r.JobId), Str(Worker, r.Worker), Integer(Cost, r.CostNanos))
	if r.Attempt > 0 {
		attrs = append(attrs, Integer(Attempt, int64(r.Attempt)))
	}
	if r.Status != "ok" {
		attrs = append(attrs, Str(Status, r.Status))
	}
	if r.UpstreamRequestId != "" {
		attrs = append(attrs, Str(ResponseID, r.UpstreamRequestId))
	}
	if r.FinishReason != "" {
		attrs = append(attrs, List(FinishReasons, []string{r.FinishReason}))
	}
	if r.Status == "ok" {
		attrs = append(attrs, Flag(Contributed, r.Contributed))
	}
	return attrs
}

// arbiter adds the span of the arbiter's call under the consensus phase's span. A call without a
// latency lasted until the phase ended.
func (b *spanBuilder) arbiter(d *messages.ArbiterDecision, consensus int) {
	phase := b.spans[consensus]
	start := phase.Start.Add(duration(d.ArbiterStartedMs))
	end := start.Add(duration(d.ArbiterLatencyMs))
	if d.ArbiterLatencyMs <= 0 && phase.End.After(start) {
		end = phase.End
	}
	attrs := callAttrs(OperationChat, d.ArbiterProvider, d.ArbiterModel, "", d.ArbiterUsage, RoleArbiter)
	attrs = append(attrs, Integer(Cost, d.ArbiterCostNanos))
	b.spans = append(b.spans, Span{Name: OperationChat + " " + d.ArbiterModel, Kind: Client, Parent: consensus, Start: start, End: end,
		Attrs: attrs, Error: d.ArbiterErrorKind})
}

// callError is a call's error.type: its error class, or its status when it failed without one.
func callError(status, kind string) string {
	switch {
	case status == "ok":
		return ""
	case kind != "":
		return kind
	}
	return status
}

// callAttrs are the GenAI attributes of a model call, and its role when it is not one of the panel's.
func callAttrs(operation, provider, model, served string, u *messages.Usage, role string) []Attr {
	attrs := make([]Attr, 0, 14)
	attrs = append(attrs, Str(OperationName, operation), Str(ProviderName, provider), Str(RequestModel, model))
	if role != "" {
		attrs = append(attrs, Str(Role, role))
	}
	if served != "" {
		attrs = append(attrs, Str(ResponseModel, served))
	}
	if u != nil {
		attrs = append(attrs, Integer(InputTokens, int64(u.InputTokens)), Integer(OutputTokens, int64(u.OutputTokens)))
	}
	return attrs
}

func classifyAttrs(e *messages.Execution) []Attr {
	c := e.GetClassification()
	if c == nil {
		return nil
	}
	return []Attr{Str(Category, c.Category), Number(Confidence, c.Confidence), Flag(LowConfidence, c.LowConfidence)}
}

func selectAttrs(e *messages.Execution) []Attr {
	var attrs []Attr
	if b := e.GetBlueprint(); b != nil {
		attrs = append(attrs, Str(Blueprint, b.Name), Str(Strategy, b.Strategy))
	}
	if s := e.GetSelection(); s != nil {
		models := make([]string, len(s.Picks))
		for i, p := range s.Picks {
			models[i] = p.Model
		}
		attrs = append(attrs, Str(Policy, s.Policy), Integer(Eligible, int64(s.Eligible)), List(Picked, models))
	}
	return attrs
}

func collectAttrs(e *messages.Execution) []Attr {
	attrs := []Attr{Flag(Degraded, e.Degraded)}
	if q := e.GetQuorum(); q != nil {
		attrs = append(attrs, Integer(Asked, int64(q.Asked)), Str(Stopped, q.Stopped))
	}
	return attrs
}

func consensusAttrs(e *messages.Execution) []Attr {
	d := e.GetDecision()
	if d == nil {
		return nil
	}
	attrs := []Attr{Str(Strategy, d.Strategy), Str(Chosen, d.ChosenModel), Str(DecidedBy, d.Arbiter), Integer(Agreement, int64(len(d.Agreement)))}
	if d.ArbiterError != "" {
		attrs = append(attrs, Str(ArbiterError, d.ArbiterError))
	}
	return attrs
}

// Request is what the request's own span says of it once it has answered, and its error.type when it
// failed ("" when it did not; the attributes then hold it too).
func Request(e *messages.Execution) ([]Attr, string) {
	attrs := make([]Attr, 0, 12)
	attrs = append(attrs, Str(RequestID, e.RequestId), Integer(StatusCode, int64(e.StatusCode)))
	if e.ClientRequestId != "" {
		attrs = append(attrs, Str(ClientRequestID, e.ClientRequestId))
	}
	if e.KeyId != "" {
		attrs = append(attrs, Str(KeyID, e.KeyId))
	}
	if c := e.GetClassification(); c != nil {
		attrs = append(attrs, Str(Category, c.Category))
	}
	if b := e.GetBlueprint(); b != nil {
		attrs = append(attrs, Str(Blueprint, b.Name), Str(Strategy, b.Strategy))
	}
	if u := e.GetUsage(); u != nil {
		attrs = append(attrs, Integer(InputTokens, int64(u.InputTokens)), Integer(OutputTokens, int64(u.OutputTokens)))
	}
	if e.CostNanos > 0 {
		attrs = append(attrs, Integer(Cost, e.CostNanos))
	}
	if e.Degraded {
		attrs = append(attrs, Flag(Degraded, true))
	}
	failed := e.GetError().GetCode()
	if failed != "" {
		attrs = append(attrs, Str(ErrorType, failed))
	}
	return attrs, failed
}

// TraceID is the trace id of a W3C traceparent (32 lower-case hex digits), or "" when it is not a
// valid one: version 00 has exactly four fields; a later version may carry more after them, and ff is
// no version; neither id may be all zeros.
func TraceID(traceparent string) string {
	const size = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(traceparent) < size || (len(traceparent) > size && (traceparent[:2] == "00" || traceparent[size] != '-')) {
		return ""
	}
	version, trace, parent, flags := traceparent[0:2], traceparent[3:35], traceparent[36:52], traceparent[53:55]
	if traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-' || version == "ff" ||
		!hex(version) || !hex(trace) || !hex(parent) || !hex(flags) || zeros(trace) || zeros(parent) {
		return ""
	}
	return trace
}

func hex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func zeros(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// duration is a record's milliseconds as a duration, to the microsecond it keeps.
func duration(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Microsecond)
}
