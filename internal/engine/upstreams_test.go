package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
)

func TestProvidersWithoutTheirKeysRefuseToStart(t *testing.T) {
	dir := t.TempDir()
	open, missing := filepath.Join(dir, "open"), filepath.Join(dir, "missing")
	os.WriteFile(open, []byte("GROQ_API_KEY=gsk-1234\n"), 0o644)
	tests := []struct {
		desc    string
		secrets string
		want    string
	}{
		{"a secrets file others can read", open, "readable by others"},
		{"a secrets file that is not there", missing, "no such file"},
		{"a key set nowhere", "", "GROQ_API_KEY is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Setenv("GROQ_API_KEY", "")
			cfg := config.Default()
			cfg.SecretsFile = tt.secrets
			cfg.Providers = map[string]config.Provider{"groq": {}}
			_, err := New(Options{Config: cfg, Log: zap.NewNop()})
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "gsk-1234") {
				t.Fatalf("start-up error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestOnlyConfiguredProvidersAnswer(t *testing.T) {
	t.Setenv("GROQ_API_KEY", "gsk-test")
	tests := []struct {
		desc      string
		sim       bool
		providers []string
	}{
		{"groq alone", false, []string{"groq"}},
		{"groq beside the simulated provider", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			e := newEngine(t, 1, func(c *config.Config) {
				c.Providers = map[string]config.Provider{"groq": {}}
				c.Sim.Enabled = tt.sim
			})
			names := e.Catalog().ProviderNames()
			if tt.providers != nil && strings.Join(names, ",") != strings.Join(tt.providers, ",") {
				t.Fatalf("providers %v, want %v", names, tt.providers)
			}
			if tt.sim && (e.Sim == nil || len(names) < 2) {
				t.Fatalf("sim.enabled with groq: providers %v", names)
			}
			for _, p := range e.LiveProviders() {
				real := p.Name == "groq"
				if real != (p.Kind == "openai") || p.Models == 0 || real != (p.KeyFrom == "environment") {
					t.Fatalf("live %+v", p)
				}
			}
		})
	}
}
