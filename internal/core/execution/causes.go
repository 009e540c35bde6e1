package execution

import (
	"slices"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/collect"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
)

// Cause is a failed call's cause as a caller is told it: its kind, and what the error says
// past the kind, provider and model it repeats (the upstream's host for a refused connection, the
// provider's own words for an error it answered). Never a key: adapters strike keys from what
// providers send back, and base URLs carry none.
func Cause(kind resilience.Kind, r *messages.JobResult) string {
	msg := r.GetErrorMessage()
	if rest, ok := strings.CutPrefix(msg, r.GetErrorKind()); ok {
		// A classified error reads "kind provider=p model=m status=n: cause".
		_, msg, _ = strings.Cut(rest, ": ")
	}
	if msg = strings.TrimSpace(msg); msg == "" {
		return string(kind)
	}
	return string(kind) + ": " + msg
}

// permitCauses name the refusals of a permit as the selection's skips name them.
var permitCauses = map[resilience.Kind]string{
	"permit_breaker_open":       "provider_breaker_open",
	"permit_rate_limited":       "provider_rate_limited",
	"permit_provider_disabled":  "provider_disabled",
	"permit_provider_stopped":   "provider_stopped",
	"permit_model_ejected":      "model_ejected",
	"permit_model_rate_limited": "model_rate_limited",
}

// recordCause is why a settled call gave no answer; fault is a provider's last fault, which explains
// its open breaker.
func recordCause(rec *collect.Record, fault func(provider string) string) string {
	if r, ok := rec.Ref.(*messages.JobResult); ok && !r.Ok {
		return Cause(rec.Kind, r)
	}
	if rec.WaitedForPermit {
		return string(rec.Kind) + ": collection ended while it waited for its provider's permit (a rate limit)"
	}
	cause, ok := permitCauses[rec.Kind]
	if !ok {
		return strings.TrimPrefix(string(rec.Kind), "permit_")
	}
	if cause == "provider_breaker_open" {
		if f := fault(rec.Job.Slot.Provider); f != "" {
			cause += " after " + f
		}
	}
	return cause
}

// Causes names, for each model asked that gave no answer, why: the cause of its last call, in the
// order the models were selected. They are the details of a request that failed for want of answers.
func Causes(records []*collect.Record, fault func(provider string) string) problems.Errors {
	last := map[*collect.Slot]*collect.Record{}
	var slots []*collect.Slot
	for _, rec := range records {
		if rec.Status == collect.Late {
			continue
		}
		s := rec.Job.Slot
		if _, seen := last[s]; !seen {
			slots = append(slots, s)
		}
		last[s] = rec
	}
	slices.SortFunc(slots, func(a, b *collect.Slot) int { return a.Index - b.Index })
	var out problems.Errors
	for _, s := range slots {
		if rec := last[s]; rec.Status != collect.OK {
			out.Add(s.Model, recordCause(rec, fault))
		}
	}
	return out.Capped()
}
