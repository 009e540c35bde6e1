package providers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

func newTestSim(t testing.TB, cfg SimConfig) (*Sim, *catalog.Catalog) {
	t.Helper()
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return NewSim(cat.All(), cfg), cat
}

func mcq(i int) string {
	return fmt.Sprintf("Question %d: which value is right?\nA) alpha %d\nB) beta\nC) gamma\nD) delta", i, i)
}

func TestSimSkillIsTheProbabilityOfBeingRight(t *testing.T) {
	sim, cat := newTestSim(t, SimConfig{Seed: 7})
	for _, id := range []string{"claude-3-5-sonnet-20241022", "llama-3.1-8b-instant", "deepseek-chat"} {
		m, _ := cat.Get(id)
		skill := sim.Skill(id, "general")
		const n = 3000
		right := 0
		for i := 0; i < n; i++ {
			task := mcq(i)
			r, err := sim.Complete(context.Background(), Call{Kind: KindAnswer, Model: id, Provider: m.Provider, Task: task, Category: "general"})
			if err != nil {
				t.Fatal(err)
			}
			if consensus.Normalize(r.Text) == strings.ToLower(SimTruth(task)) {
				right++
			}
		}
		got := float64(right) / n
		// Three standard errors of a binomial proportion.
		if tol := 3 * math.Sqrt(skill*(1-skill)/n); math.Abs(got-skill) > tol {
			t.Errorf("%s: right %.3f of the time, skill %.3f (tolerance %.3f)", id, got, skill, tol)
		}
	}
}

func TestSimSkillsSpreadByTier(t *testing.T) {
	sim, cat := newTestSim(t, SimConfig{Seed: 1})
	mean := map[int]float64{}
	count := map[int]int{}
	for _, m := range cat.All() {
		mean[m.Tier] += sim.Skill(m.ID, "code_review")
		count[m.Tier]++
	}
	for tier := 1; tier <= 3; tier++ {
		mean[tier] /= float64(count[tier])
	}
	if !(mean[1] > mean[2] && mean[2] > mean[3]) {
		t.Fatalf("mean skill by tier %v: stronger tiers should be better", mean)
	}
}

func TestSimIsDeterministicForASeed(t *testing.T) {
	a, _ := newTestSim(t, SimConfig{Seed: 3, Faults: Fault{ServerErrorRate: 0.2}})
	b, _ := newTestSim(t, SimConfig{Seed: 3, Faults: Fault{ServerErrorRate: 0.2}})
	answered, failed := 0, 0
	for i := 0; i < 50; i++ {
		call := Call{Kind: KindAnswer, Model: "gpt-oss-120b", Provider: "cerebras", Task: fmt.Sprintf("Design a cache for service %d", i), Category: "architecture", Attempt: i % 2}
		ra, ea := a.Complete(context.Background(), call)
		rb, eb := b.Complete(context.Background(), call)
		if ra.Text != rb.Text || fmt.Sprint(ea) != fmt.Sprint(eb) {
			t.Fatalf("call %d differs between equal seeds", i)
		}
		if ea == nil && ra.Text != "" {
			answered++
		} else if resilience.KindOf(ea) == resilience.ProviderUnavailable {
			failed++
		}
	}
	// Both outcomes occur, so the comparison covers answers and faults alike.
	if answered == 0 || failed == 0 || answered+failed != 50 {
		t.Fatalf("%d answers and %d faults in 50 calls", answered, failed)
	}
}

