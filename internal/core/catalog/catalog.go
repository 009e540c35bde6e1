// Package catalog owns the candidate models Conclave can route to: each model's provider, context window,
// prices, capability tags and tier hint, shipped as an embedded data file and loadable from a path.
package catalog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/conclave-ai/conclave/internal/core/money"
)

//go:embed models.json
var embeddedModels []byte

// Providers are the providers the embedded catalog names. A configuration may add providers of its own
// (a local vLLM, say) under any name of lower-case letters, digits, '-' and '_'.
var Providers = []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"}

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Capabilities is the vocabulary of capability tags.
var Capabilities = []string{"chat", "code", "reasoning", "math", "vision", "long_context", "tools", "multilingual", "fast", "creative", "structured_output",
	Embeddings}

// Embeddings tags a model that turns text into vectors (POST /v1/embeddings) and answers no task: no
// panel selects it and no chat calls it.
const Embeddings = "embeddings"

// Model is one candidate model, named as its provider names it.
type Model struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	// UpstreamID is the id to send to the provider, when it is not ID.
	UpstreamID      string `json:"upstream_id,omitempty"`
	Family          string `json:"family"`
	ContextWindow   int    `json:"context_window"`
	MaxOutputTokens int    `json:"max_output_tokens"`
	// InputPricePerMTok and OutputPricePerMTok are US dollars per million tokens, exact.
	InputPricePerMTok  money.Price `json:"input_price_per_mtok"`
	OutputPricePerMTok money.Price `json:"output_price_per_mtok"`
	// CacheReadPricePerMTok and CacheWritePricePerMTok price the input tokens the provider read from
	// or wrote to its prompt cache, where the model prices them apart (nil: they pay the input price).
	CacheReadPricePerMTok  *money.Price `json:"cache_read_price_per_mtok,omitempty"`
	CacheWritePricePerMTok *money.Price `json:"cache_write_price_per_mtok,omitempty"`
	// Unpriced marks a model whose price nobody gave (discovered from a provider's listing without
	// prices, or configured without price_in and price_out): its prices read zero but are not known to
	// be, so a key with a budget may not call it.
	Unpriced     bool     `json:"unpriced,omitempty"`
	Capabilities []string `json:"capabilities"`
	// Tier is a strength hint: 1 frontier, 2 strong mid-size, 3 small and fast.
	Tier int `json:"tier"`
	// Created is when the provider says it made the model, in Unix seconds (0: it does not say).
	Created int64 `json:"created,omitempty"`
}

// Rates are the model's prices.
func (m Model) Rates() money.Rates {
	r := money.Rates{In: m.InputPricePerMTok, Out: m.OutputPricePerMTok}
	if p := m.CacheReadPricePerMTok; p != nil {
		r.CacheRead, r.HasCacheRead = *p, true
	}
	if p := m.CacheWritePricePerMTok; p != nil {
		r.CacheWrite, r.HasCacheWrite = *p, true
	}
	return r
}

// Has reports whether the model carries a capability tag.
func (m Model) Has(capability string) bool { return slices.Contains(m.Capabilities, capability) }

// categoryNeeds lists the capability tags that matter for each task category.
var categoryNeeds = map[string][]string{
	"code_review":     {"code", "reasoning"},
	"security_audit":  {"code", "reasoning"},
	"architecture":    {"reasoning", "long_context"},
	"implementation":  {"code", "tools"},
	"refactoring":     {"code", "long_context"},
	"debugging":       {"code", "reasoning"},
	"testing":         {"code"},
	"documentation":   {"chat", "long_context"},
	"research":        {"reasoning", "long_context"},
	"classification":  {"structured_output", "fast"},
	"summarization":   {"long_context", "chat"},
	"translation":     {"multilingual"},
	"data_analysis":   {"math", "reasoning"},
	"planning":        {"reasoning"},
	"evaluation":      {"reasoning"},
	"brainstorming":   {"creative"},
	"explanation":     {"chat", "reasoning"},
	"comparison":      {"reasoning"},
	"troubleshooting": {"reasoning", "code"},
	"configuration":   {"code", "structured_output"},
	"migration":       {"code", "long_context"},
	"general":         {"chat"},
}

