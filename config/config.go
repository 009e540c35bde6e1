// Package config owns Conclave's configuration: defaults that run the embedded default on one machine,
// overridden by an optional JSON file, then environment variables, then command-line flags.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/secret"
)

// Config is the whole configuration. JSON field names are the config file's keys.
type Config struct {
	// Listen is the HTTP address; binding anything but loopback requires APIToken.
	Listen string `json:"listen"`
	// APIToken, when set, is required as a bearer token on every endpoint but /healthz.
	APIToken  secret.String `json:"api_token"`
	LogLevel  string        `json:"log_level"`
	LogFormat string        `json:"log_format"`
	// BlueprintsDir overrides and extends the embedded blueprints.
	BlueprintsDir string `json:"blueprints_dir"`
	// CatalogPath replaces the embedded model catalog.
	CatalogPath string `json:"catalog_path"`
	// Seed makes selection and the simulated provider reproducible.
	Seed         uint64 `json:"seed"`
	MaxBodyBytes int64  `json:"max_body_bytes"`
	// Records is how many execution records the memory store keeps.
	Records     int                         `json:"records"`
	Workers     int                         `json:"workers"`
	WorkerSlots int                         `json:"worker_slots"`
	Sim         providers.SimConfig         `json:"sim"`
	RateLimits  map[string]ratelimit.Limits `json:"rate_limits"`
	Breakers    map[string]Breaker          `json:"breakers"`
	Retry       Retry                       `json:"retry"`
	// ArbiterTimeoutSeconds bounds the wait for a rotating arbiter's verdict.
	ArbiterTimeoutSeconds float64 `json:"arbiter_timeout_seconds"`
	// Discount in (0,1) makes the bandit forget old evidence; 0 keeps all of it.
	Discount float64 `json:"discount"`
	// Sharing is how many pseudo-observations a model's record across all categories lends to its arm
	// in each category (an empirical-Bayes prior); 0 keeps categories independent.
	Sharing float64 `json:"sharing"`
	// Policy is the selection policy: thompson (default), ucb1, epsilon_greedy or uniform.
	Policy string `json:"policy"`
	// Reward is how answers are rewarded: agreement with the consensus (default), arbiter (the
	// consensus score), or external (only through POST /executions/:id/feedback).
	Reward string `json:"reward"`
	// MinConfidence is the classifier confidence below which a task counts as general.
	MinConfidence          float64 `json:"min_confidence"`
	ShutdownTimeoutSeconds float64 `json:"shutdown_timeout_seconds"`
}

// Breaker overrides a provider's circuit breaker.
type Breaker struct {
	Threshold     int     `json:"threshold"`
	WindowSeconds float64 `json:"window_seconds"`
	OpenSeconds   float64 `json:"open_seconds"`
}

// Retry tunes retries.
type Retry struct {
	// Scale multiplies the retry table's backoff delays (1 = the table).
	Scale float64 `json:"scale"`
	// Rounds is the number of quorum-retry rounds after a deadline.
	Rounds int `json:"rounds"`
}

