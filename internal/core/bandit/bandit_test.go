package bandit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
	"pgregory.net/rapid"
)

func TestSampleBetaMatchesDistribution(t *testing.T) {
	// Kolmogorov-Smirnov against the exact CDF, for shapes below, at and above one.
	tests := []struct{ a, b float64 }{{1, 1}, {2, 5}, {0.5, 0.5}, {0.3, 4}, {30, 12}, {200, 800}}
	rng := rand.New(rand.NewPCG(42, 1))
	const n = 20000
	for _, tt := range tests {
		t.Run(fmt.Sprintf("Beta(%g,%g)", tt.a, tt.b), func(t *testing.T) {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = SampleBeta(rng, tt.a, tt.b)
				if xs[i] < 0 || xs[i] > 1 || math.IsNaN(xs[i]) {
					t.Fatalf("sample %v outside [0,1]", xs[i])
				}
			}
			sort.Float64s(xs)
			dist := distuv.Beta{Alpha: tt.a, Beta: tt.b}
			d := 0.0
			for i, x := range xs {
				cdf := dist.CDF(x)
				d = max(d, math.Abs(cdf-float64(i)/n), math.Abs(cdf-float64(i+1)/n))
			}
			// Critical value at alpha = 0.001 is 1.95/sqrt(n).
			if crit := 1.95 / math.Sqrt(n); d > crit {
				t.Fatalf("KS statistic %.4f exceeds %.4f", d, crit)
			}
		})
	}
}

func TestSampleBetaDegenerateShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, ab := range [][2]float64{{0, 1}, {1, 0}, {-3, 2}, {math.NaN(), 1}, {1e-9, 1e-9}} {
		x := SampleBeta(rng, ab[0], ab[1])
		if x < 0 || x > 1 || math.IsNaN(x) {
			t.Errorf("Beta(%v,%v) gave %v", ab[0], ab[1], x)
		}
	}
}

func TestArmUpdate(t *testing.T) {
	tests := []struct {
		desc      string
		rewards   []float64
		cfg       UpdateConfig
		wantAlpha float64
		wantBeta  float64
	}{
		{"success adds to alpha", []float64{1}, UpdateConfig{}, 2, 1},
		{"failure adds to beta", []float64{0}, UpdateConfig{}, 1, 2},
		{"fractional reward splits the unit", []float64{0.25}, UpdateConfig{}, 1.25, 1.75},
		{"rewards are clamped", []float64{7, -3}, UpdateConfig{}, 2, 2},
		// alpha: 1 -> 1+1 = 2 -> 1+0.5*1+1 = 2.5 -> 1+0.5*1.5 = 1.75; beta: 1 -> 1 -> 1 -> 1+0+1 = 2.
		{"discount decays evidence towards the prior", []float64{1, 1, 0}, UpdateConfig{Discount: 0.5}, 1.75, 2},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			a := NewArm("m", "general", DefaultPrior)
			for _, r := range tt.rewards {
				a = a.Update(r, tt.cfg)
			}
			if math.Abs(a.Alpha-tt.wantAlpha) > 1e-12 || math.Abs(a.Beta-tt.wantBeta) > 1e-12 {
				t.Fatalf("got Beta(%v,%v), want Beta(%v,%v)", a.Alpha, a.Beta, tt.wantAlpha, tt.wantBeta)
			}
			if a.Pulls != int64(len(tt.rewards)) {
				t.Fatalf("pulls %d", a.Pulls)
			}
		})
	}
}

func TestDiscountBoundsEvidence(t *testing.T) {
	// With discount g, alpha converges to prior + 1/(1-g) under constant success: old evidence fades.
	a := NewArm("m", "general", DefaultPrior)
	for i := 0; i < 1000; i++ {
		a = a.Update(1, UpdateConfig{Discount: 0.9})
	}
	if want := 1 + 1/(1-0.9); math.Abs(a.Alpha-want) > 1e-6 || math.Abs(a.Beta-1) > 1e-9 {
		t.Fatalf("got Beta(%v,%v), want Beta(%v,1)", a.Alpha, a.Beta, want)
	}
}

func TestRecencyTracksRecentOutcomes(t *testing.T) {
	a := NewArm("m", "general", DefaultPrior)
	if a.Recency != 0.5 {
		t.Fatalf("initial recency %v, want the prior mean", a.Recency)
	}
	for i := 0; i < 200; i++ {
		a = a.Update(1, UpdateConfig{})
	}
	for i := 0; i < RecencySpan; i++ {
		a = a.Update(0, UpdateConfig{})
	}
	// After 50 failures the EWMA keeps (1-2/51)^50 ≈ 13.6% of the earlier level.
	if want := math.Pow(1-2.0/51, 50); math.Abs(a.Recency-want) > 0.01 {
		t.Fatalf("recency %v, want about %v", a.Recency, want)
	}
	if a.Mean() < 0.7 {
		t.Fatalf("the long-run mean %v should still remember 200 successes", a.Mean())
	}
}