func TestSimFaults(t *testing.T) {
	sim, _ := newTestSim(t, SimConfig{Seed: 1})
	call := Call{Kind: KindAnswer, Model: "llama-3.1-8b-instant", Provider: "groq", Task: "hello there", Category: "general"}

	sim.SetFault("groq", Fault{ServerErrorRate: 1})
	_, err := sim.Complete(context.Background(), call)
	if resilience.KindOf(err) != resilience.ProviderUnavailable || resilience.ScopeOf(err) != resilience.ScopeModel {
		t.Fatalf("5xx fault: %v", err)
	}
	sim.SetFault("groq", Fault{ServerErrorRate: 1, ProviderWide: true})
	if _, err := sim.Complete(context.Background(), call); resilience.ScopeOf(err) != resilience.ScopeProvider {
		t.Fatalf("provider-wide 5xx fault: %v", err)
	}

	// A model's own 429 says nothing of the provider's quota; a provider's 429 comes with its headers.
	sim.SetFault("groq", Fault{RateLimitRate: 1, RetryAfter: 3 * time.Second})
	r, err := sim.Complete(context.Background(), call)
	if resilience.KindOf(err) != resilience.RateLimited || resilience.ScopeOf(err) != resilience.ScopeModel || resilience.RetryAfterOf(err) != 3*time.Second || r.RateLimit != nil {
		t.Fatalf("429 fault: %v, %+v", err, r.RateLimit)
	}
	sim.SetFault("groq", Fault{RateLimitRate: 1, RetryAfter: 3 * time.Second, ProviderWide: true})
	r, err = sim.Complete(context.Background(), call)
	if resilience.ScopeOf(err) != resilience.ScopeProvider || r.RateLimit == nil || r.RateLimit.RemainingRequests != 0 || r.RateLimit.ResetRequests != 3*time.Second {
		t.Fatalf("provider-wide 429 fault: %v, %+v", err, r.RateLimit)
	}

	sim.SetFault("groq", Fault{TimeoutRate: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sim.Complete(ctx, call); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout fault: %v", err)
	}

	sim.ClearFaults()
	if _, err := sim.Complete(context.Background(), call); err != nil {
		t.Fatalf("after clearing faults: %v", err)
	}
	if _, err := sim.Complete(context.Background(), Call{Model: "no-such-model"}); resilience.KindOf(err) != resilience.ModelNotFound {
		t.Fatalf("unknown model: %v", err)
	}
	huge := Call{Kind: KindAnswer, Model: "llama3-8b-8192", Provider: "groq", Task: strings.Repeat("word ", 20000)}
	if _, err := sim.Complete(context.Background(), huge); resilience.KindOf(err) != resilience.RequestTooLarge {
		t.Fatalf("oversized prompt: %v", err)
	}
}

func TestSimLatencyHonoursTheDeadline(t *testing.T) {
	sim, _ := newTestSim(t, SimConfig{Seed: 1, LatencyScale: 100}) // medians of 25 s and more
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := sim.Complete(ctx, Call{Kind: KindAnswer, Model: "deepseek-chat", Provider: "deepseek", Task: "hi", Category: "general"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline to end the wait, got %v", err)
	}
}

func TestSimJudgeReturnsAVerdict(t *testing.T) {
	sim, _ := newTestSim(t, SimConfig{Seed: 2})
	task := mcq(1)
	truth := SimTruth(task)
	cands := []string{"The answer is (" + truth + ").", "The answer is (Z)."}
	right := 0
	for attempt := 0; attempt < 200; attempt++ {
		r, err := sim.Complete(context.Background(), Call{Kind: KindArbiter, Model: "claude-3-5-sonnet-20241022", Provider: "anthropic", Task: task, Candidates: cands, Category: "general", Attempt: attempt})
		if err != nil {
			t.Fatal(err)
		}
		v, err := consensus.ParseVerdict(r.Text, len(cands))
		if err != nil {
			t.Fatal(err)
		}
		if v.Choice == 0 {
			right++
		}
	}
	if right < 150 {
		t.Fatalf("a strong judge chose the true answer %d times in 200", right)
	}
}

func TestFreeTextAgreementFollowsSkill(t *testing.T) {
	sim, _ := newTestSim(t, SimConfig{Seed: 4})
	task := "Propose a caching strategy for the inventory service under heavy read traffic"
	ref := strings.Join(reference(task).ref, " ")
	strong, _ := sim.Complete(context.Background(), Call{Kind: KindAnswer, Model: "claude-sonnet-4-5-20250929", Provider: "anthropic", Task: task, Category: "architecture"})
	weak, _ := sim.Complete(context.Background(), Call{Kind: KindAnswer, Model: "llama-3.2-1b-preview", Provider: "groq", Task: task, Category: "architecture"})
	if consensus.Similarity(strong.Text, ref) <= consensus.Similarity(weak.Text, ref) {
		t.Fatalf("the strong model's answer is not closer to the reference:\nstrong %q\nweak %q", strong.Text, weak.Text)
	}
}
