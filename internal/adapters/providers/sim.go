package providers

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/fnv1a"
)

// SimConfig tunes the simulated provider: the `sim` section of the configuration, whose keys the
// configuration holds (config.SimConfig).
type SimConfig = config.SimConfig

// Fault describes how often a provider misbehaves (config.Fault).
type Fault = config.Fault

// Sim simulates the catalog's models: per-model latency, faults, and a per-category skill that is the
// probability of answering a multiple-choice task correctly. Its world has a truth: the correct option
// of a multiple-choice task, and a reference answer for free text, both derived from the task itself,
// so majority voting and learning behave as they would with real models of those skills.
type Sim struct {
	cfg    SimConfig
	models map[string]*simModel
	mu     sync.RWMutex
	faults map[string]Fault // per provider, overriding cfg.Faults
}

type simModel struct {
	catalog.Model
	median time.Duration
	skill  map[string]float64
}

var simCategories = []string{
	"code_review", "security_audit", "architecture", "implementation", "refactoring", "debugging", "testing",
	"documentation", "research", "classification", "summarization", "translation", "data_analysis", "planning",
	"evaluation", "brainstorming", "explanation", "comparison", "troubleshooting", "configuration", "migration", "general",
}

// NewSim simulates the given models.
func NewSim(models []catalog.Model, cfg SimConfig) *Sim {
	s := &Sim{cfg: cfg, models: make(map[string]*simModel, len(models)), faults: map[string]Fault{}}
	for _, m := range models {
		median := [4]time.Duration{0, 900 * time.Millisecond, 500 * time.Millisecond, 250 * time.Millisecond}[min(max(m.Tier, 1), 3)]
		if m.Provider == "groq" || m.Provider == "cerebras" {
			median /= 3
		}
		sm := &simModel{Model: m, median: median, skill: make(map[string]float64, len(simCategories))}
		for _, c := range simCategories {
			// Capability spans [0.55, 1]; skill spans about [0.25, 1] around it, with seeded noise so
			// that tiers overlap and the bandit has something to learn.
			base := 0.25 + 0.75*(m.Capability(c)-0.55)/0.45
			noise := (unitHash(cfg.Seed, "skill", m.ID, c) - 0.5) * 0.24
			sm.skill[c] = math.Min(0.97, math.Max(0.05, base+noise))
		}
		s.models[m.ID] = sm
	}
	return s
}

// SetFault overrides the fault rates of one provider until ClearFaults.
func (s *Sim) SetFault(provider string, f Fault) {
	s.mu.Lock()
	s.faults[provider] = f
	s.mu.Unlock()
}

// ClearFaults returns every provider to the configured fault rates.
func (s *Sim) ClearFaults() {
	s.mu.Lock()
	clear(s.faults)
	s.mu.Unlock()
}

func (s *Sim) faultFor(provider string) Fault {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if f, ok := s.faults[provider]; ok {
		return f
	}
	return s.cfg.Faults
}

// Skill returns a model's simulated skill at a category (0 for unknown models).
func (s *Sim) Skill(model, category string) float64 {
	m, ok := s.models[model]
	if !ok {
		return 0
	}
	return m.skill[category]
}

// Complete implements Backend.
func (s *Sim) Complete(ctx context.Context, call Call) (Reply, error) {
	m, ok := s.models[call.Model]
	if !ok {
		return Reply{}, &resilience.Error{Kind: resilience.ModelNotFound, Provider: call.Provider, Model: call.Model, Status: 404, Err: fmt.Errorf("model not found")}
	}
	inTokens := simPromptTokens(call)
	if inTokens > m.ContextWindow {
		return Reply{}, &resilience.Error{Kind: resilience.RequestTooLarge, Provider: m.Provider, Model: m.ID, Status: 413,
			Err: fmt.Errorf("prompt of %d tokens exceeds the context window of %d", inTokens, m.ContextWindow)}
	}
	rng := s.callRand(m, call)
	f := s.faultFor(m.Provider)
	latency := time.Duration(0)
	if s.cfg.LatencyScale > 0 {
		latency = time.Duration(float64(m.median) * s.cfg.LatencyScale * math.Exp(0.35*rng.NormFloat64()))
	}
	if reply, err := simFault(ctx, m, f, rng.Float64(), latency); err != nil {
		return reply, err
	}
	if err := wait(ctx, latency); err != nil {
		return Reply{}, err
	}
	skill := m.skill[call.Category]
	if _, known := m.skill[call.Category]; !known {
		skill = m.skill["general"]
	}
	var text string
	if call.Kind == KindArbiter {
		text = s.judge(rng, skill, call)
	} else {
		text = answer(rng, skill, call.Task)
	}
	return Reply{Text: text, Usage: Usage{InputTokens: inTokens, OutputTokens: (len(text) + 3) / 4}}, nil
}

// simPromptTokens estimates a call's prompt at a token for every started four bytes of the task and of
// each candidate.
func simPromptTokens(call Call) int {
	n := (len(call.Task) + 3) / 4
	for _, c := range call.Candidates {
		n += (len(c) + 3) / 4
	}
	return n
}