func candidates(n int) []Candidate {
	providers := []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"}
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{
			Model: fmt.Sprintf("m%03d", i), Provider: providers[i%len(providers)],
			ContextWindow: 8192 << (i % 5), Alpha: 1 + float64(i%7), Beta: 1 + float64(i%5), Pulls: int64(i % 11),
		}
	}
	return out
}

func TestSelectFiltersRecordWhy(t *testing.T) {
	cands := []Candidate{
		{Model: "a", Provider: "groq", ContextWindow: 8000, Alpha: 1, Beta: 1},
		{Model: "b", Provider: "anthropic", ContextWindow: 200000, Alpha: 1, Beta: 1},
		{Model: "c", Provider: "gemini", ContextWindow: 1000000, Alpha: 1, Beta: 1},
		{Model: "d", Provider: "deepseek", ContextWindow: 64000, Alpha: 1, Beta: 1},
		{Model: "e", Provider: "openrouter", ContextWindow: 128000, Alpha: 1, Beta: 1},
	}
	tests := []struct {
		desc      string
		q         Query
		wantPicks []string // as a set
		wantSkips map[string]SkipReason
	}{
		{
			desc:      "all eligible",
			q:         Query{N: 10},
			wantPicks: []string{"a", "b", "c", "d", "e"},
		},
		{
			desc:      "context window too small",
			q:         Query{N: 10, ContextTokens: 100000},
			wantPicks: []string{"b", "c", "e"},
			wantSkips: map[string]SkipReason{"a": ContextTooSmall, "d": ContextTooSmall},
		},
		{
			desc:      "breaker open and rate limit exhausted",
			q:         Query{N: 10, Providers: map[string]ProviderStatus{"anthropic": {BreakerOpen: true}, "gemini": {RateLimitUse: 1}, "groq": {RateLimitUse: 0.95}}},
			wantPicks: []string{"a", "d", "e"},
			wantSkips: map[string]SkipReason{"b": BreakerOpen, "c": RateLimitExhausted},
		},
		{
			desc:      "a stopped provider is skipped before its breaker is read",
			q:         Query{N: 10, Providers: map[string]ProviderStatus{"anthropic": {Stopped: true, BreakerOpen: true}}},
			wantPicks: []string{"a", "c", "d", "e"},
			wantSkips: map[string]SkipReason{"b": ProviderStopped},
		},
		{
			desc:      "explicit models list",
			q:         Query{N: 10, Requested: map[string]bool{"c": true, "e": true}},
			wantPicks: []string{"c", "e"},
			wantSkips: map[string]SkipReason{"a": NotRequested, "b": NotRequested, "d": NotRequested},
		},
		{
			desc:      "the first failing filter is the recorded reason",
			q:         Query{N: 10, Requested: map[string]bool{"b": true}, ContextTokens: 300000, Providers: map[string]ProviderStatus{"anthropic": {BreakerOpen: true}}},
			wantSkips: map[string]SkipReason{"a": NotRequested, "b": ContextTooSmall, "c": NotRequested, "d": NotRequested, "e": NotRequested},
		},
		{
			desc: "removed, ejected, rate-limited and already tried models",
			q: Query{N: 10, Tried: map[string]bool{"b": true}, Unavailable: func(model, _ string) (SkipReason, time.Time) {
				return map[string]SkipReason{"a": ModelRemoved, "c": ModelEjected, "d": ModelRateLimited}[model], time.Time{}
			}},
			wantPicks: []string{"e"},
			wantSkips: map[string]SkipReason{"a": ModelRemoved, "b": AlreadyTried, "c": ModelEjected, "d": ModelRateLimited},
		},
		{
			desc:      "N below eligible takes N",
			q:         Query{N: 2},
			wantPicks: nil, // checked by count below
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			sel := Select(rand.New(rand.NewPCG(1, 2)), cands, tt.q)
			if tt.q.N == 2 {
				if len(sel.Picks) != 2 || sel.Eligible != 5 {
					t.Fatalf("picks %v, eligible %d", sel.Picks, sel.Eligible)
				}
				return
			}
			got := map[string]bool{}
			for _, p := range sel.Picks {
				got[p.Model] = true
			}
			if len(got) != len(tt.wantPicks) {
				t.Fatalf("picks %v, want %v", sel.Picks, tt.wantPicks)
			}
			for _, m := range tt.wantPicks {
				if !got[m] {
					t.Fatalf("picks %v, want %v", sel.Picks, tt.wantPicks)
				}
			}
			if len(sel.Skipped) != len(tt.wantSkips) {
				t.Fatalf("skips %v, want %v", sel.Skipped, tt.wantSkips)
			}
			for _, s := range sel.Skipped {
				if tt.wantSkips[s.Model] != s.Reason {
					t.Fatalf("%s skipped for %v, want %v", s.Model, s.Reason, tt.wantSkips[s.Model])
				}
			}
		})
	}
}

