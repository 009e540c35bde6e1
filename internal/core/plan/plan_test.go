package plan

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is a fake World: every model at the prior, providers and models down on demand.
type world struct {
	cat       *catalog.Catalog
	providers map[string]bandit.ProviderStatus
	models    map[string]bandit.SkipReason
	workers   []assign.Worker
}

func (w *world) Now() time.Time { return epoch }
func (w *world) Candidates(string) *[]bandit.Candidate {
	var out []bandit.Candidate
	for _, m := range w.cat.All() {
		out = append(out, bandit.Candidate{Model: m.ID, Provider: m.Provider, ContextWindow: m.ContextWindow, Alpha: 1, Beta: 1})
	}
	return &out
}
func (w *world) Release(*[]bandit.Candidate) {}
func (w *world) TotalPulls(string) int64     { return 0 }
func (w *world) Provider(name string, _ time.Time) bandit.ProviderStatus {
	s := w.providers[name]
	s.ModelsOut = len(w.models) > 0 // Model answers for every provider's models
	return s
}
func (w *world) Workers() []assign.Worker { return w.workers }
func (w *world) Model(m, _ string, _ time.Time) (bandit.SkipReason, time.Time) {
	if r, ok := w.models[m]; ok {
		return r, epoch.Add(20 * time.Second)
	}
	return 0, time.Time{}
}

