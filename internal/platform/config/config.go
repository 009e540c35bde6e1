// Package config owns Conclave's configuration: defaults that run the embedded default on one machine,
// overridden by an optional file (YAML or JSON), then environment variables, then command-line flags.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/conclave-ai/conclave/internal/core/admission"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Config is the whole configuration. JSON field names are the config file's keys, in YAML as in JSON;
// config.example.yaml at the repository's root sets every one of them.
type Config struct {
	// Listen is the HTTP address; binding anything but loopback requires APIToken.
	Listen string `json:"listen"`
	// Remote is the protoactor remote endpoint where other nodes send RouteRequest messages.
	Remote Remote `json:"remote"`
	// EvalReport is the evaluation report the dashboard shows (GET /eval/report).
	EvalReport string `json:"eval_report"`
	// DebugListen, when set, is a loopback address serving pprof; empty (the default) serves none.
	DebugListen string `json:"debug_listen"`
	// APIToken, when set, is required as a bearer token on every endpoint but /healthz.
	APIToken  secret.String `json:"api_token"`
	LogLevel  string        `json:"log_level"`
	LogFormat string        `json:"log_format"`
	// BlueprintsDir overrides and extends the embedded blueprints.
	BlueprintsDir string `json:"blueprints_dir"`
	// CatalogPath replaces the embedded model catalog.
	CatalogPath string `json:"catalog_path"`
	// Seed makes selection and the simulated provider reproducible.
	Seed uint64 `json:"seed"`
	// NodeID names this controller in logs and records and is mixed into its random streams; empty
	// means the host name.
	NodeID       string `json:"node_id"`
	MaxBodyBytes int64  `json:"max_body_bytes"`
	// Records says which records are kept: by the memory store, and by PostgreSQL. A bare number is its
	// older form, the memory store's Max.
	Records Records `json:"records"`
	// RecordsMaxBytes is records.max_bytes's older spelling, still read (config:"old": the example
	// need not show it).
	RecordsMaxBytes *int64 `json:"records_max_bytes" config:"old"`
	// RedisURL (REDIS_URL), when set, counts rate limits in Redis, shared by every controller on it;
	// unset, each controller counts its own.
	RedisURL secret.String `json:"redis_url"`
	// RedisPrefix starts the limiters' Redis keys: controllers share limits when they share it.
	RedisPrefix string `json:"redis_prefix"`
	// DatabaseURL (DATABASE_URL), when set, keeps execution records and what the bandit learned in
	// PostgreSQL; unset, records live in the bounded memory store and learning in memory.
	DatabaseURL secret.String `json:"database_url"`
	// SpoolPath is the file where records wait while PostgreSQL is unreachable (empty: spool-<node
	// id>.records in the user's cache directory); SpoolMaxBytes bounds it.
	SpoolPath     string `json:"spool_path"`
	SpoolMaxBytes int64  `json:"spool_max_bytes"`
	// MaxInflightBytes bounds the bytes of the tasks, asks and answers of the requests running at once;
	// beyond it new requests get 503 with Retry-After, and answers are dropped (their calls overloaded).
	MaxInflightBytes int64 `json:"max_inflight_bytes"`
	// Cache bounds the exact answer cache (in Redis when REDIS_URL is set, shared by the controllers;
	// in memory otherwise).
	Cache Cache `json:"cache"`
	// Alerts is where budget alerts go besides the log.
	Alerts  Alerts `json:"alerts"`
	Workers int    `json:"workers"`
	// Fleet, when set, is a fleet file: jobs go to its worker hosts over SSH instead of the in-process
	// workers. DevInsecureHostKeys skips verifying their keys (development only).
	Fleet               string             `json:"fleet"`
	DevInsecureHostKeys bool               `json:"dev_insecure_host_keys"`
	WorkerSlots         int                `json:"worker_slots"`
	Sim                 SimConfig          `json:"sim"`
	RateLimits          RateLimits         `json:"rate_limits"`
	Breakers            map[string]Breaker `json:"breakers"`
	// Providers turns real providers on: the named ones by their name, your own with their kind, base
	// URL and models. With none, the simulated provider serves the whole catalog.
	Providers map[string]Provider `json:"providers"`
	// SecretsFile, when set, is a NAME=value file of keys that only its owner may read; a key is looked
	// for there first, then in the environment. It is re-read while the system runs.
	SecretsFile string `json:"secrets_file"`
	Retry       Retry  `json:"retry"`
	// ArbiterTimeoutSeconds bounds the wait for a rotating arbiter's verdict.
	ArbiterTimeoutSeconds float64 `json:"arbiter_timeout_seconds"`
	// Discount in (0,1) makes the bandit forget old evidence; 0 keeps all of it.
	Discount float64 `json:"discount"`
	// Sharing is how many pseudo-observations a model's record across all categories lends to its arm
	// in each category (an empirical-Bayes prior); 0 keeps categories independent.
	Sharing float64 `json:"sharing"`
	// Policy is the selection policy: thompson (default), ucb1, epsilon_greedy or uniform.
	Policy string `json:"policy"`
	// Reward is how answers are rewarded: agreement with the consensus (default), reliability (the
	// probability that the answer is right by the reliability-weighted vote, agreement where there is
	// none), arbiter (the consensus score), or external (only through POST /executions/:id/feedback).
	Reward string `json:"reward"`
	// Dependence makes the reliability estimator see models that err together (reward reliability):
	// votes of models that agree more often than their accuracies predict count as less than
	// independent evidence, in the vote and in the rewards.
	Dependence bool `json:"dependence"`
	// MinConfidence is the classifier confidence below which a task counts as general.
	MinConfidence float64 `json:"min_confidence"`
	// Classify asks a model for the category of a task the local classifier is unsure of.
	Classify               Classify `json:"classify"`
	ShutdownTimeoutSeconds float64  `json:"shutdown_timeout_seconds"`
	// ReadTimeoutSeconds bounds reading a request, headers and body: a client sending a byte every few
	// seconds is cut off. WriteTimeoutSeconds bounds the whole answer, a stream's included: it must
	// exceed the longest request (timeout at most 3600 s).
	ReadTimeoutSeconds  float64 `json:"read_timeout_seconds"`
	WriteTimeoutSeconds float64 `json:"write_timeout_seconds"`
	// MaxConnections bounds the HTTP connections held at once; more wait to be accepted.
	MaxConnections int `json:"max_connections"`
	// Fallbacks are, by model id, the models a direct call of it moves to in order when the model or
	// its provider fails (a request's own fallbacks replace them).
	Fallbacks map[string][]string `json:"fallbacks"`
	// Pricing prices the models nobody priced.
	Pricing Pricing `json:"pricing"`
	// ArmsRefreshSeconds is how often a controller sharing PostgreSQL folds the other controllers'
	// rewards into its arms: what one learns, the others use this much later (plus the recorder's
	// flush, 50 ms).
	ArmsRefreshSeconds float64 `json:"arms_refresh_seconds"`
}