func TestRateLimitDamping(t *testing.T) {
	tests := []struct{ use, want float64 }{{0, 1}, {0.8, 1}, {0.9, 0.5}, {0.95, 0.25}, {1, 0}, {1.2, 0}}
	for _, tt := range tests {
		if got := RateLimitDamping(tt.use); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("damping(%v) = %v, want %v", tt.use, got, tt.want)
		}
	}
	// A near-limit provider's model loses a close contest it would otherwise win.
	cands := []Candidate{
		{Model: "busy", Provider: "groq", ContextWindow: 1, Alpha: 900, Beta: 100},
		{Model: "idle", Provider: "cerebras", ContextWindow: 1, Alpha: 850, Beta: 150},
	}
	q := Query{N: 1, Providers: map[string]ProviderStatus{"groq": {RateLimitUse: 0.9}}}
	sel := Select(rand.New(rand.NewPCG(5, 5)), cands, q)
	if sel.Picks[0].Model != "idle" {
		t.Fatalf("picked %+v, want the model of the idle provider", sel.Picks[0])
	}
	q.N = 2
	sel = Select(rand.New(rand.NewPCG(5, 5)), cands, q)
	if !sel.Picks[1].Deprioritised || sel.Picks[1].Model != "busy" {
		t.Fatalf("deprioritised model missing: %+v", sel.Picks)
	}
}

func TestSelectIsDeterministicForASeed(t *testing.T) {
	cands := candidates(250)
	for _, p := range []Policy{Thompson, UCB1, EpsilonGreedy, Uniform} {
		a := Select(rand.New(rand.NewPCG(9, 9)), cands, Query{N: 6, Policy: p, TotalPulls: 1000})
		b := Select(rand.New(rand.NewPCG(9, 9)), cands, Query{N: 6, Policy: p, TotalPulls: 1000})
		if fmt.Sprint(a.Picks) != fmt.Sprint(b.Picks) {
			t.Fatalf("%v: same seed, different picks", p)
		}
	}
}

func TestSelectProperties(t *testing.T) {
	providers := []string{"openrouter", "anthropic", "gemini", "groq"}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 40).Draw(t, "arms")
		cands := make([]Candidate, n)
		for i := range cands {
			cands[i] = Candidate{
				Model:         fmt.Sprintf("m%d", i),
				Provider:      rapid.SampledFrom(providers).Draw(t, "provider"),
				ContextWindow: rapid.IntRange(1, 10).Draw(t, "ctx"),
				Alpha:         rapid.Float64Range(0.01, 500).Draw(t, "alpha"),
				Beta:          rapid.Float64Range(0.01, 500).Draw(t, "beta"),
				Pulls:         rapid.Int64Range(0, 1000).Draw(t, "pulls"),
			}
		}
		removed := map[string]bool{}
		for i := range cands {
			if rapid.IntRange(0, 9).Draw(t, "removed") == 0 {
				removed[cands[i].Model] = true
			}
		}
		q := Query{
			N:             rapid.IntRange(0, 12).Draw(t, "n"),
			ContextTokens: rapid.IntRange(0, 10).Draw(t, "need"),
			Policy:        Policy(rapid.IntRange(0, 3).Draw(t, "policy")),
			Epsilon:       rapid.Float64Range(0, 1).Draw(t, "epsilon"),
			TotalPulls:    rapid.Int64Range(0, 100000).Draw(t, "total"),
			Providers:     map[string]ProviderStatus{},
			Unavailable: func(model, _ string) (SkipReason, time.Time) {
				if removed[model] {
					return ModelRemoved, time.Time{}
				}
				return 0, time.Time{}
			},
		}
		for _, p := range providers {
			q.Providers[p] = ProviderStatus{
				BreakerOpen:  rapid.Bool().Draw(t, "open"),
				RateLimitUse: rapid.Float64Range(0, 1.2).Draw(t, "use"),
			}
		}
		if rapid.Bool().Draw(t, "explicit") {
			q.Requested = map[string]bool{}
			for i := range cands {
				if rapid.Bool().Draw(t, "requested") {
					q.Requested[cands[i].Model] = true
				}
			}
		}
		sel := Select(rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0)), cands, q)

		eligible := map[string]bool{}
		for i := range cands {
			status, known := q.Providers[cands[i].Provider]
			if reason, _ := q.reject(&cands[i], status, known); reason == 0 {
				eligible[cands[i].Model] = true
			}
		}
		if want := min(q.N, len(eligible)); len(sel.Picks) != want {
			t.Fatalf("%d picks, want min(N=%d, eligible=%d)", len(sel.Picks), q.N, len(eligible))
		}
		if sel.Eligible != len(eligible) || len(sel.Skipped)+sel.Eligible != len(cands) {
			t.Fatalf("eligible %d skipped %d of %d", sel.Eligible, len(sel.Skipped), len(cands))
		}
		seen := map[string]bool{}
		for _, p := range sel.Picks {
			if !eligible[p.Model] {
				t.Fatalf("picked ineligible model %s", p.Model)
			}
			if seen[p.Model] {
				t.Fatalf("picked %s twice", p.Model)
			}
			seen[p.Model] = true
		}
		for _, s := range sel.Skipped {
			if eligible[s.Model] {
				t.Fatalf("skipped eligible model %s", s.Model)
			}
		}
	})
}

