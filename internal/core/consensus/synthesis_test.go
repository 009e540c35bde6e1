package consensus

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// The synthesis read piece by piece is the verdict's answer, however the verdict is cut.
func TestSynthesisStream(t *testing.T) {
	for _, tc := range []struct {
		desc, verdict, want string
	}{
		{"the answer first", `{"answer": "Nitrogen, mostly.", "choice": 1, "scores": []}`, "Nitrogen, mostly."},
		{"after other fields, one of them nested", `{"choice": 0, "scores": [{"relevance": 1, "answer": "not this"}], "answer": "This one."}`, "This one."},
		{"prose and a fence before it", "Here is my verdict:\n```json\n{\"choice\": 2, \"answer\": \"Two.\"}\n```", "Two."},
		{"escapes", `{"answer": "a \"quote\", a\nline, a tab\t, \u00e9t\u00e9 and \ud83d\ude00"}`, "a \"quote\", a\nline, a tab\t, été and 😀"},
		{"a key that only ends like it", `{"non_answer": "no", "answer": "yes"}`, "yes"},
		{"no answer at all", `{"choice": 1, "scores": []}`, ""},
		{"characters of several bytes", `{"answer": "日本語のテキスト"}`, "日本語のテキスト"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			// The whole verdict, then the same cut at every byte, then cut at random.
			cuts := [][]int{{len(tc.verdict)}}
			every := make([]int, len(tc.verdict))
			for i := range every {
				every[i] = i + 1
			}
			cuts = append(cuts, every)
			rng := rand.New(rand.NewPCG(1, 2))
			for range 20 {
				var c []int
				for at := 0; at < len(tc.verdict); {
					at = min(at+1+rng.IntN(7), len(tc.verdict))
					c = append(c, at)
				}
				cuts = append(cuts, c)
			}
			for _, c := range cuts {
				var s SynthesisStream
				got, from := "", 0
				for _, to := range c {
					got += s.Feed(tc.verdict[from:to])
					from = to
				}
				if got != tc.want {
					t.Fatalf("cut at %v: got %q, want %q", c, got, tc.want)
				}
			}
		})
	}
}

// What the stream reads is what encoding/json reads of the same verdict.
func TestSynthesisStreamAgreesWithTheDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []rune("ab \"\\\n\té😀/\u2028")
	for range 500 {
		var r []rune
		for range rng.IntN(40) {
			r = append(r, alphabet[rng.IntN(len(alphabet))])
		}
		raw, _ := json.Marshal(map[string]any{"choice": 1, "answer": string(r)})
		var want struct{ Answer string }
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		var s SynthesisStream
		got := ""
		for i := 0; i < len(raw); i += 3 {
			got += s.Feed(string(raw[i:min(i+3, len(raw))]))
		}
		if got != want.Answer {
			t.Fatalf("%s: got %q, want %q", raw, got, want.Answer)
		}
	}
}
