package providers

import (
	"slices"
	"testing"
)

func TestDroppedParameters(t *testing.T) {
	one, seed := 1.0, int64(3)
	all := Params{Temperature: &one, TopP: &one, Stop: []string{"x"}, Seed: &seed, PresencePenalty: &one, FrequencyPenalty: &one,
		LogitBias: map[string]int{"1": 5}, User: "u"}
	for _, tc := range []struct {
		desc, kind string
		params     Params
		want       []string
	}{
		{"OpenAI's format carries every parameter", KindOpenAI, all, nil},
		{"Anthropic's has no seed, penalties or logit bias", KindAnthropic, all, []string{"seed", "presence_penalty", "frequency_penalty", "logit_bias"}},
		{"Gemini's has no logit bias or user", KindGemini, all, []string{"logit_bias", "user"}},
		{"nothing given, nothing dropped", KindAnthropic, Params{}, nil},
		{"only what was given is named", KindGemini, Params{User: "u", Temperature: &one}, []string{"user"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if got := Dropped(tc.kind, tc.params); !slices.Equal(got, tc.want) {
				t.Fatalf("dropped %v, want %v", got, tc.want)
			}
		})
	}
}