var tierBase = [4]float64{0, 0.85, 0.70, 0.55}

// Capability is the model's prior fitness for a category in [0,1]: a base by tier (0.85, 0.70, 0.55)
// plus up to 0.15 for the share of the category's needed tags the model carries. It is the capability
// term of the weighted consensus score.
func (m Model) Capability(category string) float64 {
	base := 0.55
	if m.Tier >= 1 && m.Tier <= 3 {
		base = tierBase[m.Tier]
	}
	needs := categoryNeeds[category]
	if len(needs) == 0 {
		needs = categoryNeeds["general"]
	}
	have := 0
	for _, n := range needs {
		if m.Has(n) {
			have++
		}
	}
	return base + 0.15*float64(have)/float64(len(needs))
}

// Catalog is an immutable, validated set of models.
type Catalog struct {
	models    []Model
	byID      map[string]int
	providers []string // sorted
}

type file struct {
	Version int     `json:"version"`
	Models  []Model `json:"models"`
}

// Embedded returns the catalog shipped in the binary.
func Embedded() (*Catalog, error) {
	c, err := Parse(embeddedModels)
	if err != nil {
		return nil, fmt.Errorf("embedded catalog: %w", err)
	}
	return c, nil
}

// Parse decodes and validates a catalog document.
func Parse(raw []byte) (*Catalog, error) {
	var f file
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return New(f.Models)
}

// New validates models and builds a catalog of them.
func New(models []Model) (*Catalog, error) {
	c := &Catalog{models: slices.Clone(models), byID: make(map[string]int, len(models))}
	for i, m := range c.models {
		if err := validate(m); err != nil {
			return nil, fmt.Errorf("model %d (%q): %w", i, m.ID, err)
		}
		if _, dup := c.byID[m.ID]; dup {
			return nil, fmt.Errorf("model %q listed twice", m.ID)
		}
		c.byID[m.ID] = i
	}
	for p := range c.ByProvider() {
		c.providers = append(c.providers, p)
	}
	sort.Strings(c.providers)
	return c, nil
}

func validate(m Model) error {
	switch {
	case m.ID == "":
		return fmt.Errorf("id is required")
	case !providerName.MatchString(m.Provider):
		return fmt.Errorf("provider %q is not a name of lower-case letters, digits, '-' and '_'", m.Provider)
	case m.ContextWindow <= 0:
		return fmt.Errorf("context_window must be positive")
	case m.InputPricePerMTok < 0 || m.OutputPricePerMTok < 0:
		return fmt.Errorf("prices must not be negative")
	case m.Tier < 1 || m.Tier > 3:
		return fmt.Errorf("tier must be 1, 2 or 3, got %d", m.Tier)
	}
	for _, c := range m.Capabilities {
		if !slices.Contains(Capabilities, c) {
			return fmt.Errorf("unknown capability %q", c)
		}
	}
	return nil
}

// Len is the number of models.
func (c *Catalog) Len() int { return len(c.models) }

// Get returns the model with the given id.
func (c *Catalog) Get(id string) (Model, bool) {
	i, ok := c.byID[id]
	if !ok {
		return Model{}, false
	}
	return c.models[i], true
}

// All returns the models in file order; the slice is shared and must not be modified.
func (c *Catalog) All() []Model { return c.models }

// ByProvider counts models per provider.
func (c *Catalog) ByProvider() map[string]int {
	n := map[string]int{}
	for _, m := range c.models {
		n[m.Provider]++
	}
	return n
}

// With returns a new catalog with extra models added (replacing those of the same id).
func (c *Catalog) With(extra ...Model) (*Catalog, error) {
	models := slices.Clone(c.models)
	for _, m := range extra {
		if i, ok := c.byID[m.ID]; ok {
			models[i] = m
		} else {
			models = append(models, m)
		}
	}
	return New(models)
}

// Only returns a new catalog of the models of some providers.
func (c *Catalog) Only(providers map[string]bool) (*Catalog, error) {
	var models []Model
	for _, m := range c.models {
		if providers[m.Provider] {
			models = append(models, m)
		}
	}
	return New(models)
}

// ProviderNames returns the providers that have at least one model, sorted; the slice is shared and
// must not be modified.
func (c *Catalog) ProviderNames() []string {
	return c.providers
}