// callRand is the randomness of one call: the same for the same seed, attempt, model, kind, task and
// candidates.
func (s *Sim) callRand(m *simModel, call Call) *rand.Rand {
	var num [8]byte
	binary.LittleEndian.PutUint64(num[:], s.cfg.Seed^uint64(call.Attempt)<<48)
	h := fnv1a.Offset.AddBytes(num[:]).AddString(m.ID).AddByte(0).AddString(call.Kind).AddByte(0).AddString(call.Task).AddByte(0)
	for _, part := range call.Candidates {
		h = h.AddString(part).AddByte(0)
	}
	return rand.New(rand.NewPCG(uint64(h), s.cfg.Seed^0x9E3779B97F4A7C15))
}

// simFault plays the fault a call drew (r, uniform in [0, 1)) from the fault rates: a 503 after a
// quarter of the latency, a 429, or a hang until the caller's deadline. It returns a nil error when the
// call drew none.
func simFault(ctx context.Context, m *simModel, f Fault, r float64, latency time.Duration) (Reply, error) {
	scope := resilience.ScopeModel
	if f.ProviderWide {
		scope = resilience.ScopeProvider
	}
	switch {
	case r < f.ServerErrorRate:
		if err := wait(ctx, latency/4); err != nil {
			return Reply{}, err
		}
		return Reply{}, &resilience.Error{Kind: resilience.ProviderUnavailable, Scope: scope, Provider: m.Provider, Model: m.ID, Status: 503, Err: fmt.Errorf("simulated overload")}
	case r < f.ServerErrorRate+f.RateLimitRate:
		return simRateLimit(m, f, scope)
	case r < f.ServerErrorRate+f.RateLimitRate+f.TimeoutRate:
		<-ctx.Done()
		return Reply{}, ctx.Err()
	}
	return Reply{}, nil
}

// simRateLimit is a 429 asking for a wait of f.RetryAfter (a second when unset); a provider-wide one
// comes with the provider's rate-limit headers, its requests spent until then.
func simRateLimit(m *simModel, f Fault, scope resilience.Scope) (Reply, error) {
	after := f.RetryAfter
	if after <= 0 {
		after = time.Second
	}
	var headers *ratelimit.Upstream
	if f.ProviderWide {
		headers = &ratelimit.Upstream{RemainingRequests: 0, RemainingTokens: -1, ResetRequests: after}
	}
	return Reply{RateLimit: headers},
		&resilience.Error{Kind: resilience.RateLimited, Scope: scope, Provider: m.Provider, Model: m.ID, Status: 429, RetryAfter: after, Err: fmt.Errorf("simulated rate limit")}
}

// Stream implements Streamer: the simulated answer, word by word once it is ready.
func (s *Sim) Stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	reply, err := s.Complete(ctx, call)
	if err != nil {
		return reply, err
	}
	for _, piece := range strings.SplitAfter(reply.Text, " ") {
		if err := ctx.Err(); err != nil {
			return Reply{}, err
		}
		if piece != "" {
			onDelta(Delta{Text: piece})
		}
	}
	return reply, nil
}

func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SimTruth is the simulated world's correct option of a multiple-choice task ("" for other tasks).
func SimTruth(task string) string {
	opts := classify.ChoiceLetters(task)
	if opts == nil {
		return ""
	}
	return opts[int(unitHash(0, "truth", task)*float64(len(opts)))%len(opts)]
}

// answer writes a model's answer: the true option with probability skill (else another option), or for
// free text each reference sentence with probability skill (else a sentence of the model's own).
func answer(rng *rand.Rand, skill float64, task string) string {
	if opts := classify.ChoiceLetters(task); opts != nil {
		pick := SimTruth(task)
		if rng.Float64() >= skill {
			others := make([]string, 0, len(opts)-1)
			for _, o := range opts {
				if o != pick {
					others = append(others, o)
				}
			}
			pick = others[rng.IntN(len(others))]
		}
		return "The answer is (" + pick + ")."
	}
	t := reference(task)
	var b strings.Builder
	b.Grow(320)
	for i, s := range t.ref {
		if i > 0 {
			b.WriteByte(' ')
		}
		if rng.Float64() < skill {
			b.WriteString(s)
			continue
		}
		b.WriteString(sentence(rng.Uint64(), t.words))
	}
	return b.String()
}

// judge picks, with probability skill, a candidate that is right (the true option, or the one closest
// to the reference answer), and otherwise a candidate at random.
func (s *Sim) judge(rng *rand.Rand, skill float64, call Call) string {
	n := len(call.Candidates)
	if n == 0 {
		return `{"choice": 0}`
	}
	choice := rightCandidate(call)
	if rng.Float64() >= skill {
		choice = rng.IntN(n)
	}
	v := simVerdict{Choice: choice + 1, Agreement: []string{}, Disagreement: []string{}}
	for i := 0; i < n; i++ {
		score := simScore{0.3, 0.3, 0.3}
		if i == choice {
			score = simScore{0.9, 0.9, 0.9}
		}
		v.Scores = append(v.Scores, score)
	}
	if f := call.ResponseFormat; f != nil && strings.HasSuffix(f.Name, "pairwise") {
		v.Preferences = simPreferences(n, choice)
	}
	raw, _ := json.Marshal(v)
	return string(raw)
}

