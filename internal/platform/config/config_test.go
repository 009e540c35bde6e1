package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
		{"public address with a token", "0.0.0.0:5000", "t0k3n-0123456789ab", true},
		{"a token too short to resist guessing", "0.0.0.0:5000", "t0k3n", false},
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

func TestARemoteListenerBeyondLoopbackNeedsATokenAndTLS(t *testing.T) {
	const token = "t0k3n-0123456789ab"
	tls := []string{"--remote-tls-cert", "node.pem", "--remote-tls-key", "node-key.pem"}
	for _, tc := range []struct {
		desc  string
		args  []string
		env   map[string]string
		file  string
		want  string // in the error; empty when the configuration loads
		naked []string
	}{
		{desc: "loopback, without either", args: []string{"--remote", "127.0.0.1:7001"}},
		{desc: "beyond loopback, with both", args: append([]string{"--remote", "0.0.0.0:7001"}, tls...), env: map[string]string{"CONCLAVE_API_TOKEN": token},
			naked: []string{"client_certificates"}},
		{desc: "beyond loopback, without TLS", args: []string{"--remote", "0.0.0.0:7001"}, env: map[string]string{"CONCLAVE_API_TOKEN": token}, want: "remote.tls_cert"},
		{desc: "beyond loopback, without a token", args: append([]string{"--remote", "10.0.0.1:7001"}, tls...), want: "CONCLAVE_API_TOKEN"},
		{desc: "beyond loopback, insecure by the file", file: `{"remote": {"listen": "0.0.0.0:7001", "insecure": true}}`, naked: []string{"token", "tls"}},
		{desc: "beyond loopback, insecure by the environment", env: map[string]string{"CONCLAVE_REMOTE": "0.0.0.0:7001", "CONCLAVE_REMOTE_INSECURE": "true",
			"CONCLAVE_API_TOKEN": token}, naked: []string{"tls"}},
		{desc: "TLS from the environment", env: map[string]string{"CONCLAVE_REMOTE": "0.0.0.0:7001", "CONCLAVE_API_TOKEN": token,
			"CONCLAVE_REMOTE_TLS_CERT": "a.pem", "CONCLAVE_REMOTE_TLS_KEY": "a-key.pem", "CONCLAVE_REMOTE_TLS_CA": "ca.pem"}},
		{desc: "TLS from the file", file: `{"remote": {"listen": "0.0.0.0:7001", "tls_cert": "a.pem", "tls_key": "a-key.pem", "tls_ca": "ca.pem"}}`,
			env: map[string]string{"CONCLAVE_API_TOKEN": token}},
		{desc: "a certificate without its key", args: []string{"--remote", "127.0.0.1:7001", "--remote-tls-cert", "a.pem"}, want: "go together"},
		{desc: "a CA without a certificate", args: []string{"--remote", "127.0.0.1:7001", "--remote-tls-ca", "ca.pem"}, want: "mutual TLS"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range tc.env {
				e[k] = v
			}
			if tc.file != "" {
				path := filepath.Join(t.TempDir(), "conclave.json")
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				e["CONCLAVE_CONFIG"] = path
			}
			cfg, err := Load(tc.args, env(e))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v: want an error naming %s", err, tc.want)
			case err == nil && !slices.Equal(cfg.Remote.Exposed(cfg.APIToken.Set()), tc.naked):
				t.Fatalf("exposed %v: want %v", cfg.Remote.Exposed(cfg.APIToken.Set()), tc.naked)
			}
		})
	}
}

func TestBadValuesAreReported(t *testing.T) {
	_, err := Load([]string{"--workers", "0", "--seed", "x"}, env(nil))
	if err == nil || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("err %v", err)
	}
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(`{"listne":"x"}`), 0o600)
	if _, err := Load([]string{"--config", path}, env(nil)); err == nil || !strings.Contains(err.Error(), `unknown key "listne"`) {
		t.Fatalf("typo in the config file accepted: %v", err)
	}
}