// FamilyOf names the family of a model known only by its id: the family of the embedded catalog's
// model that the id is a snapshot of ("o1-mini-2024-09-12" of openai/o1-mini: the catalog's name, then
// dash-separated tags), else the embedded catalog's family that a word of the id names (FamilyIn),
// else the vendor part of the id ("meta-llama/..."), else the id itself, a family of its own. Families
// are a prior (models of one family err together), so an unknown model is taken as related to none
// rather than to its provider's other models.
func FamilyOf(id string) string {
	known := embeddedFamilies()
	if f := snapshotFamily(id, known.byName); f != "" {
		return f
	}
	if f := FamilyIn(id, known.families); f != "" {
		return f
	}
	if vendor, _, ok := strings.Cut(id, "/"); ok && vendor != "" {
		return vendor
	}
	return id
}

// snapshotFamily is the family of the longest catalog name (lower case, without its vendor) that the
// id's name is, or begins with before a dash; "" when there is none.
func snapshotFamily(id string, byName map[string]string) string {
	name := bareName(id)
	for {
		if f, ok := byName[name]; ok {
			return f
		}
		i := strings.LastIndexByte(name, '-')
		if i <= 0 {
			return ""
		}
		name = name[:i]
	}
}

// bareName is a model id without its vendor, in lower case.
func bareName(id string) string { return strings.ToLower(id[strings.LastIndexByte(id, '/')+1:]) }

// knownFamilies are the embedded catalog's families, and each model's family by its name (lower
// case, without its vendor).
type knownFamilies struct {
	families []string
	byName   map[string]string
}

// embeddedFamilies is what the embedded catalog knows of families, read once.
var embeddedFamilies = sync.OnceValue(func() knownFamilies {
	c, err := Embedded()
	if err != nil { // the embedded file is checked by the tests: without it no family is known
		return knownFamilies{}
	}
	k := knownFamilies{families: c.Families(), byName: make(map[string]string, c.Len())}
	for _, m := range c.All() {
		name := bareName(m.ID)
		if _, dup := k.byName[name]; m.Family != "" && !dup {
			k.byName[name] = m.Family
		}
	}
	return k
})

// Families returns the families the catalog's models belong to, sorted.
func (c *Catalog) Families() []string {
	var out []string
	for _, m := range c.models {
		if m.Family != "" && !slices.Contains(out, m.Family) {
			out = append(out, m.Family)
		}
	}
	slices.Sort(out)
	return out
}

// FamilyIn names the family of a model known only by its name: the family among known that a word of
// the name starts with, followed by nothing or a version ("Meta-Llama-3_1-70B" and "Qwen1.5-72B-Chat"
// are of llama and qwen, "chatgpt-4o" of none), the longest when several match; "" when none does.
func FamilyIn(name string, known []string) string {
	best := ""
	for _, word := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		for _, f := range known {
			rest, ok := strings.CutPrefix(word, f)
			if ok && len(f) > len(best) && (rest == "" || '0' <= rest[0] && rest[0] <= '9') {
				best = f
			}
		}
	}
	return best
}

// Wire formats an upstream can speak.
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindGemini    = "gemini"
)

// ProviderDefaults are what Conclave knows of a named provider: its wire format, base URL and the environment
// variable of its key.
type ProviderDefaults struct {
	Kind    string
	BaseURL string
	KeyEnv  string
}

// NamedProviders are the providers Conclave knows by name.
var NamedProviders = map[string]ProviderDefaults{
	"openrouter": {KindOpenAI, "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"},
	"groq":       {KindOpenAI, "https://api.groq.com/openai/v1", "GROQ_API_KEY"},
	"cerebras":   {KindOpenAI, "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"},
	"deepseek":   {KindOpenAI, "https://api.deepseek.com", "DEEPSEEK_API_KEY"},
	"anthropic":  {KindAnthropic, "https://api.anthropic.com", "ANTHROPIC_API_KEY"},
	"gemini":     {KindGemini, "https://generativelanguage.googleapis.com", "GEMINI_API_KEY"},
}

// ReplayProvider is the provider name of replayed models.
const ReplayProvider = "replay"
