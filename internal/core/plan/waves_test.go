package plan

import (
	"fmt"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/bandit"
)

func TestAcrossFamilies(t *testing.T) {
	picks := func(spec ...string) []bandit.Pick { // "model:family"
		out := make([]bandit.Pick, len(spec))
		for i, s := range spec {
			var p bandit.Pick
			fmt.Sscanf(s, "%1s:%s", &p.Model, &p.Family)
			out[i] = p
		}
		return out
	}
	models := func(ps []bandit.Pick) string {
		s := ""
		for _, p := range ps {
			s += p.Model
		}
		return s
	}
	tests := []struct {
		desc  string
		picks []bandit.Pick
		wave  int
		want  string
	}{
		{"one family's best three: no family fills the first wave", picks("a:llama", "b:llama", "c:llama", "d:gemini", "e:qwen"), 3, "abdce"},
		{"families already apart: selection order kept", picks("a:llama", "b:gemini", "c:qwen", "d:llama", "e:gemini"), 3, "abcde"},
		{"two of a family and one from outside: selection order kept", picks("a:llama", "b:llama", "c:gemini", "d:llama"), 3, "abcd"},
		{"a wave of two takes one of a family", picks("a:llama", "b:llama", "c:gemini"), 2, "acb"},
		{"too few families: the wave fills with the next best", picks("a:llama", "b:llama", "c:llama", "d:llama"), 3, "abcd"},
		{"a pick without a family is its own", picks("a:", "b:", "c:", "d:llama"), 3, "abcd"},
		{"a wave of all the picks: nothing to order", picks("a:llama", "b:llama"), 2, "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := models(AcrossFamilies(tt.picks, tt.wave)); got != tt.want {
				t.Fatalf("order %s, want %s", got, tt.want)
			}
		})
	}
}
