package engine

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// Live is a provider that answers calls: a configured upstream, or the simulated provider.
type Live struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// BaseURL is the configured upstream's address (empty for the simulated provider).
	BaseURL string `json:"base_url,omitempty"`
	Models  int    `json:"models"`
	// KeyFrom says where its key was found: file, environment, or none.
	KeyFrom string `json:"key_from,omitempty"`
}

// upstream is a configured provider with the name of its key.
type upstream struct {
	*providers.Upstream
	keyEnv string
	// discover is how often its model list is read (zero: never).
	discover time.Duration
}

// setupProviders builds the upstreams the configuration turns on and the catalog they serve: the
// catalog's models of the named providers configured, plus the models each configured provider lists.
// With no provider configured, or sim.enabled, the catalog's other models stay, for the simulated
// provider to serve.
func setupProviders(cfg config.Config, base *catalog.Catalog) ([]upstream, *catalog.Catalog, error) {
	if len(cfg.Providers) == 0 {
		return nil, base, nil
	}
	keys := secret.Source{File: cfg.SecretsFile}
	if cfg.SecretsFile != "" {
		if _, err := secret.ReadFile(cfg.SecretsFile); err != nil {
			return nil, nil, err
		}
	}
	client := providers.NewHTTPClient()
	live := map[string]bool{}
	var ups []upstream
	var models []catalog.Model
	for _, name := range sortedNames(cfg.Providers) {
		p, named := cfg.Providers[name], providers.Named[name]
		kind, baseURL, keyEnv := or(p.Kind, named.Kind), or(p.BaseURL, named.BaseURL), or(p.APIKeyEnv, named.KeyEnv)
		var key secret.String
		if keyEnv != "" {
			k, _, err := keys.Lookup(keyEnv)
			if err != nil {
				return nil, nil, fmt.Errorf("providers %s: %w", name, err)
			}
			key = k
		}
		adapter, err := providers.NewAdapter(kind, name, client)
		if err != nil {
			return nil, nil, fmt.Errorf("providers %s: %w", name, err)
		}
		ups = append(ups, upstream{providers.NewUpstream(name, kind, baseURL, adapter, key), keyEnv, p.Discovery()})
		live[name] = true
		for _, m := range p.Models {
			models = append(models, catalogModel(name, m))
		}
	}
	cat := base
	if !cfg.Sim.Enabled {
		var err error
		if cat, err = base.Only(live); err != nil {
			return nil, nil, err
		}
	}
	cat, err := cat.With(models...)
	if err != nil {
		return nil, nil, fmt.Errorf("providers: %w", err)
	}
	return ups, cat, nil
}

// catalogModel is a configured provider's model as the catalog holds it.
func catalogModel(provider string, m config.ProviderModel) catalog.Model {
	tier, caps := m.Tier, m.Capabilities
	if tier == 0 {
		tier = 2
	}
	if len(caps) == 0 {
		caps = []string{"chat"}
	}
	out := catalog.Model{ID: m.ID, Provider: provider, Family: catalog.FamilyOf(m.ID), ContextWindow: m.Context, MaxOutputTokens: m.MaxOutput,
		Capabilities: caps, Tier: tier, Unpriced: m.PriceIn == nil && m.PriceOut == nil}
	if m.PriceIn != nil {
		out.InputPricePerMTok = *m.PriceIn
	}
	if m.PriceOut != nil {
		out.OutputPricePerMTok = *m.PriceOut
	}
	out.CacheReadPricePerMTok, out.CacheWritePricePerMTok = m.PriceCacheRead, m.PriceCacheWrite
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sortedNames(m map[string]config.Provider) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LiveProviders lists the providers that answer, with their models, sorted by name.
func (e *Engine) LiveProviders() []Live {
	count := map[string]int{}
	for _, m := range e.catalog.Load().All() {
		count[m.Provider]++
	}
	var out []Live
	seen := map[string]bool{}
	for _, u := range e.upstreams {
		from := "none"
		if u.keyEnv != "" {
			_, from, _ = secret.Source{File: e.cfg.SecretsFile}.Lookup(u.keyEnv)
		}
		out = append(out, Live{Name: u.Name, Kind: u.Kind, BaseURL: u.BaseURL, Models: count[u.Name], KeyFrom: from})
		seen[u.Name] = true
	}
	if e.Sim != nil {
		for _, p := range e.catalog.Load().ProviderNames() {
			if !seen[p] {
				out = append(out, Live{Name: p, Kind: "simulated", Models: count[p]})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// KeyPollInterval is how often the secrets file is read again for changed keys.
const KeyPollInterval = 10 * time.Second

// watchKeys reads the keys again every interval until ctx ends: a changed key goes to its upstream,
// and its provider actor hears of it (a provider disabled for its key takes calls again).
func (e *Engine) watchKeys(ctx context.Context, interval time.Duration) {
	keys := secret.Source{File: e.cfg.SecretsFile}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, u := range e.upstreams {
			if u.keyEnv == "" {
				continue
			}
			k, _, err := keys.Lookup(u.keyEnv)
			if err != nil {
				e.log.Warn("reading a provider's key failed", zap.String("event", "key_reload_failed"), zap.String("provider", u.Name), zap.Error(err))
				continue
			}
			if u.SetKey(k) {
				e.log.Info("provider key changed", zap.String("event", "key_changed"), zap.String("provider", u.Name))
				if ref := e.deps.Dir.Provider(u.Name); ref != nil {
					e.system.Root.Send(ref.PID, &messages.KeyChanged{})
				}
			}
		}
	}
}
