package providers

import (
	"fmt"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"net/http"
)

// Wire formats an upstream can speak, and the providers Conclave knows by name (catalog's).
const (
	KindOpenAI    = catalog.KindOpenAI
	KindAnthropic = catalog.KindAnthropic
	KindGemini    = catalog.KindGemini
)

// Named are the providers Conclave knows by name.
var Named = catalog.NamedProviders

// NewAdapter returns the adapter of a wire format for a provider.
func NewAdapter(kind, provider string, client *http.Client) (Backend, error) {
	switch kind {
	case KindOpenAI:
		return NewOpenAI(client, provider), nil
	case KindAnthropic:
		return NewAnthropic(client, provider), nil
	case KindGemini:
		return NewGemini(client, provider), nil
	}
	return nil, fmt.Errorf("unknown provider kind %q (want openai, anthropic or gemini)", kind)
}
