package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad loads any configuration file, as JSON and as YAML: it is refused with an error, or it loads
// into a configuration that passes its own validation. Never a panic, nor a hang on aliases.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		`{"listen": "127.0.0.1:5000", "workers": 4}`,
		`{"listen": "0.0.0.0:1", "api_token": "short"}`,
		`{"breakers": {"groq": {"threshold": 100000000}}, "rate_limits": {"groq": {"requests_per_minute": -1}}}`,
		`{"remote": {"listen": "10.0.0.1:7001"}, "debug_listen": ":6060", "arms_refresh_seconds": 0}`,
		`{"providers": {"x": {"kind": "openai", "base_url": "http://[::1]:80", "models": ["a"]}}}`,
		`{"listne": 1}`, `[]`, `{"sim": {"latency_scale": 1e308}}`,
		`{"rate_limits": {"groq": {"concurrency": 2}, "max_queue_seconds": 2.5}}`, `{"rate_limits": {"max_queue_seconds": -0}}`, `{"rate_limits": null}`,
		"listen: 127.0.0.1:5000\nworkers: 4\n", "rate_limits:\n  max_queue_seconds: 2.5\n  groq: {concurrency: 2}\n",
		"breakers:\n  groq: &b {threshold: 5}\n  cerebras:\n    <<: *b\n    open_seconds: 10\n",
		"providers:\n  local:\n    kind: openai\n    base_url: http://127.0.0.1:8000/v1\n    models:\n      - {id: m, context: 8192}\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "1: x\n", "node_id: 2024-01-01\n", "sim: !!binary aGk=\n", "---\n---\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, name := range []string{"c.json", "c.yaml"} {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load([]string{"--config", path}, func(string) string { return "" })
			if err != nil {
				continue
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("a loaded %s configuration fails its validation: %v", name, err)
			}
		}
	})
}
