package providers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

func TestAdaptersListTheirModels(t *testing.T) {
	listed := []providertest.Model{
		{ID: "alpha", Context: 131072, MaxOutput: 8192},
		{ID: "beta"},
		{ID: "text-embedding-3-small"},
		{ID: "whisper-large-v3"},
		{ID: "gamma", Context: 32768},
	}
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, nil)
			defer s.Close()
			s.SetModels(listed...)
			l, err := a.backend.(Lister).ListModels(context.Background(), s.URL, testKey)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range l.Models {
				ids = append(ids, m.ID)
			}
			if strings.Join(ids, ",") != "alpha,beta,gamma" || l.Rejected[NotChat] != 2 {
				t.Fatalf("listed %v, rejected %v", ids, l.Rejected)
			}
			if l.Models[0].ContextWindow != 131072 || l.Models[0].MaxOutputTokens != 8192 {
				t.Fatalf("alpha %+v", l.Models[0])
			}
			pages := map[string]int{providertest.OpenAI: 1, providertest.Anthropic: 3, providertest.Gemini: 3}[a.format]
			if got := len(s.Listings()); got != pages {
				t.Fatalf("%d pages read, want %d", got, pages)
			}
			for _, r := range s.Listings() {
				if strings.Contains(r.Path+"?"+r.Query, testKey.Reveal()) {
					t.Fatalf("the key is in the URL %s?%s", r.Path, r.Query)
				}
			}
		})
	}
}

func TestOpenRouterListsPricesAndModalities(t *testing.T) {
	s := providertest.New(providertest.OpenAI, nil)
	defer s.Close()
	s.SetModels(providertest.Model{ID: "vendor/chat", Context: 200000, PricePrompt: "0.000003", PriceCompletion: "0.000015", Output: []string{"text"}},
		providertest.Model{ID: "vendor/painter", PricePrompt: "0", PriceCompletion: "0", Output: []string{"image"}})
	l, err := NewOpenAI(NewHTTPClient(), "openrouter").ListModels(context.Background(), s.URL, testKey)
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Model{ID: "vendor/chat", ContextWindow: 200000, InputPricePerMTok: 3 * money.PerMillionDollar, OutputPricePerMTok: 15 * money.PerMillionDollar}
	if len(l.Models) != 1 || l.Models[0].ID != want.ID || l.Models[0].ContextWindow != want.ContextWindow ||
		l.Models[0].InputPricePerMTok != want.InputPricePerMTok || l.Models[0].OutputPricePerMTok != want.OutputPricePerMTok || l.Models[0].Unpriced || l.Rejected[NoTextOutput] != 1 {
		t.Fatalf("listed %+v, rejected %v", l.Models, l.Rejected)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestGeminiListsOnlyWhatGeneratesContent(t *testing.T) {
	s := providertest.New(providertest.Gemini, nil)
	defer s.Close()
	s.SetModels(providertest.Model{ID: "gemini-2.5-flash", Context: 1048576}, providertest.Model{ID: "aqa", Methods: []string{"generateAnswer"}})
	l, err := NewGemini(NewHTTPClient(), "gemini").ListModels(context.Background(), s.URL, testKey)
	if err != nil || len(l.Models) != 1 || l.Models[0].ID != "gemini-2.5-flash" || l.Rejected[NoGenerate] != 1 {
		t.Fatalf("listed %+v, rejected %v, %v", l.Models, l.Rejected, err)
	}
}

func TestAListingThatFailsIsClassified(t *testing.T) {
	echo := "Incorrect API key provided: " + testKey.Reveal()
	for _, a := range adapters() {
		t.Run(a.provider, func(t *testing.T) {
			s := providertest.New(a.format, nil)
			defer s.Close()
			switch a.format {
			case providertest.OpenAI:
				s.FailListing(providertest.Response{Status: 401, Body: providertest.OpenAIError(echo, "invalid_request_error", "invalid_api_key")})
			case providertest.Anthropic:
				s.FailListing(providertest.Response{Status: 401, Body: providertest.AnthropicError("authentication_error", echo)})
			case providertest.Gemini:
				s.FailListing(providertest.Response{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT", echo, `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}`)})
			}
			_, err := a.backend.(Lister).ListModels(context.Background(), s.URL, testKey)
			var e *resilience.Error
			if !errors.As(err, &e) || e.Kind != resilience.InvalidAPIKey || strings.Contains(err.Error(), testKey.Reveal()) {
				t.Fatalf("error %v", err)
			}
			s.FailListing(providertest.Response{Body: "<html>gateway</html>"})
			if _, err := a.backend.(Lister).ListModels(context.Background(), s.URL, testKey); err == nil {
				t.Fatal("a page that is no list was read as one")
			}
		})
	}
}
