package plan

import (
	"fmt"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/bandit"
)

// picks reads "model:family" specs (one-letter models) as picks in selection order.
func picks(spec ...string) []bandit.Pick {
	out := make([]bandit.Pick, len(spec))
	for i, s := range spec {
		fmt.Sscanf(s, "%1s:%s", &out[i].Model, &out[i].Family)
	}
	return out
}

// models spells picks' models in order.
func models(ps []bandit.Pick) string {
	s := ""
	for _, p := range ps {
		s += p.Model
	}
	return s
}

func TestAcrossFamilies(t *testing.T) {
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

func TestNoFamilyMajority(t *testing.T) {
	tests := []struct {
		desc               string
		picks              []bandit.Pick
		n                  int
		wantPanel, wantCut string
	}{
		{"three of a family among the best five: the third gives way", picks("a:llama", "b:llama", "c:llama", "d:gemini", "e:gemini", "f:qwen", "g:yi"), 5, "abdef", "c"},
		{"no family over two of five: the best five", picks("a:llama", "b:gemini", "c:llama", "d:qwen", "e:yi", "f:phi"), 5, "abcde", ""},
		{"too few other families: the best left over fill the panel", picks("a:llama", "b:llama", "c:llama", "d:llama", "e:gemini", "f:llama"), 5, "abecd", "f"},
		{"a panel of three: one of each family", picks("a:llama", "b:llama", "c:gemini", "d:qwen"), 3, "acd", "b"},
		{"a panel of four: two of a family is no majority", picks("a:llama", "b:llama", "c:llama", "d:gemini", "e:qwen"), 4, "abde", "c"},
		{"picks without a family are their own", picks("a:", "b:", "c:", "d:"), 3, "abc", ""},
		{"no more picks than places: all of them", picks("a:llama", "b:llama", "c:llama"), 3, "abc", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			panel, cut := NoFamilyMajority(tt.picks, tt.n)
			if models(panel) != tt.wantPanel || models(cut) != tt.wantCut {
				t.Fatalf("panel %s, left out %s; want %s and %s", models(panel), models(cut), tt.wantPanel, tt.wantCut)
			}
		})
	}
}
