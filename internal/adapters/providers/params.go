package providers

import "slices"

// uncarried are the parameters each wire format has no field for. OpenAI's chat completions carry
// them all. Anthropic's Messages API has max_tokens, temperature, top_p, stop_sequences, a user id in
// metadata and disable_parallel_tool_use; Gemini's generationConfig has temperature, topP,
// maxOutputTokens, stopSequences, seed and both penalties.
var uncarried = map[string][]string{
	KindAnthropic: {ParamSeed, ParamPresencePenalty, ParamFrequencyPenalty, ParamLogitBias, ParamLogprobs, ParamTopLogprobs},
	KindGemini:    {ParamLogitBias, ParamUser, ParamParallelToolCalls, ParamLogprobs, ParamTopLogprobs},
}

// Carries reports whether a wire format (KindOpenAI, KindAnthropic, KindGemini) has a field for a
// parameter. Simulated and replayed models take every parameter and ignore it, as a model may.
func Carries(kind, param string) bool { return !slices.Contains(uncarried[kind], param) }

// NeedsMaxTokens reports whether a wire format requires an output limit on every call: Anthropic's
// Messages API does, the others send none unless the caller gave one.
func NeedsMaxTokens(kind string) bool { return kind == KindAnthropic }

// Dropped lists the parameters of p that a wire format cannot carry: they are left out of the call,
// and the answer names them.
func Dropped(kind string, p Params) []string {
	var out []string
	for _, name := range p.Given() {
		if !Carries(kind, name) {
			out = append(out, name)
		}
	}
	return out
}
