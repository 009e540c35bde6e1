package actors

import (
	"slices"

	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap/zapcore"
)

// Log field encoders for the coordinator's events: hand-written, because reflection-based encoding of
// these slices costs more than the decisions they describe.

type picksField []bandit.Pick

func (ps picksField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range ps {
		_ = enc.AppendObject((*pickObject)(&ps[i]))
	}
	return nil
}

// pickObject and the other element types are pointers into the list they come from: an element
// encodes without a closure allocated for it.
type pickObject bandit.Pick

func (p *pickObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("model", p.Model)
	o.AddString("provider", p.Provider)
	o.AddFloat64("sampled", p.Sampled)
	if p.Deprioritised { // else the score is the sampled value
		o.AddFloat64("score", p.Score)
		o.AddBool("deprioritised", true)
	}
	if p.Explored {
		o.AddBool("explored", true)
	}
	return nil
}

type skipsField []bandit.Skip

func (ss skipsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range ss[:min(len(ss), logListMax)] {
		_ = enc.AppendObject((*skipObject)(&ss[i]))
	}
	return appendMore(enc, len(ss))
}

type skipObject bandit.Skip

func (s *skipObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("model", s.Model)
	o.AddString("provider", s.Provider)
	o.AddString("reason", s.Reason.String())
	return nil
}

// callsField summarises a request's settled calls: model, worker, status and latency, with the error's
// kind for a call that failed.
type callsField []*collect.Record

func (cs callsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, r := range cs[:min(len(cs), logListMax)] {
		_ = enc.AppendObject((*callObject)(r))
	}
	return appendMore(enc, len(cs))
}

type callObject collect.Record

func (r *callObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("model", r.Job.Slot.Model)
	o.AddString("worker", r.Job.Worker)
	o.AddString("status", string(r.Status))
	if r.Kind != "" {
		o.AddString("error_kind", string(r.Kind))
	}
	if res, ok := r.Ref.(*messages.JobResult); ok {
		o.AddFloat64("latency_ms", res.LatencyMs)
	}
	return nil
}

type countsField map[string]int

func (cs countsField) MarshalLogObject(o zapcore.ObjectEncoder) error {
	for k, v := range cs {
		o.AddInt(k, v)
	}
	return nil
}

type rejectionsField []assign.Rejection

func (rs rejectionsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range rs[:min(len(rs), logListMax)] {
		_ = enc.AppendObject((*rejectionObject)(&rs[i]))
	}
	return appendMore(enc, len(rs))
}

type rejectionObject assign.Rejection

func (r *rejectionObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("worker", r.Worker)
	o.AddString("reason", r.Reason)
	return nil
}

// logListMax is the most entries a list of candidates (skipped models, rejected workers) shows in one
// line; the record keeps more, and a fleet or catalog can be large.
const logListMax = 20

// appendMore ends a list of n entries cut at logListMax with {"more": the rest}.
func appendMore(enc zapcore.ArrayEncoder, n int) error {
	if n <= logListMax {
		return nil
	}
	return enc.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
		o.AddInt("more", n-logListMax)
		return nil
	}))
}

type signalsField []classify.Signal

func (ss signalsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range ss {
		_ = enc.AppendObject((*signalObject)(&ss[i]))
	}
	return nil
}

type signalObject classify.Signal

func (s *signalObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("category", string(s.Category))
	o.AddString("keyword", s.Keyword)
	return nil
}

type alternativesField []classify.Scored

func (as alternativesField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range as {
		_ = enc.AppendObject((*alternativeObject)(&as[i]))
	}
	return nil
}

type alternativeObject classify.Scored

func (a *alternativeObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("category", string(a.Category))
	o.AddFloat64("probability", a.Probability)
	return nil
}

type updatesField []*messages.BanditUpdate

func (us updatesField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, u := range us {
		_ = enc.AppendObject((*updateObject)(u))
	}
	return nil
}

type updateObject messages.BanditUpdate

func (u *updateObject) MarshalLogObject(o zapcore.ObjectEncoder) error {
	o.AddString("model", u.Model)
	o.AddFloat64("reward", u.Reward)
	o.AddString("reason", u.Reason)
	o.AddFloat64("alpha_before", u.AlphaBefore)
	o.AddFloat64("beta_before", u.BetaBefore)
	return nil
}

// summary is a request's one line at info: what it was, which models it asked, how it ended, how
// much they agreed, where its time went and what it cost. The per-step lines are at debug.
type summary struct {
	exec     *messages.Execution
	category string
}

// addPlan adds how the request was classified and the blueprint it ran.
func (s summary) addPlan(o zapcore.ObjectEncoder) {
	e := s.exec
	if c := e.Classification; c != nil && !c.Explicit {
		o.AddFloat64("confidence", c.Confidence)
		if c.LowConfidence {
			o.AddBool("low_confidence", true)
		}
	}
	if b := e.Blueprint; b != nil {
		o.AddString("blueprint", b.Name)
		o.AddString("strategy", b.Strategy)
	}
}

func (s summary) MarshalLogObject(o zapcore.ObjectEncoder) error {
	e := s.exec
	event := "request_completed"
	if e.Error != nil {
		event = "request_failed"
	}
	o.AddString("event", event)
	o.AddInt32("status", e.StatusCode)
	if e.KeyId != "" {
		o.AddString("key_id", e.KeyId)
	}
	if e.TraceId != "" { // a log line leads to its trace, and back
		o.AddString("trace_id", e.TraceId)
	}
	o.AddString("category", s.category)
	s.addPlan(o)
	answered := 0
	for _, r := range e.Results {
		if r.Status == string(collect.OK) {
			answered++
		}
	}
	_ = o.AddArray("models", zapcore.ArrayMarshalerFunc(func(a zapcore.ArrayEncoder) error {
		for i, r := range e.Results { // each model once, in the order it was asked
			if !slices.ContainsFunc(e.Results[:i], func(p *messages.WorkerResult) bool { return p.Model == r.Model }) {
				a.AppendString(r.Model)
			}
		}
		return nil
	}))
	o.AddInt("calls", len(e.Results))
	o.AddInt("answered", answered)
	if d := e.Decision; d != nil {
		o.AddString("chosen", d.ChosenModel)
		if answered > 0 {
			o.AddFloat64("agreement", float64(len(d.Agreement))/float64(answered))
		}
		if d.Arbiter != "" {
			o.AddString("arbiter", d.Arbiter)
		}
	}
	o.AddBool("degraded", e.Degraded)
	o.AddInt("retries", len(e.Retries))
	if p := e.Phases; p != nil {
		o.AddFloat64("classify_ms", p.ClassifyMs)
		o.AddFloat64("select_ms", p.SelectMs)
		o.AddFloat64("collect_ms", p.CollectMs)
		o.AddFloat64("consensus_ms", p.ConsensusMs)
		o.AddFloat64("total_ms", p.TotalMs)
	}
	o.AddString("cost", money.USD(e.CostNanos).String())
	if u := e.Usage; u != nil {
		o.AddInt32("input_tokens", u.InputTokens)
		o.AddInt32("output_tokens", u.OutputTokens)
	}
	if e.Error != nil {
		o.AddString("error_code", e.Error.Code)
		o.AddString("error", e.Error.Message)
	}
	return nil
}
