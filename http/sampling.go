package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/messages"
)

// The sampling parameters of each door, as tables: the parameter's canonical name (the request's, as
// chat completions and /route-thompson's parameters name it, and as intake judges it), the body's name
// for it, and how the body writes it, which says where it goes in the request's sampling. A table's
// order is the order the door reads its parameters in, and so the order of their problems. A door's
// own bound, tighter than intake's, is part of how it reads a parameter (floatWithin).

// samplingParam is one sampling parameter of a door's body.
type samplingParam struct {
	canonical string
	wire      string
	read      paramReader
}

// paramReader reads a parameter under the body's name wire into the request's sampling.
type paramReader func(r askReader, wire string, s *messages.Sampling)

// samplingParams are a door's sampling parameters, in the order the door reads them.
type samplingParams []samplingParam

// samplingFields are the sampling parameters, as chat completions and /route-thompson's parameters name
// them (chat completions also takes parallel_tool_calls, with its tools).
var samplingFields = map[string]bool{
	"temperature": true, "top_p": true, "max_tokens": true, "max_completion_tokens": true, "stop": true, "seed": true,
	"presence_penalty": true, "frequency_penalty": true, "logit_bias": true, "user": true, "logprobs": true, "top_logprobs": true,
}

var (
	// chatSampling are chat completions' parameters, which /route-thompson's parameters name alike.
	chatSampling = samplingParams{
		{"temperature", "temperature", floatInto(temperatureOf)},
		{"top_p", "top_p", floatInto(topPOf)},
		{"presence_penalty", "presence_penalty", floatInto(presencePenaltyOf)},
		{"frequency_penalty", "frequency_penalty", floatInto(frequencyPenaltyOf)},
		{"seed", "seed", seed},
		{"max_tokens", "max_tokens", maxTokensOrCompletion},
		{"stop", "stop", stopOneOrMany},
		{"logit_bias", "logit_bias", logitBias},
		{"user", "user", endUser},
		{"parallel_tool_calls", "parallel_tool_calls", parallelToolCalls},
		{"logprobs", "logprobs", logprobs},
		{"top_logprobs", "top_logprobs", topLogprobs},
	}
	// responsesSampling are the Responses API's: max_output_tokens is max_tokens. Its end user's id is
	// user, or safety_identifier in its place (responsesSafetySampling; responsesRequest.sampling).
	responsesSampling = samplingParams{
		{"temperature", "temperature", floatInto(temperatureOf)},
		{"top_p", "top_p", floatInto(topPOf)},
		{"max_tokens", "max_output_tokens", maxTokens},
		{"user", "user", endUser},
		{"parallel_tool_calls", "parallel_tool_calls", parallelToolCalls},
	}
	// responsesSafetySampling are responsesSampling with the end user's id read from safety_identifier.
	responsesSafetySampling = responsesSampling.with("user", "safety_identifier")
	// messagesSampling are the Messages API's: temperature within its [0, 1], max_tokens required as it
	// requires it, stop_sequences a list, and metadata.user_id the end user's id. Whether the model may
	// call tools in parallel is its tool choice's (readAnthropicToolChoice).
	messagesSampling = samplingParams{
		{"temperature", "temperature", floatWithin(temperatureOf, 0, 1)},
		{"top_p", "top_p", floatInto(topPOf)},
		{"max_tokens", "max_tokens", requiredMaxTokens},
		{"stop", "stop_sequences", stopList},
		{"user", "metadata.user_id", nestedUser},
	}
)

// read reads a door's sampling parameters from an object's fields; prefix names the object in problems
// ("" at the top of a body, "parameters." in /route-thompson). It is nil when none is given.
func (ps samplingParams) read(fields map[string]json.RawMessage, prefix string, bad *report) *messages.Sampling {
	s := &messages.Sampling{}
	ps.readInto(s, fields, prefix, bad)
	if s.SizeVT() == 0 {
		return nil
	}
	return s
}

// readInto is read into a sampling the door began.
func (ps samplingParams) readInto(s *messages.Sampling, fields map[string]json.RawMessage, prefix string, bad *report) {
	r := askReader{fields: fields, prefix: prefix, bad: bad}
	bad.name("parameters", strings.TrimSuffix(prefix, "."))
	for _, p := range ps {
		if p.wire != p.canonical { // one the body names as intake does is renamed with "parameters", above
			bad.alias("parameters."+p.canonical, r.field(p.wire))
		}
		p.read(r, p.wire, s)
	}
}

// with is the parameters with the body's name of one of them changed.
func (ps samplingParams) with(canonical, wire string) samplingParams {
	out := slices.Clone(ps)
	for i := range out {
		if out[i].canonical == canonical {
			out[i].wire = wire
		}
	}
	return out
}

