package resilience

import "time"

// providerBreakers are the specification's breaker parameters per provider.
var providerBreakers = map[string]Settings{
	"openrouter": {Threshold: 5, Window: time.Minute, OpenFor: 30 * time.Second},
	"anthropic":  {Threshold: 3, Window: time.Minute, OpenFor: 60 * time.Second},
	"gemini":     {Threshold: 5, Window: time.Minute, OpenFor: 30 * time.Second},
	"groq":       {Threshold: 5, Window: time.Minute, OpenFor: 15 * time.Second},
	"cerebras":   {Threshold: 5, Window: time.Minute, OpenFor: 30 * time.Second},
	"deepseek":   {Threshold: 5, Window: time.Minute, OpenFor: 30 * time.Second},
}

// ProviderBreakerSettings returns the default breaker settings for a provider, named after it. Providers
// without their own row (the local sim and replay providers) get the zero-value defaults.
func ProviderBreakerSettings(provider string) Settings {
	s := providerBreakers[provider]
	s.Name = provider
	return s.withDefaults()
}

// ModelBreakerSettings returns the default per-model breaker of a provider's models, named after the
// model: outlier ejection as Envoy does it for hosts, 5 consecutive faults of the model eject it for
// 30 s, then one probe call decides.
func ModelBreakerSettings(model string) Settings {
	return Settings{Name: model, Threshold: 5, Consecutive: true, OpenFor: 30 * time.Second}.withDefaults()
}

// WorkerBreakerSettings returns the breaker settings for a worker host: 3 faults (timeouts, refused or
// dropped connections) within 60 s take the host out of assignment for 30 s.
func WorkerBreakerSettings(worker string) Settings {
	return Settings{Name: worker, Threshold: 3, Window: time.Minute, OpenFor: 30 * time.Second}.withDefaults()
}