// Default returns the embedded default: loopback only, an in-process fleet of 8 workers and the
// simulated provider with short latencies and rare faults.
func Default() Config {
	limits := map[string]ratelimit.Limits{}
	for _, p := range []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"} {
		limits[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	return Config{
		Listen:                 "127.0.0.1:5000",
		LogLevel:               "info",
		LogFormat:              "json",
		Seed:                   1,
		MaxBodyBytes:           1 << 20,
		Records:                10000,
		Workers:                8,
		WorkerSlots:            16,
		Sim:                    providers.SimConfig{Seed: 1, LatencyScale: 0.05, Faults: providers.Fault{ServerErrorRate: 0.01, RateLimitRate: 0.005}},
		RateLimits:             limits,
		Retry:                  Retry{Scale: 1, Rounds: 3},
		ArbiterTimeoutSeconds:  10,
		Policy:                 "thompson",
		Reward:                 "agreement",
		Sharing:                10,
		MinConfidence:          0.3,
		ShutdownTimeoutSeconds: 30,
	}
}

// Load builds the configuration from defaults, the config file (--config or CONCLAVE_CONFIG), the
// environment and the flags in args. getenv is os.Getenv outside tests.
func Load(args []string, getenv func(string) string) (Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", getenv("CONCLAVE_CONFIG"), "JSON configuration file")
	listen := fs.String("listen", "", "HTTP listen address (default 127.0.0.1:5000)")
	logLevel := fs.String("log-level", "", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "", "log format: json or console")
	seed := fs.String("seed", "", "random seed for selection and the simulated provider")
	workers := fs.Int("workers", 0, "number of in-process workers")
	blueprintsDir := fs.String("blueprints-dir", "", "directory of blueprint JSON files overriding the embedded ones")
	catalogPath := fs.String("catalog", "", "model catalog JSON file replacing the embedded one")
	latency := fs.String("sim-latency-scale", "", "multiplier of the simulated models' latencies (0 = none)")
	maxBody := fs.Int64("max-body-bytes", 0, "largest accepted request body")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}

	cfg := Default()
	if *path != "" {
		raw, err := os.ReadFile(*path)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", *path, err)
		}
	}

	var errs []error
	str := func(dst *string, env, flagValue string) {
		if v := getenv(env); v != "" {
			*dst = v
		}
		if flagValue != "" {
			*dst = flagValue
		}
	}
	str(&cfg.Listen, "CONCLAVE_LISTEN", *listen)
	str(&cfg.LogLevel, "CONCLAVE_LOG_LEVEL", *logLevel)
	str(&cfg.LogFormat, "CONCLAVE_LOG_FORMAT", *logFormat)
	str(&cfg.BlueprintsDir, "CONCLAVE_BLUEPRINTS_DIR", *blueprintsDir)
	str(&cfg.CatalogPath, "CONCLAVE_CATALOG", *catalogPath)
	if v := getenv("CONCLAVE_API_TOKEN"); v != "" {
		cfg.APIToken = secret.String(v)
	}
	var seedText, latencyText, workersText, bodyText string
	str(&seedText, "CONCLAVE_SEED", *seed)
	str(&latencyText, "CONCLAVE_SIM_LATENCY_SCALE", *latency)
	str(&workersText, "CONCLAVE_WORKERS", "")
	str(&bodyText, "CONCLAVE_MAX_BODY_BYTES", "")
	if seedText != "" {
		n, err := strconv.ParseUint(seedText, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("seed %q: %w", seedText, err))
		}
		cfg.Seed, cfg.Sim.Seed = n, n
	}
	if latencyText != "" {
		f, err := strconv.ParseFloat(latencyText, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("sim latency scale %q: %w", latencyText, err))
		}
		cfg.Sim.LatencyScale = f
	}
	if workersText != "" {
		n, err := strconv.Atoi(workersText)
		if err != nil {
			errs = append(errs, fmt.Errorf("workers %q: %w", workersText, err))
		}
		cfg.Workers = n
	}
	if *workers != 0 {
		cfg.Workers = *workers
	}
	if bodyText != "" {
		n, err := strconv.ParseInt(bodyText, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("max body bytes %q: %w", bodyText, err))
		}
		cfg.MaxBodyBytes = n
	}
	if *maxBody != 0 {
		cfg.MaxBodyBytes = *maxBody
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// Validate rejects configurations that cannot run or would be unsafe.
func (c Config) Validate() error {
	var errs []error
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		errs = append(errs, fmt.Errorf("listen %q: %w", c.Listen, err))
	} else if !IsLoopback(host) && !c.APIToken.Set() {
		errs = append(errs, fmt.Errorf("listen %q is not a loopback address: set CONCLAVE_API_TOKEN to require a bearer token", c.Listen))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be at least 1, got %d", c.Workers))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("max_body_bytes must be at least 1024, got %d", c.MaxBodyBytes))
	}
	if c.Sim.LatencyScale < 0 {
		errs = append(errs, fmt.Errorf("sim latency_scale must not be negative"))
	}
	if c.Sharing < 0 {
		errs = append(errs, fmt.Errorf("sharing must not be negative, got %g", c.Sharing))
	}
	if c.Discount < 0 || c.Discount >= 1 {
		errs = append(errs, fmt.Errorf("discount must be in [0, 1), got %g", c.Discount))
	}
	if c.Retry.Scale < 0 || c.Retry.Rounds < 0 {
		errs = append(errs, fmt.Errorf("retry scale and rounds must not be negative"))
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		errs = append(errs, fmt.Errorf("log_format must be json or console, got %q", c.LogFormat))
	}
	return errors.Join(errs...)
}

// IsLoopback reports whether a listen host only accepts local connections.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ArbiterTimeout returns the arbiter timeout as a duration.
func (c Config) ArbiterTimeout() time.Duration {
	return time.Duration(c.ArbiterTimeoutSeconds * float64(time.Second))
}

// ShutdownTimeout returns the graceful shutdown budget as a duration.
func (c Config) ShutdownTimeout() time.Duration {
	return time.Duration(c.ShutdownTimeoutSeconds * float64(time.Second))
}
