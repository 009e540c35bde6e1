package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad loads any configuration file: it is refused with an error, or it loads into a configuration
// that passes its own validation. Never a panic.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		`{"listen": "127.0.0.1:5000", "workers": 4}`,
		`{"listen": "0.0.0.0:1", "api_token": "short"}`,
		`{"breakers": {"groq": {"threshold": 100000000}}, "rate_limits": {"groq": {"requests_per_minute": -1}}}`,
		`{"remote": {"listen": "10.0.0.1:7001"}, "debug_listen": ":6060", "arms_refresh_seconds": 0}`,
		`{"providers": {"x": {"kind": "openai", "base_url": "http://[::1]:80", "models": ["a"]}}}`,
		`{"listne": 1}`, `[]`, `{"sim": {"latency_scale": 1e308}}`,
		`{"rate_limits": {"groq": {"concurrency": 2}, "max_queue_seconds": 2.5}}`, `{"rate_limits": {"max_queue_seconds": -0}}`, `{"rate_limits": null}`,
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(dir, "c.json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load([]string{"--config", path}, func(string) string { return "" })
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("a loaded configuration fails its validation: %v", err)
		}
	})
}
