package catalog

import (
	"slices"
	"strings"
	"testing"
)

func TestEmbeddedCatalog(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() < 200 {
		t.Fatalf("catalog has %d models, want at least 200", c.Len())
	}
	counts := c.ByProvider()
	for _, p := range []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"} {
		if counts[p] == 0 {
			t.Errorf("no model for provider %s", p)
		}
	}
	for _, m := range c.All() {
		if !m.Has("chat") {
			t.Errorf("%s lacks the chat tag", m.ID)
		}
		if m.Has("long_context") != (m.ContextWindow >= 100_000) {
			t.Errorf("%s: long_context tag disagrees with context window %d", m.ID, m.ContextWindow)
		}
	}
	if m, ok := c.Get("claude-3-5-sonnet-20241022"); !ok || m.Provider != "anthropic" {
		t.Errorf("lookup by provider's own name failed: %+v", m)
	}
}

func TestCapability(t *testing.T) {
	tests := []struct {
		desc     string
		model    Model
		category string
		want     float64
	}{
		{"tier 1 with every needed tag", Model{Tier: 1, Capabilities: []string{"chat", "code", "reasoning"}}, "code_review", 1.0},
		{"tier 1 with half the tags", Model{Tier: 1, Capabilities: []string{"chat", "code"}}, "code_review", 0.925},
		{"tier 3 with none", Model{Tier: 3, Capabilities: []string{"chat"}}, "translation", 0.55},
		{"unknown category falls back to general", Model{Tier: 2, Capabilities: []string{"chat"}}, "astrology", 0.85},
	}
	for _, tt := range tests {
		if got := tt.model.Capability(tt.category); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("%s: %v, want %v", tt.desc, got, tt.want)
		}
	}
}

func TestParseRejectsBadCatalogs(t *testing.T) {
	good := `{"id":"m","provider":"groq","family":"x","context_window":8192,"max_output_tokens":1,"input_price_per_mtok":0,"output_price_per_mtok":0,"capabilities":["chat"],"tier":3}`
	tests := []struct {
		desc, body, want string
	}{
		{"duplicate id", `{"version":1,"models":[` + good + `,` + good + `]}`, "listed twice"},
		{"a provider name that is not one", `{"version":1,"models":[` + strings.Replace(good, "groq", "Acme Corp", 1) + `]}`, "is not a name"},
		{"bad tier", `{"version":1,"models":[` + strings.Replace(good, `"tier":3`, `"tier":4`, 1) + `]}`, "tier"},
		{"unknown capability", `{"version":1,"models":[` + strings.Replace(good, `"chat"`, `"telepathy"`, 1) + `]}`, "unknown capability"},
		{"zero context", `{"version":1,"models":[` + strings.Replace(good, "8192", "0", 1) + `]}`, "context_window"},
		{"unknown field", `{"version":1,"models":[],"extra":1}`, "unknown field"},
	}
	for _, tt := range tests {
		if _, err := Parse([]byte(tt.body)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to mention %q", tt.desc, err, tt.want)
		}
	}
}

func TestWithAndOnly(t *testing.T) {
	cat, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	local := Model{ID: "qwen2.5-7b", Provider: "local", ContextWindow: 32768, Tier: 2, Capabilities: []string{"chat"}}
	more, err := cat.With(local)
	if err != nil || more.Len() != cat.Len()+1 || !slices.Contains(more.ProviderNames(), "local") {
		t.Fatalf("with: %v, %d models, providers %v", err, more.Len(), more.ProviderNames())
	}
	only, err := more.Only(map[string]bool{"local": true, "groq": true})
	if err != nil || len(only.ProviderNames()) != 2 {
		t.Fatalf("only: %v, providers %v", err, only.ProviderNames())
	}
	if _, err := more.With(Model{ID: "x", Provider: "local"}); err == nil {
		t.Fatal("an invalid model was added")
	}
}

func TestFamilyOf(t *testing.T) {
	tests := []struct{ desc, id, want string }{
		{"a dated snapshot of a catalog model", "o1-mini-2024-09-12", "o-series"},
		{"a snapshot whose name is no family's word", "chatgpt-4o-latest-24-09-07", "gpt"},
		{"a catalog model's own name, with a vendor", "OpenAI/O1-Preview", "o-series"},
		{"a word of the id names the family", "Meta-Llama-3_1-70B-Instruct", "llama"},
		{"the vendor part", "acme/rocket-2", "acme"},
		{"a family of its own", "rocket-2", "rocket-2"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := FamilyOf(tt.id); got != tt.want {
				t.Fatalf("FamilyOf(%q) = %q, want %q", tt.id, got, tt.want)
			}
		})
	}
}

func TestFamilyIn(t *testing.T) {
	known := []string{"gemini", "gemma", "gpt", "llama", "mistral", "mixtral", "qwen", "yi", "o-series"}
	tests := []struct{ desc, name, want string }{
		{"a word of the name", "Meta-Llama-3_1-70B-Instruct", "llama"},
		{"a family followed by its version", "Qwen1.5-72B-Chat", "qwen"},
		{"glued version", "gpt4_0613", "gpt"},
		{"a longer word is another name", "chatgpt-4o-latest", ""},
		{"a word that only starts like a family", "yield-7b", ""},
		{"case does not matter", "MIXTRAL-8x7B", "mixtral"},
		{"no family", "o1-mini-2024-09-12", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := FamilyIn(tt.name, known); got != tt.want {
				t.Fatalf("FamilyIn(%q) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
	if f, err := Embedded(); err != nil || !slices.Contains(f.Families(), "llama") {
		t.Fatalf("the embedded catalog's families lack llama (%v)", err)
	}
}
