package catalog

import (
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/money"
)

func TestReconcile(t *testing.T) {
	curated := []Model{
		{ID: "kept", Provider: "local", ContextWindow: 32768, InputPricePerMTok: 1, Capabilities: []string{"chat", "code"}, Tier: 1},
		{ID: "gone", Provider: "local", ContextWindow: 8192, Tier: 2},
		{ID: "renamed", UpstreamID: "vendor/renamed", Provider: "local", ContextWindow: 8192, Tier: 2},
		{ID: "embed", Provider: "local", ContextWindow: 8192, Tier: 3, Capabilities: []string{Embeddings}},
		{ID: "shared-id", Provider: "other", ContextWindow: 8192, Tier: 2},
		{ID: "elsewhere", Provider: "other", ContextWindow: 8192, Tier: 2},
	}
	tests := []struct {
		desc           string
		listed         []Model
		joined, left   string
		models         string // the local provider's, after
		err            string
		sameCatalog    bool
		checkCuratedOf string
		// checkDated is a model the listing dated (1767225600), its curated fields kept.
		checkDated string
	}{
		{desc: "a listing with nothing new changes nothing", listed: []Model{{ID: "kept"}, {ID: "gone"}, {ID: "vendor/renamed"}}, models: "embed,gone,kept,renamed", sameCatalog: true},
		{desc: "a new model joins, a vanished one leaves", listed: []Model{{ID: "kept", ContextWindow: 4096}, {ID: "vendor/renamed"}, {ID: "fresh", ContextWindow: 65536}},
			joined: "fresh", left: "gone", models: "embed,fresh,kept,renamed", checkCuratedOf: "kept"},
		{desc: "models match on the id sent upstream", listed: []Model{{ID: "renamed"}}, joined: "renamed", left: "gone,kept,renamed", models: "embed,renamed"},
		// A listing names chat models only: an embeddings model, which the configuration names, stays.
		{desc: "an id another provider has joins under the provider's name", listed: []Model{{ID: "kept"}, {ID: "gone"}, {ID: "vendor/renamed"}, {ID: "shared-id"}},
			joined: "local/shared-id", models: "embed,gone,kept,local/shared-id,renamed"},
		{desc: "an empty listing changes nothing", listed: nil, err: "listed no model", sameCatalog: true, models: "embed,gone,kept,renamed"},
		{desc: "a listing dates a model it kept, and nothing else of it", listed: []Model{{ID: "kept", Created: 1767225600, ContextWindow: 4096}, {ID: "gone"},
			{ID: "vendor/renamed"}}, models: "embed,gone,kept,renamed", checkDated: "kept"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c, err := New(curated)
			if err != nil {
				t.Fatal(err)
			}
			next, ch, err := Reconcile(c, "local", tt.listed)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || next != c {
					t.Fatalf("error %v, want %q and the catalog unchanged", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(ch.Joined, ",") != tt.joined || strings.Join(ch.Left, ",") != tt.left {
				t.Fatalf("joined %v, left %v", ch.Joined, ch.Left)
			}
			if (next == c) != tt.sameCatalog {
				t.Fatalf("catalog replaced: %v", next != c)
			}
			var ids []string
			for _, m := range next.All() {
				if m.Provider == "local" {
					ids = append(ids, m.ID)
				}
			}
			slices.Sort(ids)
			if strings.Join(ids, ",") != tt.models {
				t.Fatalf("local models %v, want %s", ids, tt.models)
			}
			if _, ok := next.Get("elsewhere"); !ok {
				t.Fatal("another provider's model left")
			}
			if tt.checkDated != "" {
				if m, _ := next.Get(tt.checkDated); m.Created != 1767225600 || m.ContextWindow != 32768 {
					t.Fatalf("dated %+v", m)
				}
			}
			if tt.checkCuratedOf != "" {
				if m, _ := next.Get(tt.checkCuratedOf); m.ContextWindow != 32768 || m.Tier != 1 || !m.Has("code") {
					t.Fatalf("curated %+v overwritten by the listing", m)
				}
				if m, _ := next.Get("fresh"); m.ContextWindow != 65536 || m.Tier != 2 || !m.Has("chat") || m.Provider != "local" {
					t.Fatalf("a joined model %+v", m)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	m := Defaults(Model{ID: "meta-llama/llama-4", Provider: "openrouter"})
	if m.ContextWindow != DefaultContext || m.Tier != 2 || !m.Has("chat") || m.Family != "llama" {
		t.Fatalf("%+v", m)
	}
	// A family the embedded catalog does not know: the vendor, else the model's own.
	if a, b := Defaults(Model{ID: "acme/rocket-2", Provider: "openrouter"}), Defaults(Model{ID: "rocket-2", Provider: "local"}); a.Family != "acme" || b.Family != "rocket-2" {
		t.Fatalf("families %q and %q, want acme and rocket-2", a.Family, b.Family)
	}
	if err := validate(m); err != nil {
		t.Fatal(err)
	}
}

func TestADiscoveredModelTakesTheCatalogsPrice(t *testing.T) {
	known, err := New([]Model{{ID: "openai/gpt-4o-mini", Provider: "openrouter", ContextWindow: 128000, InputPricePerMTok: 150_000_000,
		OutputPricePerMTok: 600_000_000, Capabilities: []string{"chat"}, Tier: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		desc   string
		listed Model
		priced bool
		in     money.Price
	}{
		{"known by its id", Model{ID: "openai/gpt-4o-mini", Unpriced: true}, true, 150_000_000},
		{"known by its name without the vendor", Model{ID: "gpt-4o-mini", Unpriced: true}, true, 150_000_000},
		{"listed with a price of its own", Model{ID: "gpt-4o-mini", InputPricePerMTok: 7}, true, 7},
		{"unknown", Model{ID: "vendor/new-model", Unpriced: true}, false, 0},
	} {
		got := PricedBy(known, c.listed)
		if got.Unpriced == c.priced || got.InputPricePerMTok != c.in {
			t.Errorf("%s: %+v", c.desc, got)
		}
	}
}