// Records says which records are kept.
type Records struct {
	// Max and MaxBytes bound the memory store: the newest records up to that many, and up to that many
	// bytes.
	Max      int   `json:"max"`
	MaxBytes int64 `json:"max_bytes"`
	// RetentionDays, above zero, drops PostgreSQL's records and journal of calls older than that many
	// days, whole weeks at a time (their partitions); 0 keeps them forever. The keys' spend stays.
	RetentionDays int `json:"retention_days"`
}

// UnmarshalJSON reads records as an object, or as a bare number: the older form, which set Max.
func (r *Records) UnmarshalJSON(raw []byte) error {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] != '{' && string(t) != "null" {
		return json.Unmarshal(t, &r.Max)
	}
	type plain Records // without this method
	return json.Unmarshal(raw, (*plain)(r))
}

// Retention is how long PostgreSQL keeps records; zero is forever.
func (r Records) Retention() time.Duration { return time.Duration(r.RetentionDays) * 24 * time.Hour }

// Pricing is what a model without a price of its own costs. Without a default, such a model is free
// to callers without a budget and refused (403 model_not_priced) to keys with one.
type Pricing struct {
	// DefaultPriceIn and DefaultPriceOut are US dollars per million input and output tokens; set
	// either, and both apply (the other at 0).
	DefaultPriceIn  *money.Price `json:"default_price_in"`
	DefaultPriceOut *money.Price `json:"default_price_out"`
}

// Default returns the default prices, and whether any is set.
func (p Pricing) Default() (money.Rates, bool) {
	if p.DefaultPriceIn == nil && p.DefaultPriceOut == nil {
		return money.Rates{}, false
	}
	var r money.Rates
	if p.DefaultPriceIn != nil {
		r.In = *p.DefaultPriceIn
	}
	if p.DefaultPriceOut != nil {
		r.Out = *p.DefaultPriceOut
	}
	return r, true
}

// MaxPrice bounds a price: a million dollars per million tokens.
const MaxPrice = money.Price(1_000_000 * money.Dollar)

// Classify configures the classifying model. Without a model (the default) the local classifier alone
// classifies.
type Classify struct {
	// Model is a catalog model asked for the category of a task whose local confidence is under the
	// low-confidence threshold (0.6); its answers are kept by the task's hash. A cheap, fast model.
	Model string `json:"model"`
	// BudgetSeconds bounds the wait for its answer; past it, or when it fails, the local answer stands.
	BudgetSeconds float64 `json:"budget_seconds"`
	// CacheSize bounds the answers kept.
	CacheSize int `json:"cache_size"`
}

// Breaker overrides a provider's circuit breakers: the provider's own, and the breaker each of its
// models has (outlier ejection). Zero keeps a default.
type Breaker struct {
	Threshold     int     `json:"threshold"`
	WindowSeconds float64 `json:"window_seconds"`
	OpenSeconds   float64 `json:"open_seconds"`
	// ModelThreshold consecutive faults of one model eject it for ModelOpenSeconds (5 and 30 s).
	ModelThreshold   int     `json:"model_threshold"`
	ModelOpenSeconds float64 `json:"model_open_seconds"`
	// TimeoutFloorSeconds is the least time a call must have had before its timeout counts against the
	// provider and the model, when that is longer than the blueprint's timeout (a provider known to be
	// slow is not blamed for a blueprint's short deadline). Zero: the blueprint's timeout alone.
	TimeoutFloorSeconds float64 `json:"timeout_floor_seconds"`
}

// Provider configures one provider. A named provider (openrouter, anthropic, gemini, groq, cerebras,
// deepseek) knows its kind, base URL and key variable; a provider of your own names them. Its models
// join the catalog.
type Provider struct {
	// Kind is the wire format: openai, anthropic or gemini.
	Kind    string `json:"kind"`
	BaseURL string `json:"base_url"`
	// APIKeyEnv names the key's variable, in the secrets file or the environment; a local server may
	// need none.
	APIKeyEnv string          `json:"api_key_env"`
	Models    []ProviderModel `json:"models"`
	// Breaker and RateLimit override the provider's breakers and limits.
	Breaker   *Breaker              `json:"breaker"`
	RateLimit *providerstate.Limits `json:"rate_limit"`
	// DiscoverySeconds is how often the provider's model list is read again: listed models join the
	// pool, vanished ones leave. Absent means DefaultDiscoverySeconds; 0 turns discovery off.
	DiscoverySeconds *float64 `json:"discovery_interval_seconds"`
}