func TestValuesAreBounded(t *testing.T) {
	tests := []struct{ desc, file, says string }{
		{"a breaker threshold that would allocate gigabytes", `{"breakers": {"groq": {"threshold": 100000000}}}`, "threshold"},
		{"a negative window", `{"breakers": {"groq": {"window_seconds": -1}}}`, "window_seconds"},
		{"a model breaker out of bounds", `{"breakers": {"groq": {"model_threshold": 5000}}}`, "model_threshold"},
		{"an absurd timeout floor", `{"breakers": {"groq": {"timeout_floor_seconds": 1e9}}}`, "timeout_floor_seconds"},
		{"a rate limit beyond reason", `{"rate_limits": {"groq": {"concurrency": 1000000000}}}`, "concurrency"},
		{"too many workers", `{"workers": 100000}`, "workers"},
		{"a huge body limit", `{"max_body_bytes": 100000000000}`, "max_body_bytes"},
		{"a fault rate above one", `{"sim": {"faults": {"server_error_rate": 2}}}`, "server_error_rate"},
		{"retry rounds beyond reason", `{"retry": {"rounds": 1000}}`, "rounds"},
		{"an in-flight budget below one body", `{"max_inflight_bytes": 2048}`, "max_inflight_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.json")
			os.WriteFile(path, []byte(tt.file), 0o600)
			if _, err := Load([]string{"--config", path}, env(nil)); err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("err %v, want one about %s", err, tt.says)
			}
		})
	}
}

func TestNodeID(t *testing.T) {
	host, _ := os.Hostname()
	cfg, err := Load(nil, env(nil))
	if err != nil || cfg.NodeID != host {
		t.Fatalf("node id %q, want the host name %q (%v)", cfg.NodeID, host, err)
	}
	cfg, _ = Load(nil, env(map[string]string{"CONCLAVE_NODE_ID": "ctl-2"}))
	if cfg.NodeID != "ctl-2" {
		t.Fatalf("node id %q from the environment", cfg.NodeID)
	}
	cfg, _ = Load([]string{"--node-id", "ctl-3"}, env(map[string]string{"CONCLAVE_NODE_ID": "ctl-2"}))
	if cfg.NodeID != "ctl-3" {
		t.Fatalf("node id %q from the flag", cfg.NodeID)
	}
}

func TestProvidersContract(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(`{"providers": {
   "openrouter": {"api_key_env": "OPENROUTER_API_KEY"},
   "local":      {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "api_key_env": "LOCAL_KEY",
                  "models": [{"id": "qwen2.5-7b", "context": 32768, "price_in": 0, "price_out": 0}],
                  "breaker": {"threshold": 5, "window_seconds": 60, "open_seconds": 30},
                  "rate_limit": {"requests_per_minute": 600, "tokens_per_minute": 1000000, "concurrency": 8}}}}`), 0o600)
	cfg, err := Load([]string{"--config", path}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	local := cfg.Providers["local"]
	if local.Kind != "openai" || local.Models[0].Context != 32768 || local.Breaker.Threshold != 5 || local.RateLimit.Concurrency != 8 ||
		local.Discovery() != DefaultDiscoverySeconds*time.Second {
		t.Fatalf("local %+v", local)
	}
	tests := []struct{ desc, providers, says string }{
		{"an unknown kind", `{"x": {"kind": "soap", "base_url": "http://h/v1", "models": [{"id": "m", "context": 1}]}}`, "kind"},
		{"no base URL", `{"x": {"kind": "openai", "models": [{"id": "m", "context": 1}]}}`, "base_url is required"},
		{"a key in the URL", `{"x": {"kind": "openai", "base_url": "http://user:sk@h/v1", "models": [{"id": "m", "context": 1}]}}`, "credentials"},
		{"a key in the query", `{"x": {"kind": "openai", "base_url": "http://h/v1?key=sk", "models": [{"id": "m", "context": 1}]}}`, "query"},
		{"no models of its own, and no discovery", `{"x": {"kind": "openai", "base_url": "http://h/v1", "discovery_interval_seconds": 0}}`, "needs its models"},
		{"discovery too often", `{"groq": {"discovery_interval_seconds": 1}}`, "discovery_interval_seconds"},
		{"discovery backwards", `{"groq": {"discovery_interval_seconds": -60}}`, "discovery_interval_seconds"},
		{"a model twice", `{"x": {"kind": "openai", "base_url": "http://h/v1", "models": [{"id": "m", "context": 1}, {"id": "m", "context": 1}]}}`, "twice"},
		{"a model without a context", `{"x": {"kind": "openai", "base_url": "http://h/v1", "models": [{"id": "m"}]}}`, "context"},
		{"a reserved name", `{"sim": {"kind": "openai", "base_url": "http://h/v1", "models": [{"id": "m", "context": 1}]}}`, "reserved"},
		{"a bad key variable", `{"groq": {"api_key_env": "not a name"}}`, "api_key_env"},
		{"a breaker out of bounds", `{"groq": {"breaker": {"threshold": 100000000}}}`, "threshold"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			os.WriteFile(path, []byte(`{"providers": `+tt.providers+`}`), 0o600)
			if _, err := Load([]string{"--config", path}, env(nil)); err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("err %v, want one about %q", err, tt.says)
			}
		})
	}
}