func setup(t *testing.T) (*Settings, *world) {
	t.Helper()
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	bps, err := blueprints.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cls, err := classify.New(classify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Settings{Classifier: cls, Blueprints: bps, Catalog: catalog.NewLive(cat), OutputReserve: 1024, Rounds: 3, ArbiterTimeout: 10 * time.Second,
		TimeoutFloors: map[string]time.Duration{"anthropic": 120 * time.Second}}
	w := &world{cat: cat, providers: map[string]bandit.ProviderStatus{}, models: map[string]bandit.SkipReason{},
		workers: snapshots(fleet.DefaultWorkers(4, 4))}
	return s, w
}

func snapshots(specs []fleet.WorkerSpec) []assign.Worker {
	out := make([]assign.Worker, len(specs))
	for i, w := range specs {
		out[i] = assign.Worker{Name: w.Name, Tier: w.Tier, Slots: w.Slots}
	}
	return out
}

const mcq = "Which gas makes up most of Earth's atmosphere?\nA) Oxygen\nB) Nitrogen\nC) Argon\nD) Carbon dioxide"

func TestDeadlines(t *testing.T) {
	s, w := setup(t)
	tests := []struct {
		desc                         string
		req                          Request
		deadline, collectBy, queueBy time.Duration // from receipt
	}{
		{"the caller's timeout is the deadline", Request{Task: mcq, Category: "classification", Timeout: 2 * time.Second},
			2 * time.Second, 2 * time.Second, 2 * time.Second},
		{"rotating keeps a quarter of the timeout for its arbiter", Request{Task: mcq, Category: "code_review", Timeout: 8 * time.Second},
			8 * time.Second, 6 * time.Second, 5 * time.Second},
		{"at most the arbiter's own timeout", Request{Task: mcq, Category: "code_review", Timeout: 100 * time.Second},
			100 * time.Second, 90 * time.Second, 5 * time.Second},
		{"without a timeout, the blueprint's bound: every round plus the arbiter", Request{Task: mcq, Category: "code_review"},
			4*90*time.Second + 10*time.Second, 4 * 90 * time.Second, 5 * time.Second},
		{"one worker asks no arbiter", Request{Task: mcq, Category: "code_review", Overrides: blueprints.Overrides{Workers: ptr(1), MinResponses: ptr(1)}},
			4 * 90 * time.Second, 4 * 90 * time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			tt.req.ReceivedAt = epoch
			p, f := Make(s, w, tt.req, epoch.Add(time.Millisecond), rand.New(rand.NewPCG(1, 1)))
			if f != nil {
				t.Fatal(f)
			}
			if got := p.Deadline.Sub(epoch); got != tt.deadline {
				t.Fatalf("deadline %v after receipt, want %v", got, tt.deadline)
			}
			if got := p.CollectBy.Sub(epoch); got != tt.collectBy {
				t.Fatalf("collection ends %v after receipt, want %v", got, tt.collectBy)
			}
			if got := p.QueueBy.Sub(epoch); got != tt.queueBy {
				t.Fatalf("waiting for rate limits ends %v after receipt, want %v (max_queue_seconds, at most the end of collection)", got, tt.queueBy)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestFaultAfterIsTheBlueprintsTimeoutOrTheProvidersFloor(t *testing.T) {
	s, w := setup(t)
	p, f := Make(s, w, Request{Task: mcq, Category: "general"}, epoch, rand.New(rand.NewPCG(1, 1)))
	if f != nil {
		t.Fatal(f)
	}
	if got := p.FaultAfter("groq"); got != p.Blueprint.Timeout() {
		t.Fatalf("groq: %v", got)
	}
	if got := p.FaultAfter("anthropic"); got != 120*time.Second {
		t.Fatalf("anthropic, with a floor of 120 s: %v", got)
	}
}

func TestAnswerKind(t *testing.T) {
	s, w := setup(t)
	tests := []struct {
		desc, task, kind string
		want             consensus.Kind
		fails            bool
	}{
		{"lettered options ask for a choice", mcq, "", consensus.Choice, false},
		{"free text", "Summarize the incident.", "", consensus.Text, false},
		{"the caller knows better", mcq, "exact", consensus.Exact, false},
		{"an unknown kind", mcq, "vibes", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			p, f := Make(s, w, Request{Task: tt.task, Category: "general", AnswerKind: tt.kind}, epoch, rand.New(rand.NewPCG(1, 1)))
			if tt.fails {
				if f == nil || f.Kind != resilience.MalformedRequest || len(f.Problems()) != 1 {
					t.Fatalf("failure %v", f)
				}
				return
			}
			if f != nil || p.AnswerKind != tt.want {
				t.Fatalf("kind %s, failure %v", p.AnswerKind, f)
			}
		})
	}
}

func TestNoModelSaysWhyAndWhenToComeBack(t *testing.T) {
	tests := []struct {
		desc  string
		setup func(*world)
		task  string
		kind  resilience.Kind
		wait  time.Duration
	}{
		{"every breaker open", func(w *world) {
			for _, p := range w.cat.ProviderNames() {
				w.providers[p] = bandit.ProviderStatus{BreakerOpen: true, Until: epoch.Add(15 * time.Second)}
			}
		}, mcq, resilience.AllProvidersDown, 15 * time.Second},
		{"every provider at its rate limit", func(w *world) {
			for _, p := range w.cat.ProviderNames() {
				w.providers[p] = bandit.ProviderStatus{RateLimitUse: 1, Until: epoch.Add(3 * time.Second)}
			}
		}, mcq, resilience.RateLimited, 3 * time.Second},
		{"a rate limit whose end is not known", func(w *world) {
			for _, p := range w.cat.ProviderNames() {
				w.providers[p] = bandit.ProviderStatus{RateLimitUse: 1}
			}
		}, mcq, resilience.RateLimited, time.Second},
		{"every model rate-limited on its own quota", func(w *world) {
			for _, m := range w.cat.All() {
				w.models[m.ID] = bandit.ModelRateLimited
			}
		}, mcq, resilience.RateLimited, 20 * time.Second},
		{"a task no model can hold", func(*world) {}, string(make([]byte, 8<<20)), resilience.RequestTooLarge, 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s, w := setup(t)
			tt.setup(w)
			_, f := Make(s, w, Request{Task: "x" + tt.task, Category: "general"}, epoch, rand.New(rand.NewPCG(1, 1)))
			if f == nil || f.Kind != tt.kind || f.RetryAfter != tt.wait {
				t.Fatalf("failure %+v, want %s after %v", f, tt.kind, tt.wait)
			}
		})
	}
}

func TestAllWorkersOffline(t *testing.T) {
	s, w := setup(t)
	for i := range w.workers {
		w.workers[i].Breaker = resilience.Snapshot{State: resilience.Open, OpenUntil: epoch.Add(time.Duration(i+5) * time.Second)}
	}
	_, f := Make(s, w, Request{Task: mcq, Category: "general"}, epoch, rand.New(rand.NewPCG(1, 1)))
	if f == nil || f.Kind != resilience.AllWorkersOffline || f.RetryAfter != 5*time.Second {
		t.Fatalf("failure %+v", f)
	}
}

func TestReplacementsKeepToTheRequestedModels(t *testing.T) {
	s, w := setup(t)
	models := []string{"deepseek-chat", "llama3.1-8b", "gemini-2.0-flash", "claude-3-5-haiku-20241022"}
	p, f := Make(s, w, Request{Task: mcq, Category: "general", Models: models, Overrides: blueprints.Overrides{Workers: ptr(2), MinResponses: ptr(2)}},
		epoch, rand.New(rand.NewPCG(1, 1)))
	if f != nil {
		t.Fatal(f)
	}
	tried := map[string]bool{}
	for _, pick := range p.Selection.Picks {
		tried[pick.Model] = true
	}
	picks, workers := p.Replace(w, 5, tried, nil, rand.New(rand.NewPCG(2, 2)))
	if len(picks) != 2 || len(workers) != 2 {
		t.Fatalf("replacements %v on %v: want the two requested models not yet tried", picks, workers)
	}
	for _, pick := range picks {
		if tried[pick.Model] || (pick.Model != models[0] && pick.Model != models[1] && pick.Model != models[2] && pick.Model != models[3]) {
			t.Fatalf("replacement %s is outside the request's models or already tried", pick.Model)
		}
	}
	// A provider that refused the request's connections is not asked again.
	refused := map[string]bool{picks[0].Provider: true}
	again, _ := p.Replace(w, 5, tried, refused, rand.New(rand.NewPCG(2, 2)))
	if len(again) != 1 || again[0].Provider == picks[0].Provider {
		t.Fatalf("replacements %v with %s refusing: want the other one alone", again, picks[0].Provider)
	}
}

func TestSkipsToRecordAreBounded(t *testing.T) {
	s, w := setup(t)
	for _, m := range w.cat.All() {
		w.models[m.ID] = bandit.ModelEjected
	}
	delete(w.models, "deepseek-chat")
	p, f := Make(s, w, Request{Task: mcq, Category: "general"}, epoch, rand.New(rand.NewPCG(1, 1)))
	if f != nil {
		t.Fatal(f)
	}
	if n := len(p.SkipsToRecord()); n != MaxRecordedSkips {
		t.Fatalf("%d skips recorded, want at most %d", n, MaxRecordedSkips)
	}
}

func TestNoModelNamesEachModelsCause(t *testing.T) {
	s, w := setup(t)
	models := []string{"llama-3.1-8b-instant", "deepseek-chat"}
	w.providers["groq"] = bandit.ProviderStatus{BreakerOpen: true, Until: epoch.Add(15 * time.Second), Fault: "connection_refused: 10.0.0.7:8000"}
	w.providers["deepseek"] = bandit.ProviderStatus{RateLimitUse: 1, Until: epoch.Add(3 * time.Second)}
	_, f := Make(s, w, Request{Task: mcq, Category: "general", Models: models}, epoch, rand.New(rand.NewPCG(1, 1)))
	if f == nil || f.Kind != resilience.AllProvidersDown {
		t.Fatalf("failure %v", f)
	}
	got := map[string]string{}
	for _, p := range f.Problems() {
		got[p.Field] = p.Message
	}
	want := map[string]string{"llama-3.1-8b-instant": "provider_breaker_open after connection_refused: 10.0.0.7:8000",
		"deepseek-chat": "provider_rate_limit_exhausted"}
	if len(got) != len(want) || got[models[0]] != want[models[0]] || got[models[1]] != want[models[1]] {
		t.Fatalf("causes %v, want %v (the models the request did not name left out)", got, want)
	}
}

// A request that needs something of its models (sight for its images, a provider that carries every
// parameter it insists on) selects only models that have it, and is refused with 400 when none does.
func TestSelectionKeepsToWhatTheRequestNeeds(t *testing.T) {
	s, w := setup(t)
	s.Carries = func(provider, param string) bool {
		return provider != "anthropic" || param != "seed" && param != "logprobs"
	}
	cat := s.Catalog.Load()
	vision := func(model string) bool { m, _ := cat.Get(model); return m.Has("vision") }
	var blind, anthropicVision, otherVision string
	for _, m := range cat.All() {
		switch {
		case !m.Has("vision") && blind == "":
			blind = m.ID
		case m.Has("vision") && m.Provider == "anthropic" && anthropicVision == "":
			anthropicVision = m.ID
		case m.Has("vision") && m.Provider != "anthropic" && otherVision == "":
			otherVision = m.ID
		}
	}
	for _, tc := range []struct {
		desc    string
		req     Request
		check   func(p *Plan) bool
		refused string // the field a 400 names; empty when the request is planned
	}{
		{"images: only models that see them", Request{Task: mcq, Category: "general", Images: true},
			func(p *Plan) bool {
				for _, pick := range p.Selection.Picks {
					if !vision(pick.Model) {
						return false
					}
				}
				for _, sk := range p.Selection.Skipped {
					if sk.Model == blind && sk.Reason == bandit.NoVision {
						return true
					}
				}
				return false
			}, ""},
		{"images for a model that cannot see", Request{Task: mcq, Category: "general", Images: true, Models: []string{blind}}, nil, "messages"},
		{"an insisted parameter its provider cannot carry", Request{Task: mcq, Category: "general", StrictParams: []string{"seed"}, Strict: true,
			Models: []string{anthropicVision}}, nil, "strict_parameters"},
		{"log probabilities its provider cannot return: the refusal names them", Request{Task: mcq, Category: "general",
			StrictParams: []string{"logprobs"}, Models: []string{anthropicVision}}, nil, "logprobs"},
		{"an insisted parameter: the other models still answer", Request{Task: mcq, Category: "general", StrictParams: []string{"seed"},
			Models: []string{anthropicVision, otherVision}},
			func(p *Plan) bool { return len(p.Selection.Picks) == 1 && p.Selection.Picks[0].Model == otherVision }, ""},
		{"a parameter it carries", Request{Task: mcq, Category: "general", StrictParams: []string{"temperature"}, Models: []string{anthropicVision}},
			func(p *Plan) bool { return len(p.Selection.Picks) == 1 }, ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			p, f := Make(s, w, tc.req, epoch, rand.New(rand.NewPCG(1, 1)))
			if tc.refused != "" {
				if f == nil || f.Kind != resilience.MalformedRequest || len(f.Problems()) != 1 || f.Problems()[0].Field != tc.refused {
					t.Fatalf("failure %v: want 400 naming %s", f, tc.refused)
				}
				return
			}
			if f != nil || !tc.check(p) {
				t.Fatalf("failure %v, selection %+v", f, p.Selection)
			}
		})
	}
}
