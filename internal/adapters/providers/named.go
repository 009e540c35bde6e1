package providers

import (
	"fmt"
	"net/http"
)

// Wire formats an upstream can speak.
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindGemini    = "gemini"
)

// Defaults are what Conclave knows of a named provider: its wire format, base URL and the environment
// variable of its key.
type Defaults struct {
	Kind    string
	BaseURL string
	KeyEnv  string
}

// Named are the providers Conclave knows by name.
var Named = map[string]Defaults{
	"openrouter": {KindOpenAI, "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"},
	"groq":       {KindOpenAI, "https://api.groq.com/openai/v1", "GROQ_API_KEY"},
	"cerebras":   {KindOpenAI, "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"},
	"deepseek":   {KindOpenAI, "https://api.deepseek.com", "DEEPSEEK_API_KEY"},
	"anthropic":  {KindAnthropic, "https://api.anthropic.com", "ANTHROPIC_API_KEY"},
	"gemini":     {KindGemini, "https://generativelanguage.googleapis.com", "GEMINI_API_KEY"},
}

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