// TestBetterArmDominates plays a Bernoulli bandit: after enough rewards, Thompson Sampling concentrates
// its picks on the truly better arms.
func TestBetterArmDominates(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	world := rand.New(rand.NewPCG(7, 3))
	truth := map[string]float64{}
	arms := map[string]Arm{}
	cands := make([]Candidate, 50)
	for i := range cands {
		m := fmt.Sprintf("m%02d", i)
		truth[m] = 0.45 + 0.1*world.Float64()
		cands[i] = Candidate{Model: m, Provider: "sim", ContextWindow: 1}
		arms[m] = NewArm(m, "general", DefaultPrior)
	}
	truth["m17"] = 0.9 // clearly better
	const rounds, tail = 3000, 500
	hits := 0
	for r := 0; r < rounds; r++ {
		for i := range cands {
			a := arms[cands[i].Model]
			cands[i].Alpha, cands[i].Beta = a.Alpha, a.Beta
		}
		sel := Select(rng, cands, Query{N: 3})
		for _, p := range sel.Picks {
			reward := 0.0
			if world.Float64() < truth[p.Model] {
				reward = 1
			}
			arms[p.Model] = arms[p.Model].Update(reward, UpdateConfig{})
			if r >= rounds-tail && p.Model == "m17" {
				hits++
			}
		}
	}
	if share := float64(hits) / tail; share < 0.95 {
		t.Fatalf("the best arm was picked in %.0f%% of the last %d rounds, want at least 95%%", share*100, tail)
	}
	if m := arms["m17"].Mean(); m < 0.85 {
		t.Fatalf("best arm's mean %v, want near its true 0.9", m)
	}
}

func TestUCB1TriesUnpulledArmsFirst(t *testing.T) {
	cands := []Candidate{
		{Model: "known", ContextWindow: 1, Alpha: 90, Beta: 10, Pulls: 98},
		{Model: "fresh", ContextWindow: 1, Alpha: 1, Beta: 1, Pulls: 0},
	}
	sel := Select(rand.New(rand.NewPCG(1, 1)), cands, Query{N: 1, Policy: UCB1, TotalPulls: 98})
	if sel.Picks[0].Model != "fresh" {
		t.Fatalf("UCB1 picked %s, want the unexplored arm", sel.Picks[0].Model)
	}
}

func TestEpsilonGreedyExplores(t *testing.T) {
	cands := candidates(30)
	rng := rand.New(rand.NewPCG(3, 3))
	explored := 0
	for i := 0; i < 1000; i++ {
		sel := Select(rng, cands, Query{N: 3, Policy: EpsilonGreedy, Epsilon: 0.2})
		for _, p := range sel.Picks {
			if p.Explored {
				explored++
			}
		}
	}
	// 3000 slots at epsilon 0.2: about 600 explorations.
	if explored < 500 || explored > 700 {
		t.Fatalf("%d explorations in 3000 slots, want about 600", explored)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{Thompson, UCB1, EpsilonGreedy, Uniform} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Fatalf("round trip of %v: %v, %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("oracle"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func BenchmarkSelectTop6Of250(b *testing.B) {
	cands := candidates(250)
	rng := rand.New(rand.NewPCG(1, 2))
	q := Query{N: 6, ContextTokens: 2000, Providers: map[string]ProviderStatus{"groq": {RateLimitUse: 0.85}, "cerebras": {BreakerOpen: true}}}
	b.ReportAllocs()
	for b.Loop() {
		Select(rng, cands, q)
	}
}