// DefaultDiscoverySeconds is how often a provider's model list is read when the configuration does not say.
const DefaultDiscoverySeconds = 3600

// Discovery returns how often the provider's model list is read; zero means never.
func (p Provider) Discovery() time.Duration {
	s := float64(DefaultDiscoverySeconds)
	if p.DiscoverySeconds != nil {
		s = *p.DiscoverySeconds
	}
	return time.Duration(s * float64(time.Second))
}

// ProviderModel is a model of a configured provider.
type ProviderModel struct {
	// ID is the model's id as the provider names it.
	ID string `json:"id"`
	// Context is its context window in tokens.
	Context int `json:"context"`
	// PriceIn and PriceOut are in US dollars per million input and output tokens, exact decimals. A
	// model with neither is unpriced: a key with a budget may not call it unless pricing sets a
	// default. Either alone prices the other at 0; both 0 mark the model free.
	PriceIn  *money.Price `json:"price_in"`
	PriceOut *money.Price `json:"price_out"`
	// PriceCacheRead and PriceCacheWrite are in US dollars per million input tokens read from and
	// written to the provider's prompt cache (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens and cache_creation_input_tokens, Gemini's cachedContentTokenCount);
	// without them those tokens pay price_in.
	PriceCacheRead  *money.Price `json:"price_cache_read"`
	PriceCacheWrite *money.Price `json:"price_cache_write"`
	MaxOutput       int          `json:"max_output"`
	// Tier is a strength hint, 1 to 3 (default 2); Capabilities are catalog tags (default chat).
	Tier         int      `json:"tier"`
	Capabilities []string `json:"capabilities"`
}

// Alerts is where budget alerts go besides the log (the budget_alert event).
type Alerts struct {
	// WebhookURL, when set, receives a POST of each alert, as JSON, tried again with backoff while it
	// fails; Secret signs its body (the X-Conclave-Signature header: sha256= and the hex of the body's
	// HMAC-SHA256 under it).
	WebhookURL string        `json:"webhook_url"`
	Secret     secret.String `json:"secret"`
}

// Cache is the exact answer cache's bound.
type Cache struct {
	// MaxBytes bounds the answers kept; past it the least recently read go first.
	MaxBytes int64 `json:"max_bytes"`
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
	limits := maps.Clone(providerstate.DefaultLimits)
	return Config{
		Listen:                 "127.0.0.1:5000",
		EvalReport:             "reports/eval/report.json",
		LogLevel:               "info",
		LogFormat:              "json",
		Seed:                   1,
		MaxBodyBytes:           1 << 20,
		Records:                Records{Max: 10000, MaxBytes: 256 << 20},
		SpoolMaxBytes:          1 << 30,
		RedisPrefix:            "conclave",
		MaxInflightBytes:       256 << 20,
		Cache:                  Cache{MaxBytes: 64 << 20},
		Workers:                8,
		WorkerSlots:            16,
		Sim:                    SimConfig{Seed: 1, LatencyScale: 0.05, Faults: Fault{ServerErrorRate: 0.01, RateLimitRate: 0.005}},
		RateLimits:             RateLimits{Providers: limits, MaxQueueSeconds: admission.DefaultMaxQueue.Seconds()},
		Retry:                  Retry{Scale: 1, Rounds: 3},
		ArbiterTimeoutSeconds:  10,
		Policy:                 "thompson",
		Reward:                 "agreement",
		Sharing:                10,
		MinConfidence:          0.3,
		Classify:               Classify{BudgetSeconds: 1.5, CacheSize: 10000},
		ShutdownTimeoutSeconds: 30,
		ArmsRefreshSeconds:     2,
		ReadTimeoutSeconds:     30,
		WriteTimeoutSeconds:    3660,
		MaxConnections:         4096,
	}
}

// Bounds of the fallbacks: how many models have them, and how many each.
const (
	MaxFallbackModels = 1024
	MaxFallbacks      = 16
)

// MinTokenLength is the shortest API token accepted.
const MinTokenLength = 16

// Remote configures the remote listener, where other nodes send route requests over protoactor
// remote (gRPC). Beyond loopback it needs APIToken, which authenticates every message, and TLS, unless
// Insecure says to go without them.
type Remote struct {
	// Listen is its address ("host:port"); empty serves none.
	Listen string `json:"listen"`
	// TLSCert and TLSKey are the node's PEM certificate and key; TLSCA, when set, is the CA that signs
	// its peers' certificates, and makes TLS mutual.
	TLSCert string `json:"tls_cert"`
	TLSKey  string `json:"tls_key"`
	TLSCA   string `json:"tls_ca"`
	// Insecure lets a listener beyond loopback start without a token or TLS (a warning says so).
	Insecure bool `json:"insecure"`
}

// TLS reports whether the remote listener has TLS.
func (r Remote) TLS() bool { return r.TLSCert != "" && r.TLSKey != "" }

// setting is a value that a flag of `conclave serve` and an environment variable can set.
type setting struct {
	flag, env, usage string
	// show is the default as --help shows it.
	show func(Config) string
	set  func(*Config, string) error
}