// Where the numbers of the sampling go.
func temperatureOf(s *messages.Sampling) **float64      { return &s.Temperature }
func topPOf(s *messages.Sampling) **float64             { return &s.TopP }
func presencePenaltyOf(s *messages.Sampling) **float64  { return &s.PresencePenalty }
func frequencyPenaltyOf(s *messages.Sampling) **float64 { return &s.FrequencyPenalty }

// floatInto reads a number into the sampling's field (intake judges its range).
func floatInto(field func(*messages.Sampling) **float64) paramReader {
	return func(r askReader, wire string, s *messages.Sampling) { *field(s) = r.float(wire) }
}

// floatWithin reads a number within [lo, hi], a bound of the door's own API, tighter than intake's.
func floatWithin(field func(*messages.Sampling) **float64, lo, hi float64) paramReader {
	return func(r askReader, wire string, s *messages.Sampling) { *field(s) = r.within(wire, lo, hi) }
}

// seed reads the seed, an integer of any size.
func seed(r askReader, wire string, s *messages.Sampling) { s.Seed = r.integer(wire) }

// maxTokens reads the most tokens the answer may take.
func maxTokens(r askReader, wire string, s *messages.Sampling) {
	if n := r.integer(wire); n != nil {
		s.MaxTokens = proto32(*n)
	}
}

// maxTokensOrCompletion reads max_tokens or max_completion_tokens, OpenAI's newer name for it: either,
// or both when they agree.
func maxTokensOrCompletion(r askReader, wire string, s *messages.Sampling) {
	const newer = "max_completion_tokens"
	older, newest := r.integer(wire), r.integer(newer)
	switch {
	case older != nil && newest != nil && *older != *newest:
		r.add(newer, "differs from max_tokens: give one of them")
	case older != nil:
		s.MaxTokens = proto32(*older)
	case newest != nil:
		s.MaxTokens = proto32(*newest)
		r.bad.alias("parameters.max_tokens", r.field(newer))
	}
}

// requiredMaxTokens reads max_tokens, which the Messages API requires.
func requiredMaxTokens(r askReader, wire string, s *messages.Sampling) {
	if _, ok := r.given(wire); !ok {
		r.add(wire, "is required, as the Messages API requires it: the most tokens the answer may take")
		return
	}
	maxTokens(r, wire, s)
}

// stopOneOrMany reads chat completions' stop: a stop sequence or a list of them.
func stopOneOrMany(r askReader, wire string, s *messages.Sampling) { s.Stop = r.stops(wire, true) }

// stopList reads a list of stop sequences, which may be empty.
func stopList(r askReader, wire string, s *messages.Sampling) { s.Stop = r.stops(wire, false) }

// logitBias reads a map of token ids to integers (intake judges the ids and the range).
func logitBias(r askReader, wire string, s *messages.Sampling) { s.LogitBias = r.logitBias(wire) }

// endUser reads the end user's id, a string.
func endUser(r askReader, wire string, s *messages.Sampling) {
	if raw, ok := r.given(wire); ok && json.Unmarshal(raw, &s.User) != nil {
		r.add(wire, "must be a string")
	}
}

