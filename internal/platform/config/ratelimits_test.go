package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
)

func TestRateLimitsTakeMaxQueueSecondsBesideTheProviders(t *testing.T) {
	groq := ratelimit.Limits{RequestsPerMinute: 10, Concurrency: 2}
	tests := []struct {
		desc, file string
		// groq is groq's limits after loading; queue is max_queue_seconds.
		groq  ratelimit.Limits
		queue float64
		// providers is how many providers have limits of their own.
		providers int
	}{
		{"no rate_limits: the defaults", `{}`, ratelimit.Defaults["groq"], 5, len(ratelimit.Defaults)},
		{"providers only, as files were written before", `{"rate_limits": {"groq": {"requests_per_minute": 10, "concurrency": 2}}}`,
			groq, 5, len(ratelimit.Defaults)},
		{"max_queue_seconds beside the providers", `{"rate_limits": {"groq": {"requests_per_minute": 10, "concurrency": 2}, "max_queue_seconds": 2.5}}`,
			groq, 2.5, len(ratelimit.Defaults)},
		{"max_queue_seconds alone keeps every provider's defaults", `{"rate_limits": {"max_queue_seconds": 30}}`,
			ratelimit.Defaults["groq"], 30, len(ratelimit.Defaults)},
		{"a provider of its own joins the defaults", `{"rate_limits": {"local": {"concurrency": 4}}}`,
			ratelimit.Defaults["groq"], 5, len(ratelimit.Defaults) + 1},
		{"an entry replaces a provider's limits whole", `{"rate_limits": {"groq": {"concurrency": 2}}}`,
			ratelimit.Limits{Concurrency: 2}, 5, len(ratelimit.Defaults)},
		{"null lifts every provider's limits, as it did", `{"rate_limits": null}`, ratelimit.Limits{}, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.json")
			os.WriteFile(path, []byte(tt.file), 0o600)
			cfg, err := Load([]string{"--config", path}, env(nil))
			if err != nil {
				t.Fatal(err)
			}
			rl := cfg.RateLimits
			if rl.Providers["groq"] != tt.groq || rl.MaxQueueSeconds != tt.queue || len(rl.Providers) != tt.providers {
				t.Fatalf("rate limits %+v", rl)
			}
			if cfg.MaxQueue() != time.Duration(tt.queue*float64(time.Second)) {
				t.Fatalf("max queue %v", cfg.MaxQueue())
			}
		})
	}
	Default().RateLimits.Providers["groq"] = ratelimit.Limits{} // each default is a copy
	if ratelimit.Defaults["groq"] == (ratelimit.Limits{}) {
		t.Fatal("changing a configuration changed the shipped defaults")
	}
}

func TestRateLimitsAreChecked(t *testing.T) {
	tests := []struct{ desc, file, says string }{
		{"no wait at all", `{"rate_limits": {"max_queue_seconds": 0}}`, "max_queue_seconds"},
		{"a negative wait", `{"rate_limits": {"max_queue_seconds": -1}}`, "max_queue_seconds"},
		{"a wait that holds requests", `{"rate_limits": {"max_queue_seconds": 601}}`, "max_queue_seconds"},
		{"a wait too small to mean anything", `{"rate_limits": {"max_queue_seconds": 1e-300}}`, "max_queue_seconds"},
		{"a wait as text", `{"rate_limits": {"max_queue_seconds": "5"}}`, "max_queue_seconds"},
		{"a misspelt limit", `{"rate_limits": {"groq": {"requests_per_minit": 10}}}`, `unknown key "rate_limits.groq.requests_per_minit"`},
		{"a provider that is not an object", `{"rate_limits": {"groq": 10}}`, "groq"},
		{"rate_limits that is not an object", `{"rate_limits": [1]}`, "rate_limits"},
		{"a provider named like the key", `{"providers": {"max_queue_seconds": {"kind": "openai", "base_url": "http://h/v1", "models": [{"id": "m", "context": 1}]}}}`,
			"reserved"},
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

func TestMaxQueueSecondsFromTheEnvironmentAndTheFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(`{"rate_limits": {"max_queue_seconds": 7}}`), 0o600)
	tests := []struct {
		desc string
		args []string
		env  map[string]string
		want float64
	}{
		{"the file", []string{"--config", path}, nil, 7},
		{"the environment beats the file", []string{"--config", path}, map[string]string{"CONCLAVE_MAX_QUEUE_SECONDS": "2"}, 2},
		{"the flag beats the environment", []string{"--config", path, "--max-queue-seconds", "0.5"}, map[string]string{"CONCLAVE_MAX_QUEUE_SECONDS": "2"}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			cfg, err := Load(tt.args, env(tt.env))
			if err != nil || cfg.RateLimits.MaxQueueSeconds != tt.want {
				t.Fatalf("max_queue_seconds %g (%v), want %g", cfg.RateLimits.MaxQueueSeconds, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"x", "0", "NaN", "Inf", "1000"} {
		if _, err := Load([]string{"--max-queue-seconds", bad}, env(nil)); err == nil || !strings.Contains(err.Error(), "max") {
			t.Errorf("--max-queue-seconds %s: err %v", bad, err)
		}
	}
}

func TestRateLimitsRoundTrip(t *testing.T) {
	in := RateLimits{Providers: map[string]ratelimit.Limits{"groq": {RequestsPerMinute: 30, TokensPerMinute: 30_000, Concurrency: 5}, "local": {}},
		MaxQueueSeconds: 2.5}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"groq":{"requests_per_minute":30,"tokens_per_minute":30000,"concurrency":5},"local":{"requests_per_minute":0,"tokens_per_minute":0,"concurrency":0},"max_queue_seconds":2.5}`; string(raw) != want {
		t.Fatalf("encoded %s, want %s", raw, want)
	}
	var out RateLimits
	if err := json.Unmarshal(raw, &out); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("decoded %+v (%v), want %+v", out, err, in)
	}
}