var settings = []setting{
	{"listen", "CONCLAVE_LISTEN", "HTTP listen address; binding anything but loopback needs CONCLAVE_API_TOKEN",
		func(c Config) string { return c.Listen }, func(c *Config, v string) error { c.Listen = v; return nil }},
	{"remote", "CONCLAVE_REMOTE", "address where other nodes send route requests over protoactor remote (config remote.listen)",
		func(Config) string { return "none" }, func(c *Config, v string) error { c.Remote.Listen = v; return nil }},
	{"remote-tls-cert", "CONCLAVE_REMOTE_TLS_CERT", "PEM certificate of the remote listener, for serving and for dialing (config remote.tls_cert)",
		func(Config) string { return "none" }, func(c *Config, v string) error { c.Remote.TLSCert = v; return nil }},
	{"remote-tls-key", "CONCLAVE_REMOTE_TLS_KEY", "PEM key of that certificate (config remote.tls_key)",
		func(Config) string { return "none" }, func(c *Config, v string) error { c.Remote.TLSKey = v; return nil }},
	{"remote-tls-ca", "CONCLAVE_REMOTE_TLS_CA", "PEM CA that signs the peers' certificates: mutual TLS (config remote.tls_ca)",
		func(Config) string { return "none" }, func(c *Config, v string) error { c.Remote.TLSCA = v; return nil }},
	{"remote-insecure", "CONCLAVE_REMOTE_INSECURE", "let a remote listener beyond loopback start without a token or TLS (config remote.insecure)",
		func(Config) string { return "false" }, func(c *Config, v string) (err error) { c.Remote.Insecure, err = strconv.ParseBool(v); return err }},
	{"eval-report", "CONCLAVE_EVAL_REPORT", "evaluation report the dashboard shows",
		func(c Config) string { return c.EvalReport }, func(c *Config, v string) error { c.EvalReport = v; return nil }},
	{"debug-listen", "CONCLAVE_DEBUG_LISTEN", "loopback address of a debug listener serving pprof",
		func(Config) string { return "off" }, func(c *Config, v string) error { c.DebugListen = v; return nil }},
	{"log-level", "CONCLAVE_LOG_LEVEL", "log level: debug, info, warn or error",
		func(c Config) string { return c.LogLevel }, func(c *Config, v string) error { c.LogLevel = v; return nil }},
	{"log-format", "CONCLAVE_LOG_FORMAT", "log format: json or console",
		func(c Config) string { return c.LogFormat }, func(c *Config, v string) error { c.LogFormat = v; return nil }},
	{"seed", "CONCLAVE_SEED", "random seed of selection and of the simulated provider",
		func(c Config) string { return strconv.FormatUint(c.Seed, 10) }, func(c *Config, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			c.Seed, c.Sim.Seed = n, n
			return err
		}},
	{"node-id", "CONCLAVE_NODE_ID", "this controller's name in logs and records, mixed into its random streams",
		func(Config) string { return "the host name" }, func(c *Config, v string) error { c.NodeID = v; return nil }},
	{"workers", "CONCLAVE_WORKERS", "number of in-process workers",
		func(c Config) string { return strconv.Itoa(c.Workers) }, func(c *Config, v string) (err error) { c.Workers, err = strconv.Atoi(v); return err }},
	{"blueprints-dir", "CONCLAVE_BLUEPRINTS_DIR", "directory of blueprint JSON files overriding and extending the embedded ones",
		func(Config) string { return "embedded" }, func(c *Config, v string) error { c.BlueprintsDir = v; return nil }},
	{"catalog", "CONCLAVE_CATALOG", "model catalog JSON file replacing the embedded one",
		func(Config) string { return "embedded" }, func(c *Config, v string) error { c.CatalogPath = v; return nil }},
	{"sim-latency-scale", "CONCLAVE_SIM_LATENCY_SCALE", "multiplier of the simulated models' latencies: 1 realistic, 0 none",
		func(c Config) string { return strconv.FormatFloat(c.Sim.LatencyScale, 'g', -1, 64) },
		func(c *Config, v string) (err error) { c.Sim.LatencyScale, err = strconv.ParseFloat(v, 64); return err }},
	{"secrets-file", "CONCLAVE_SECRETS_FILE", "NAME=value file of provider keys, readable by its owner only",
		func(Config) string { return "none" }, func(c *Config, v string) error { c.SecretsFile = v; return nil }},
	{"fleet", "CONCLAVE_FLEET", "fleet file (YAML or JSON) of worker hosts reached over SSH",
		func(Config) string { return "none: in-process workers" }, func(c *Config, v string) error { c.Fleet = v; return nil }},
	{"dev-insecure-host-keys", "CONCLAVE_DEV_INSECURE_HOST_KEYS", "do not verify the fleet's host keys (development only)",
		func(Config) string { return "false" }, func(c *Config, v string) (err error) { c.DevInsecureHostKeys, err = strconv.ParseBool(v); return err }},
	{"spool-path", "CONCLAVE_SPOOL_PATH", "file where records wait while PostgreSQL is unreachable",
		func(Config) string { return "spool-<node id>.records in the user's cache directory" }, func(c *Config, v string) error { c.SpoolPath = v; return nil }},
	{"max-queue-seconds", "CONCLAVE_MAX_QUEUE_SECONDS", "longest a request waits for providers' rate limits before 503 rate_limited with Retry-After (config rate_limits.max_queue_seconds)",
		func(c Config) string { return strconv.FormatFloat(c.RateLimits.MaxQueueSeconds, 'g', -1, 64) },
		func(c *Config, v string) (err error) {
			c.RateLimits.MaxQueueSeconds, err = strconv.ParseFloat(v, 64)
			return err
		}},
	{"max-body-bytes", "CONCLAVE_MAX_BODY_BYTES", "largest accepted request body; larger ones get 413",
		func(c Config) string { return strconv.FormatInt(c.MaxBodyBytes, 10) },
		func(c *Config, v string) (err error) { c.MaxBodyBytes, err = strconv.ParseInt(v, 10, 64); return err }},
}

// PrintUsage writes the help of `conclave serve`: every flag with its environment variable and default.
func PrintUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: conclave serve [flags]

