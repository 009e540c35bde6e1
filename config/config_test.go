package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultsRunTheEmbeddedDefault(t *testing.T) {
	cfg, err := Load(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:5000" || cfg.Workers != 8 || cfg.APIToken.Set() || cfg.Policy != "thompson" {
		t.Fatalf("defaults %+v", cfg)
	}
}

func TestPrecedenceFileEnvFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conclave.json")
	if err := os.WriteFile(path, []byte(`{"listen":"127.0.0.1:6000","workers":3,"seed":9,"log_level":"debug"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"--listen", "127.0.0.1:7000"}, env(map[string]string{
		"CONCLAVE_CONFIG": path, "CONCLAVE_LISTEN": "127.0.0.1:6500", "CONCLAVE_WORKERS": "5", "CONCLAVE_SIM_LATENCY_SCALE": "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.Workers != 5 || cfg.Seed != 9 || cfg.LogLevel != "debug" || cfg.Sim.LatencyScale != 0 {
		t.Fatalf("precedence wrong: %+v", cfg)
	}
}

func TestNonLoopbackNeedsAToken(t *testing.T) {
	tests := []struct {
		desc   string
		listen string
		token  string
		ok     bool
	}{
		{"loopback v4", "127.0.0.1:5000", "", true},
		{"loopback v6", "[::1]:5000", "", true},
		{"localhost", "localhost:5000", "", true},
		{"all interfaces without a token", ":5000", "", false},
		{"public address without a token", "10.1.2.3:5000", "", false},
		{"public address with a token", "0.0.0.0:5000", "t0k3n", true},
	}
	for _, tt := range tests {
		_, err := Load([]string{"--listen", tt.listen}, env(map[string]string{"CONCLAVE_API_TOKEN": tt.token}))
		if (err == nil) != tt.ok {
			t.Errorf("%s: err %v", tt.desc, err)
		}
		if err != nil && !strings.Contains(err.Error(), "CONCLAVE_API_TOKEN") {
			t.Errorf("%s: the error does not say how to fix it: %v", tt.desc, err)
		}
	}
}

func TestBadValuesAreReported(t *testing.T) {
	_, err := Load([]string{"--workers", "0", "--seed", "x"}, env(nil))
	if err == nil || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("err %v", err)
	}
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(`{"listne":"x"}`), 0o600)
	if _, err := Load([]string{"--config", path}, env(nil)); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("typo in the config file accepted: %v", err)
	}
}