// simVerdict is a simulated arbiter's verdict, in the shape the arbiter's response format asks for.
type simVerdict struct {
	Choice       int             `json:"choice"`
	Answer       string          `json:"answer"`
	Scores       []simScore      `json:"scores"`
	Agreement    []string        `json:"agreement"`
	Disagreement []string        `json:"disagreement"`
	Preferences  []simPreference `json:"preferences,omitempty"`
}

// simScore scores one candidate.
type simScore struct {
	Relevance    float64 `json:"relevance"`
	Correctness  float64 `json:"correctness"`
	Completeness float64 `json:"completeness"`
}

// simPreference says which of two candidates (numbered from 1) wins, 0 for neither.
type simPreference struct {
	First  int `json:"first"`
	Second int `json:"second"`
	Winner int `json:"winner"`
}

// rightCandidate is the candidate that is right: the one giving the true option of a multiple-choice
// task (the simulated models say "The answer is (X)."), else the one closest to the reference answer.
// It is the first when none is.
func rightCandidate(call Call) int {
	if truth := SimTruth(call.Task); truth != "" {
		for i, c := range call.Candidates {
			if strings.Contains(c, "("+truth+")") {
				return i
			}
		}
		return 0
	}
	ref := wordSet(strings.Join(reference(call.Task).ref, " "))
	good, best := 0, -1.0
	for i, c := range call.Candidates {
		if overlap := jaccard(wordSet(c), ref); overlap > best {
			good, best = i, overlap
		}
	}
	return good
}

// simPreferences compares every pair of n candidates: the chosen one wins each of its pairs, and the
// others' pairs have no winner.
func simPreferences(n, choice int) []simPreference {
	var out []simPreference
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			p := simPreference{First: i + 1, Second: j + 1}
			switch choice {
			case i:
				p.Winner = i + 1
			case j:
				p.Winner = j + 1
			}
			out = append(out, p)
		}
	}
	return out
}

func wordSet(text string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !('a' <= r && r <= 'z') }) {
		set[w] = true
	}
	return set
}

func jaccard(a, b map[string]bool) float64 {
	both := 0
	for w := range a {
		if b[w] {
			both++
		}
	}
	if all := len(a) + len(b) - both; all > 0 {
		return float64(both) / float64(all)
	}
	return 0
}

// templates are the sentences of simulated free-text answers, each around two words of the task.
var templates = [][3]string{
	{"Start with ", ", then look at ", "."},
	{"The main risk lies in ", " when ", " changes."},
	{"Keep ", " separate from ", "."},
	{"Measure ", " before tuning ", "."},
	{"Document how ", " depends on ", "."},
	{"Prefer a simple ", " over a clever ", "."},
	{"Check ", " against ", " first."},
	{"Treat ", " as the source of truth for ", "."},
}

// refCache remembers the reference answers of recent tasks, with their words: every model asked the
// same task needs them. It keys them by the task's hash and length, not the task itself, so that it
// never holds on to a large task after its request is done.
var refCache struct {
	sync.Mutex
	entries [256]struct {
		hash uint64
		size int
		task *simTask
	}
}

// simTask is what the simulated world derives from a free-text task: its content words and its
// reference answer of five sentences about them. Both are shared and must not be modified.
type simTask struct {
	words, ref []string
}

// reference is the simulated world's view of a free-text task.
func reference(task string) *simTask {
	sum := uint64(fnv1a.Offset.AddString(task))
	slot := sum % uint64(len(refCache.entries))
	refCache.Lock()
	e := refCache.entries[slot]
	refCache.Unlock()
	if e.hash == sum && e.size == len(task) && e.task != nil {
		return e.task
	}
	t := computeReference(task)
	refCache.Lock()
	refCache.entries[slot].hash, refCache.entries[slot].size, refCache.entries[slot].task = sum, len(task), t
	refCache.Unlock()
	return t
}

func computeReference(task string) *simTask {
	t := &simTask{words: contentWords(task), ref: make([]string, 5)}
	seed := uint64(fnv1a.Offset.AddString(task))
	for i := range t.ref {
		t.ref[i] = sentence(seed+uint64(i)*0x9E3779B97F4A7C15, t.words)
	}
	return t
}

func sentence(seed uint64, words []string) string {
	r := rand.New(rand.NewPCG(seed, 17))
	t := templates[r.IntN(len(templates))]
	return t[0] + words[r.IntN(len(words))] + t[1] + words[r.IntN(len(words))] + t[2]
}

func contentWords(task string) []string {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(task), func(r rune) bool { return !('a' <= r && r <= 'z') }) {
		if len(w) >= 5 {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		words = []string{"the request", "the context", "the result"}
	}
	return words
}

func unitHash(seed uint64, parts ...string) float64 {
	var num [20]byte
	h := fnv1a.Offset.AddBytes(strconv.AppendUint(num[:0], seed, 10))
	for _, p := range parts {
		h = h.AddByte(0).AddString(p)
	}
	return float64(uint64(h)>>11) / (1 << 53)
}