// nestedUser reads the end user's id from a member of an object (metadata.user_id), which holds no other
// member.
func nestedUser(r askReader, wire string, s *messages.Sampling) {
	outer, inner, _ := strings.Cut(wire, ".")
	raw, ok := r.given(outer)
	if !ok {
		return
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || keys == nil {
		r.add(outer, "must be an object")
		return
	}
	r.bad.unknown(r.field(outer), keys, only(inner))
	if raw, ok := given(keys, inner); ok {
		r.bad.visit(r.field(wire))
		if json.Unmarshal(raw, &s.User) != nil {
			r.add(wire, "must be a string")
		}
	}
}

// parallelToolCalls reads whether the model may call tools in parallel.
func parallelToolCalls(r askReader, wire string, s *messages.Sampling) {
	s.ParallelToolCalls = r.boolean(wire)
}

// logprobs reads whether the answer's log probabilities are asked for.
func logprobs(r askReader, wire string, s *messages.Sampling) { s.Logprobs = r.boolean(wire) }

// MaxTopLogprobs is the most likeliest tokens a position's log probabilities list, as OpenAI allows.
const MaxTopLogprobs = 20

// topLogprobs reads how many likeliest tokens each position lists, which needs logprobs: true (read
// before it), as OpenAI's API requires.
func topLogprobs(r askReader, wire string, s *messages.Sampling) {
	n := r.whole(wire, 0, MaxTopLogprobs)
	if n == nil {
		return
	}
	if s.Logprobs == nil || !*s.Logprobs {
		r.add(wire, "needs logprobs: true")
		return
	}
	s.TopLogprobs = proto32(*n)
}

// boolean reads a boolean member, or nil when it is not given.
func (r askReader) boolean(wire string) *bool {
	raw, ok := r.given(wire)
	if !ok {
		return nil
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		r.add(wire, "must be a boolean")
		return nil
	}
	return &b
}

// askReader reads the parameters of one object; prefix names the object in problems.
type askReader struct {
	fields map[string]json.RawMessage
	prefix string
	bad    *report
}

// field is the body's name of a member.
func (r askReader) field(name string) string { return r.prefix + name }

func (r askReader) add(field, msg string) { r.bad.Add(r.field(field), msg) }

// given reads a member that was sent with a value, noting it read.
func (r askReader) given(name string) (json.RawMessage, bool) {
	raw, ok := given(r.fields, name)
	if ok {
		r.bad.visit(r.field(name))
	}
	return raw, ok
}

// float reads a number (intake judges its range).
func (r askReader) float(name string) *float64 {
	v, _ := decodeGiven(r, name, numberOf, "must be a number")
	return v
}

// decodeGiven decodes a member given with a value, noting what it must be when it does not decode.
func decodeGiven[T any](r askReader, name string, decode func(json.RawMessage) (T, bool), must string) (T, bool) {
	raw, ok := r.given(name)
	if !ok {
		var none T
		return none, false
	}
	v, ok := decode(raw)
	if !ok {
		r.add(name, must)
	}
	return v, ok
}

// numberOf decodes a JSON number; false when raw is none.
func numberOf(raw json.RawMessage) (*float64, bool) {
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil || math.IsNaN(v) {
		return nil, false
	}
	return &v, true
}

// within reads a number within [lo, hi]: a bound of the door's own API, tighter than intake's.
func (r askReader) within(name string, lo, hi float64) *float64 {
	v := r.float(name)
	if v != nil && (*v < lo || *v > hi) {
		r.add(name, fmt.Sprintf("must be between %g and %g", lo, hi))
		return nil
	}
	return v
}

// whole reads an integer within [lo, hi], exactly: a seed may be larger than a float64 holds.
func (r askReader) whole(name string, lo, hi int64) *int64 {
	v, ok := decodeGiven(r, name, integerOf, "must be an integer")
	if !ok {
		return nil
	}
	if v < lo || v > hi {
		r.add(name, fmt.Sprintf("must be between %d and %d", lo, hi))
		return nil
	}
	return &v
}

// integerOf decodes a JSON integer of int64's range; 5.0 is an integer written as a float.
func integerOf(raw json.RawMessage) (int64, bool) {
	if v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64); err == nil {
		return v, true
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// integer reads an integer of any size (intake judges its range).
func (r askReader) integer(name string) *int64 { return r.whole(name, math.MinInt64, math.MaxInt64) }

// proto32 is an integer as a request's int32 field holds it: one past its bounds stays past intake's.
func proto32(v int64) *int32 {
	n := int32(max(min(v, math.MaxInt32), math.MinInt32))
	return &n
}

// stops reads a list of stop sequences under name (intake bounds them). single also takes one sequence
// as a string, and refuses an empty list, as chat completions do; Anthropic's stop_sequences is a list,
// which may be empty.
func (r askReader) stops(name string, single bool) []string {
	raw, ok := r.given(name)
	if !ok {
		return nil
	}
	var one string
	var stops []string
	switch {
	case single && json.Unmarshal(raw, &one) == nil:
		return []string{one}
	case json.Unmarshal(raw, &stops) != nil && single:
		r.add(name, "must be a string or a list of strings")
		return nil
	case json.Unmarshal(raw, &stops) != nil:
		r.add(name, "must be a list of strings")
		return nil
	case len(stops) == 0 && single:
		r.add(name, fmt.Sprintf("must hold between 1 and %d sequences", intake.MaxStops))
		return nil
	}
	return stops
}

// logitBias reads a map of token ids to integers under name (intake judges the ids and the range).
func (r askReader) logitBias(name string) map[string]int32 {
	raw, ok := r.given(name)
	if !ok {
		return nil
	}
	var m map[string]float64
	if json.Unmarshal(raw, &m) != nil {
		r.add(name, "must be an object of token ids to numbers")
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // problems in a stable order
	out := make(map[string]int32, len(m))
	for _, k := range keys {
		r.bad.visit(r.field(name + "." + k))
		if v := m[k]; v != math.Trunc(v) {
			r.add(name+"."+k, "must be an integer between -100 and 100")
		} else {
			out[k] = *proto32(int64(max(min(v, math.MaxInt32), math.MinInt32)))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