Runs the control plane. With no configuration it runs the embedded default: the simulated provider,
an in-process fleet, local rate limits and an in-memory record store.

Each flag has an environment variable; a flag beats its variable, which beats the config file.

`)
	line := func(flag, usage, env, def string) {
		fmt.Fprintf(w, "  --%-18s %s\n  %-20s environment %s; default %s\n", flag, usage, "", env, def)
	}
	line("config FILE", "configuration file, YAML (.yaml, .yml) or JSON, with any key of the configuration;\n"+
		"                       config.example.yaml in the repository sets every key, with what it does and its default", "CONCLAVE_CONFIG", "none")
	d := Default()
	for _, s := range settings {
		line(s.flag, s.usage, s.env, s.show(d))
	}
	fmt.Fprint(w, `
  CONCLAVE_API_TOKEN   the bearer token every endpoint but /healthz and /readyz requires (environment
                       only: a secret does not belong on a command line); default none
  DATABASE_URL         PostgreSQL for records and learning (environment or the config file's
                       database_url only); default none: the memory store
  REDIS_URL            Redis for rate limits shared by every controller (environment or the config
                       file's redis_url only); default none: each controller counts its own
  OTEL_EXPORTER_OTLP_ENDPOINT
                       an OTLP/HTTP endpoint every request's trace goes to, with OpenTelemetry's other
                       OTEL_* variables (environment only); default none: no traces
`)
}

// Load builds the configuration from defaults, the config file (--config or CONCLAVE_CONFIG), the
// environment and the flags in args. getenv is os.Getenv outside tests. For --help it returns
// flag.ErrHelp, and the caller prints PrintUsage.
func Load(args []string, getenv func(string) string) (Config, error) {
	path, flagValues, err := parseFlags(args)
	if err != nil {
		return Config{}, err
	}
	if path == "" {
		path = getenv("CONCLAVE_CONFIG")
	}
	cfg := Default()
	if path != "" {
		if err := readFile(path, &cfg); err != nil {
			return Config{}, err
		}
	}
	errs := cfg.applySettings(flagValues, getenv)
	cfg.secretsFromEnvironment(getenv)
	if cfg.NodeID == "" {
		cfg.NodeID, _ = os.Hostname()
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// parseFlags reads the flags of `conclave serve`: the config file's path, and each setting's value
// (empty when its flag is not given), in the order of settings.
func parseFlags(args []string) (path string, values []string, err error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pathFlag := fs.String("config", "", "")
	flags := make([]*string, len(settings))
	for i, s := range settings {
		flags[i] = fs.String(s.flag, "", s.usage)
	}
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	if fs.NArg() > 0 {
		return "", nil, fmt.Errorf("unexpected arguments %q (see conclave serve --help)", fs.Args())
	}
	values = make([]string, len(flags))
	for i, f := range flags {
		values[i] = *f
	}
	return *pathFlag, values, nil
}

// readFile reads the configuration file at path over cfg.
func readFile(path string, cfg *Config) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if err := decodeFile(path, raw, cfg); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// applySettings sets each setting from its environment variable, then from its flag (flagValues, in
// the order of settings), so that a flag beats its variable. It returns every value that did not
// parse.
func (c *Config) applySettings(flagValues []string, getenv func(string) string) []error {
	var errs []error
	for i, s := range settings {
		for _, v := range []string{getenv(s.env), flagValues[i]} {
			if v == "" {
				continue
			}
			if err := s.set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %w", s.flag, v, err))
			}
		}
	}
	return errs
}

// secretsFromEnvironment takes the API token, DATABASE_URL and REDIS_URL from the environment, when it
// sets them: a secret does not belong on a command line.
func (c *Config) secretsFromEnvironment(getenv func(string) string) {
	if v := getenv("CONCLAVE_API_TOKEN"); v != "" {
		c.APIToken = secret.String(v)
	}
	if v := getenv("DATABASE_URL"); v != "" {
		c.DatabaseURL = secret.String(v)
	}
	if v := getenv("REDIS_URL"); v != "" {
		c.RedisURL = secret.String(v)
	}
}

// Validate rejects configurations that cannot run or would be unsafe, and values beyond any sensible
// bound (a breaker threshold of 1e8 would allocate gigabytes; a timeout of 1e-300 means nothing).
// Every problem is reported, in the order of the checks below.
func (c Config) Validate() error {
	var l errorList
	c.checkListeners(&l)
	c.checkSizes(&l)
	c.checkSim(&l)
	c.checkLearning(&l)
	c.checkServing(&l)
	c.checkClassify(&l)
	c.checkLimits(&l)
	c.checkFallbacks(&l)
	for _, name := range sortedKeys(c.Providers) {
		l.add(c.Providers[name].validate(name)...)
	}
	l.add(priceErr("pricing default_price_in", c.Pricing.DefaultPriceIn), priceErr("pricing default_price_out", c.Pricing.DefaultPriceOut))
	switch c.LogFormat {
	case "json", "console":
	default:
		l.bad("log_format must be json or console, got %q", c.LogFormat)
	}
	return errors.Join(l.errs...)
}

// errorList gathers what is wrong with a configuration, in the order it is found. Its problems start
// with prefix.
type errorList struct {
	prefix string
	errs   []error
}

// bad adds a problem.
func (l *errorList) bad(format string, args ...any) {
	l.errs = append(l.errs, fmt.Errorf(l.prefix+format, args...))
}

// between adds a problem when v is not within [lo, hi] (NaN never is).
func (l *errorList) between(name string, v, lo, hi float64) {
	l.add(betweenErr(name, v, lo, hi))
}

// add adds the problems that are not nil, as they are.
func (l *errorList) add(errs ...error) {
	l.errs = append(l.errs, collect(errs...)...)
}

// checkListeners checks the API token and the addresses served: the HTTP listener needs the token
// beyond loopback, the remote listener its token and TLS, and pprof stays on loopback.
func (c Config) checkListeners(l *errorList) {
	if c.APIToken.Set() && len(c.APIToken.Reveal()) < MinTokenLength {
		l.bad("CONCLAVE_API_TOKEN is shorter than %d characters: a short token is guessed", MinTokenLength)
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		l.bad("listen %q: %w", c.Listen, err)
	} else if !IsLoopback(host) && !c.APIToken.Set() {
		l.bad("listen %q is not a loopback address: set CONCLAVE_API_TOKEN to require a bearer token", c.Listen)
	}
	l.add(c.Remote.validate(c.APIToken.Set())...)
	if c.DebugListen != "" {
		// pprof has no authentication and tells a great deal: it is never served beyond the machine.
		if host, _, err := net.SplitHostPort(c.DebugListen); err != nil {
			l.bad("debug_listen %q: %w", c.DebugListen, err)
		} else if !IsLoopback(host) {
			l.bad("debug_listen %q is not a loopback address: pprof is served on loopback only", c.DebugListen)
		}
	}
}

// checkSizes bounds the workers, the bodies, the records, the spool, the bytes in flight and the node's
// name.
func (c Config) checkSizes(l *errorList) {
	l.between("workers", float64(c.Workers), 1, 1024)
	l.between("worker_slots", float64(c.WorkerSlots), 0, 1024)
	l.between("max_body_bytes", float64(c.MaxBodyBytes), 1024, 64<<20)
	l.between("records max", float64(c.Records.Max), 0, 1_000_000)
	l.between("records max_bytes", float64(c.Records.MaxBytes), 0, 16<<30)
	l.between("records retention_days", float64(c.Records.RetentionDays), 0, 36500)
	l.between("spool_max_bytes", float64(c.SpoolMaxBytes), 1<<20, 1<<40)
	l.between("max_inflight_bytes", float64(c.MaxInflightBytes), 0, 16<<30)
	l.between("cache max_bytes", float64(c.Cache.MaxBytes), 1, 1<<40)
	if w := c.Alerts.WebhookURL; w != "" {
		if u, err := url.Parse(w); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			l.bad("alerts webhook_url must be an http or https URL")
		}
	}
	if c.MaxInflightBytes > 0 && c.MaxInflightBytes < c.MaxBodyBytes {
		l.bad("max_inflight_bytes (%d) must not be below max_body_bytes (%d)", c.MaxInflightBytes, c.MaxBodyBytes)
	}
	if len(c.NodeID) > 128 {
		l.bad("node_id must be at most 128 bytes")
	}
}

// checkSim bounds the simulated provider's latencies and fault rates.
func (c Config) checkSim(l *errorList) {
	l.between("sim latency_scale", c.Sim.LatencyScale, 0, 100)
	l.between("sim faults server_error_rate", c.Sim.Faults.ServerErrorRate, 0, 1)
	l.between("sim faults timeout_rate", c.Sim.Faults.TimeoutRate, 0, 1)
	l.between("sim faults rate_limit_rate", c.Sim.Faults.RateLimitRate, 0, 1)
}

// checkLearning bounds what the bandit learns with, the classifier's confidence, the retries and the
// arbiter's wait.
func (c Config) checkLearning(l *errorList) {
	l.between("sharing", c.Sharing, 0, 1e6)
	if !(c.Discount >= 0 && c.Discount < 1) {
		l.bad("discount must be in [0, 1), got %g", c.Discount)
	}
	l.between("min_confidence", c.MinConfidence, 0, 1)
	l.between("retry scale", c.Retry.Scale, 0, 100)
	l.between("retry rounds", float64(c.Retry.Rounds), 0, 10)
	l.between("arbiter_timeout_seconds", c.ArbiterTimeoutSeconds, 0, 3600)
}

// checkServing bounds the shutdown, the reading of other controllers' rewards, the HTTP timeouts and
// the connections held.
func (c Config) checkServing(l *errorList) {
	l.between("shutdown_timeout_seconds", c.ShutdownTimeoutSeconds, 0, 3600)
	l.between("arms_refresh_seconds", c.ArmsRefreshSeconds, 0.05, 3600)
	l.between("read_timeout_seconds", c.ReadTimeoutSeconds, 1, 3600)
	l.between("write_timeout_seconds", c.WriteTimeoutSeconds, 10, 7200)
	l.between("max_connections", float64(c.MaxConnections), 1, 1_000_000)
}

// checkClassify bounds the classifying model's budget, its cache and its id.
func (c Config) checkClassify(l *errorList) {
	l.between("classify budget_seconds", c.Classify.BudgetSeconds, 0.05, 60)
	l.between("classify cache_size", float64(c.Classify.CacheSize), 1, 10_000_000)
	if len(c.Classify.Model) > 256 {
		l.bad("classify model: a model id of at most 256 bytes")
	}
}

// checkLimits bounds the breakers and rate limits by provider, the wait for the rate limits, and how
// many providers the configuration names.
func (c Config) checkLimits(l *errorList) {
	if len(c.RateLimits.Providers) > 64 || len(c.Breakers) > 64 {
		l.bad("rate_limits and breakers may name at most 64 providers")
	}
	for name, b := range c.Breakers {
		l.add(b.validate("breakers " + name)...)
	}
	for name, limits := range c.RateLimits.Providers {
		l.add(validLimits("rate_limits "+name, limits)...)
	}
	l.between("rate_limits max_queue_seconds", c.RateLimits.MaxQueueSeconds, MinQueueSeconds, MaxQueueSeconds)
	if len(c.Providers) > 64 {
		l.bad("providers may name at most 64 providers")
	}
}

// checkFallbacks bounds the fallbacks: a model with 1 to MaxFallbacks other models, for at most
// MaxFallbackModels models.
func (c Config) checkFallbacks(l *errorList) {
	if len(c.Fallbacks) > MaxFallbackModels {
		l.bad("fallbacks may name at most %d models", MaxFallbackModels)
	}
	for _, model := range sortedKeys(c.Fallbacks) {
		list := c.Fallbacks[model]
		switch {
		case model == "" || len(list) == 0 || len(list) > MaxFallbacks:
			l.bad("fallbacks %q: a model id with 1 to %d fallbacks", model, MaxFallbacks)
		case slices.Contains(list, "") || slices.Contains(list, model):
			l.bad("fallbacks %q: the fallbacks are other models' ids", model)
		}
	}
}

// validate checks the remote listener: TLS files come as a certificate with its key, and beyond
// loopback the listener needs the token and TLS unless Insecure says otherwise.
func (r Remote) validate(token bool) []error {
	var errs []error
	if (r.TLSCert == "") != (r.TLSKey == "") {
		errs = append(errs, errors.New("remote.tls_cert and remote.tls_key go together"))
	}
	if r.TLSCA != "" && !r.TLS() {
		errs = append(errs, errors.New("remote.tls_ca needs remote.tls_cert and remote.tls_key: mutual TLS needs a certificate of this node's"))
	}
	if _, _, err := net.SplitHostPort(r.Listen); r.Listen != "" && err != nil {
		return append(errs, fmt.Errorf("remote.listen %q: %w", r.Listen, err))
	}
	if r.Insecure {
		return errs
	}
	for _, missing := range r.Exposed(token) {
		switch missing {
		case ExposedToken:
			errs = append(errs, fmt.Errorf("remote.listen %q is not a loopback address: set CONCLAVE_API_TOKEN, which authenticates every remote message (or remote.insecure: true)", r.Listen))
		case ExposedTLS:
			errs = append(errs, fmt.Errorf("remote.listen %q is not a loopback address: set remote.tls_cert and remote.tls_key (and remote.tls_ca for mutual TLS), or remote.insecure: true", r.Listen))
		}
	}
	return errs
}

// What a remote listener beyond loopback may go without (Exposed).
const (
	ExposedToken = "token"
	ExposedTLS   = "tls"
	// ExposedClientCertificates: TLS without a CA, so that anyone may connect (and be refused
	// message by message).
	ExposedClientCertificates = "client_certificates"
)

// Exposed lists what a remote listener beyond loopback goes without: the token, TLS, client
// certificates. Empty on loopback, and when it has them all. Only the token and TLS are required
// (unless Insecure); the lack of client certificates is warned of.
func (r Remote) Exposed(token bool) []string {
	if r.Listen == "" {
		return nil
	}
	if host, _, err := net.SplitHostPort(r.Listen); err != nil || IsLoopback(host) {
		return nil
	}
	var out []string
	if !token {
		out = append(out, ExposedToken)
	}
	switch {
	case !r.TLS():
		out = append(out, ExposedTLS)
	case r.TLSCA == "":
		out = append(out, ExposedClientCertificates)
	}
	return out
}

func betweenErr(name string, v, lo, hi float64) error {
	if !(v >= lo && v <= hi) {
		return fmt.Errorf("%s must be between %g and %g, got %g", name, lo, hi, v)
	}
	return nil
}

// priceErr checks a price, when one is set.
func priceErr(name string, p *money.Price) error {
	if p != nil && (*p < 0 || *p > MaxPrice) {
		return fmt.Errorf("%s must be between 0 and %s US dollars per million tokens, got %s", name, MaxPrice, *p)
	}
	return nil
}

func collect(errs ...error) []error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

func (b Breaker) validate(where string) []error {
	return collect(betweenErr(where+" threshold", float64(b.Threshold), 0, resilience.MaxThreshold),
		betweenErr(where+" model_threshold", float64(b.ModelThreshold), 0, resilience.MaxThreshold),
		betweenErr(where+" window_seconds", b.WindowSeconds, 0, 3600), betweenErr(where+" open_seconds", b.OpenSeconds, 0, 3600),
		betweenErr(where+" model_open_seconds", b.ModelOpenSeconds, 0, 3600), betweenErr(where+" timeout_floor_seconds", b.TimeoutFloorSeconds, 0, 3600))
}

func validLimits(where string, l providerstate.Limits) []error {
	return collect(betweenErr(where+" requests_per_minute", float64(l.RequestsPerMinute), 0, 1e7),
		betweenErr(where+" tokens_per_minute", float64(l.TokensPerMinute), 0, 1e10), betweenErr(where+" concurrency", float64(l.Concurrency), 0, 1e5))
}

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// validate checks one configured provider: a name of its own needs a kind, a base URL and models.
func (p Provider) validate(name string) []error {
	l := errorList{prefix: "providers " + name + ": "}
	named, isNamed := catalog.NamedProviders[name]
	checkProviderName(&l, name)
	p.checkKind(&l, named.Kind)
	p.checkBaseURL(&l, isNamed)
	if p.APIKeyEnv != "" && !secret.ValidName(p.APIKeyEnv) {
		l.bad("api_key_env must be the name of a variable")
	}
	if !isNamed && len(p.Models) == 0 && p.Discovery() == 0 {
		l.bad("a provider of your own needs its models, or discovery to list them")
	}
	if d := p.DiscoverySeconds; d != nil && *d != 0 {
		l.add(betweenErr("providers "+name+" discovery_interval_seconds", *d, 10, 7*86400))
	}
	if len(p.Models) > 10000 {
		l.bad("at most 10000 models")
	}
	l.add(validModels(name, p.Models)...)
	if p.Breaker != nil {
		l.add(p.Breaker.validate("providers " + name + " breaker")...)
	}
	if p.RateLimit != nil {
		l.add(validLimits("providers "+name+" rate_limit", *p.RateLimit)...)
	}
	return l.errs
}

// checkProviderName refuses a name that is not one, and the names kept for the simulated and replayed
// providers and for the key of rate_limits that is not a provider.
func checkProviderName(l *errorList, name string) {
	switch {
	case !providerName.MatchString(name):
		l.bad("a provider's name is lower-case letters, digits, '-' and '_'")
	case name == "sim" || name == catalog.ReplayProvider:
		l.bad("%q is reserved for the simulated and replayed providers", name)
	case name == maxQueueKey:
		l.bad("%q is reserved: it is a key of rate_limits", name)
	}
}

// checkKind checks the provider's wire format: its own, else its name's (namedKind).
func (p Provider) checkKind(l *errorList, namedKind string) {
	kind := p.Kind
	if kind == "" {
		kind = namedKind
	}
	switch kind {
	case catalog.KindOpenAI, catalog.KindAnthropic, catalog.KindGemini:
	case "":
		l.bad("kind is required (openai, anthropic or gemini)")
	default:
		l.bad("kind %q is not openai, anthropic or gemini", p.Kind)
	}
}

// checkBaseURL checks the provider's base URL, which only a named provider may leave out: an http or
// https URL without credentials or a query, since keys go in api_key_env.
func (p Provider) checkBaseURL(l *errorList, isNamed bool) {
	if p.BaseURL == "" {
		if !isNamed {
			l.bad("base_url is required")
		}
		return
	}
	u, err := url.Parse(p.BaseURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		l.bad("base_url must be an http or https URL")
	case u.User != nil || u.RawQuery != "":
		l.bad("base_url must carry no credentials and no query: keys go in api_key_env")
	}
}

// validModels checks a provider's models: each has an id of its own and values within bounds.
func validModels(provider string, models []ProviderModel) []error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range models {
		where := fmt.Sprintf("providers %s models[%d]", provider, i)
		switch {
		case m.ID == "" || len(m.ID) > 200:
			errs = append(errs, fmt.Errorf("%s: id must have 1 to 200 characters", where))
		case seen[m.ID]:
			errs = append(errs, fmt.Errorf("%s: %q is listed twice", where, m.ID))
		}
		seen[m.ID] = true
		errs = append(errs, collect(betweenErr(where+" context", float64(m.Context), 1, 1e8),
			priceErr(where+" price_in", m.PriceIn), priceErr(where+" price_out", m.PriceOut),
			priceErr(where+" price_cache_read", m.PriceCacheRead), priceErr(where+" price_cache_write", m.PriceCacheWrite),
			betweenErr(where+" max_output", float64(m.MaxOutput), 0, 1e8), betweenErr(where+" tier", float64(m.Tier), 0, 3))...)
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// IsLoopback reports whether a listen host only accepts local connections.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadTimeout returns the request read timeout.
func (c Config) ReadTimeout() time.Duration {
	return time.Duration(c.ReadTimeoutSeconds * float64(time.Second))
}

// WriteTimeout returns the answer write timeout.
func (c Config) WriteTimeout() time.Duration {
	return time.Duration(c.WriteTimeoutSeconds * float64(time.Second))
}

// MaxQueue returns rate_limits.max_queue_seconds as a duration.
func (c Config) MaxQueue() time.Duration {
	return time.Duration(c.RateLimits.MaxQueueSeconds * float64(time.Second))
}

// ArbiterTimeout returns the arbiter timeout as a duration.
func (c Config) ArbiterTimeout() time.Duration {
	return time.Duration(c.ArbiterTimeoutSeconds * float64(time.Second))
}

// ShutdownTimeout returns the graceful shutdown budget as a duration.
func (c Config) ShutdownTimeout() time.Duration {
	return time.Duration(c.ShutdownTimeoutSeconds * float64(time.Second))
}

// SimConfig tunes the simulated provider. The zero value is an instant, fault-free simulation.
type SimConfig struct {
	// Enabled keeps the simulated provider when real providers are configured: it then serves the
	// catalog's models whose provider has no upstream. Without configured providers it always serves.
	Enabled bool `json:"enabled"`
	// Seed makes every model's skills and every answer reproducible.
	Seed uint64 `json:"seed"`
	// LatencyScale multiplies each model's nominal median latency (tier 1: 900 ms, tier 2: 500 ms,
	// tier 3: 250 ms; a third of that on groq and cerebras); zero means no latency at all.
	LatencyScale float64 `json:"latency_scale"`
	// Faults are the fault rates of every provider unless SetFault overrides one.
	Faults Fault `json:"faults"`
}

// Fault describes how often a provider misbehaves; each rate is a probability per call.
type Fault struct {
	// ServerErrorRate answers 503.
	ServerErrorRate float64 `json:"server_error_rate"`
	// TimeoutRate hangs until the caller's deadline.
	TimeoutRate float64 `json:"timeout_rate"`
	// RateLimitRate answers 429 with a Retry-After of RetryAfter (one second when zero).
	RateLimitRate float64       `json:"rate_limit_rate"`
	RetryAfter    time.Duration `json:"retry_after"`
	// ProviderWide makes the 503s and 429s the whole provider's (a gateway down, the account's quota
	// spent), with the provider's rate-limit headers on a 429; otherwise they are the model's own (one
	// model overloaded, its own quota spent), as they mostly are on a gateway serving many models.
	ProviderWide bool `json:"provider_wide"`
}
