package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// loadFile loads a configuration file of that name and content, with nothing else set.
func loadFile(t *testing.T, name, content string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load([]string{"--config", path}, env(nil))
}

func TestYAMLAndJSONLoadAlike(t *testing.T) {
	tests := []struct {
		desc, json, yaml string
		// name is the YAML file's name (conclave.yaml when empty).
		name string
	}{
		{desc: "top-level values", json: `{"listen": "127.0.0.1:6000", "workers": 3, "seed": 9, "log_level": "debug", "discount": 0.5}`,
			yaml: "listen: 127.0.0.1:6000\nworkers: 3\nseed: 9\nlog_level: debug\ndiscount: 0.5\n"},
		{desc: "the .yml extension", name: "conclave.yml", json: `{"workers": 3}`, yaml: "workers: 3"},
		{desc: "an upper-case extension", name: "CONCLAVE.YAML", json: `{"workers": 3}`, yaml: "workers: 3"},
		{desc: "nested objects", json: `{"sim": {"enabled": true, "latency_scale": 1, "faults": {"server_error_rate": 0.02, "retry_after": 2000000000}}, "retry": {"scale": 0.5, "rounds": 2}}`,
			yaml: `
sim:
  enabled: true
  latency_scale: 1
  faults:
    server_error_rate: 0.02
    retry_after: 2000000000
retry: {scale: 0.5, rounds: 2}
`},
		{desc: "rate limits beside max_queue_seconds", json: `{"rate_limits": {"groq": {"requests_per_minute": 30, "concurrency": 4}, "max_queue_seconds": 2.5}}`,
			yaml: "rate_limits:\n  max_queue_seconds: 2.5\n  groq:\n    requests_per_minute: 30\n    concurrency: 4\n"},
		{desc: "rate limits emptied", json: `{"rate_limits": null}`, yaml: "rate_limits:\n"},
		{desc: "providers with models, a breaker, a limit and discovery off", json: `{"providers": {
			"groq": {"api_key_env": "GROQ_KEY"},
			"local": {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "discovery_interval_seconds": 0,
			          "models": [{"id": "qwen2.5-7b", "context": 32768, "tier": 3, "capabilities": ["chat", "code"]}],
			          "breaker": {"threshold": 5, "open_seconds": 30}, "rate_limit": {"concurrency": 8}}}}`,
			yaml: `
providers:
  groq:
    api_key_env: GROQ_KEY
  local:
    kind: openai
    base_url: http://127.0.0.1:8000/v1
    discovery_interval_seconds: 0
    models:
      - id: qwen2.5-7b
        context: 32768
        tier: 3
        capabilities: [chat, code]
    breaker: {threshold: 5, open_seconds: 30}
    rate_limit: {concurrency: 8}
`},
		{desc: "a secret", json: `{"api_token": "t0k3n-0123456789ab", "database_url": "postgres://u:p@db/conclave"}`,
			yaml: "api_token: t0k3n-0123456789ab\ndatabase_url: 'postgres://u:p@db/conclave'\n"},
		{desc: "anchors and merge keys", json: `{"breakers": {"groq": {"threshold": 5, "open_seconds": 30}, "cerebras": {"threshold": 9, "open_seconds": 30}}}`,
			yaml: `
breakers:
  groq: &breaker {threshold: 5, open_seconds: 30}
  cerebras:
    <<: *breaker
    threshold: 9
`},
		{desc: "text that looks like a date or a number", json: `{"node_id": "2024-01-01", "eval_report": "007"}`,
			yaml: "node_id: 2024-01-01\neval_report: \"007\"\n"},
		{desc: "numbers written the YAML way", json: `{"workers": 16, "max_body_bytes": 2097152}`, yaml: "workers: 0x10\nmax_body_bytes: 2_097_152\n"},
		{desc: "nothing but comments", json: `{}`, yaml: "# nothing set yet\n"},
		{desc: "an empty file", json: `{}`, yaml: ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fromJSON, err := loadFile(t, "conclave.json", tt.json)
			if err != nil {
				t.Fatalf("json: %v", err)
			}
			name := tt.name
			if name == "" {
				name = "conclave.yaml"
			}
			fromYAML, err := loadFile(t, name, tt.yaml)
			if err != nil {
				t.Fatalf("yaml: %v", err)
			}
			if !reflect.DeepEqual(fromJSON, fromYAML) {
				t.Fatalf("they differ:\njson %+v\nyaml %+v", fromJSON, fromYAML)
			}
			if reflect.DeepEqual(fromJSON, mustDefault(t)) && tt.json != `{}` {
				t.Fatal("the file changed nothing: the case tests nothing")
			}
		})
	}
}

func mustDefault(t *testing.T) Config {
	t.Helper()
	cfg, err := Load(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestFileErrors(t *testing.T) {
	tests := []struct {
		desc, name, content string
		// says is in the error.
		says string
	}{
		{"a misspelt key in JSON", "c.json", `{"listne": "127.0.0.1:1"}`, `unknown key "listne"`},
		{"a misspelt key in YAML", "c.yaml", "listne: 127.0.0.1:1", `unknown key "listne"`},
		{"a misspelt key deep in JSON", "c.json", `{"providers": {"local": {"kind": "openai", "base_url": "http://h/v1", "models": [{"id": "m", "contxt": 1}]}}}`,
			`unknown key "providers.local.models[0].contxt"`},
		{"a misspelt key deep in YAML", "c.yaml", "providers:\n  local:\n    kind: openai\n    base_url: http://h/v1\n    models:\n      - id: m\n        contxt: 1\n",
			`unknown key "providers.local.models[0].contxt"`},
		{"a misspelt limit beside max_queue_seconds", "c.yaml", "rate_limits:\n  max_queue_seconds: 2\n  groq: {requests_per_minit: 1}\n",
			`unknown key "rate_limits.groq.requests_per_minit"`},
		{"a misspelt fault", "c.yaml", "sim:\n  faults:\n    timeout: 0.1\n", `unknown key "sim.faults.timeout"`},
		{"a key in a different case", "c.json", `{"Listen": "127.0.0.1:1"}`, `unknown key "Listen"`},
		{"every misspelt key is named", "c.yaml", "listne: x\nworkrs: 1\n", `unknown key "listne"; unknown key "workrs"`},
		{"a number as a key", "c.yaml", "breakers:\n  1: {threshold: 2}\n", `line 2: breakers: the key "1" is not a string`},
		{"a boolean as a key", "c.yaml", "true: 1\n", `the key "true" is not a string`},
		{"a key set twice", "c.yaml", "workers: 1\nseed: 2\nworkers: 3\n", `line 3: the top level: the key "workers" is already set at line 1`},
		{"two documents", "c.yaml", "workers: 1\n---\nworkers: 2\n", "a second YAML document"},
		{"not a number", "c.yaml", "discount: .nan\n", ".nan has no JSON form"},
		{"an infinity", "c.yaml", "sharing: -.inf\n", "-.inf has no JSON form"},
		{"binary", "c.yaml", "node_id: !!binary aGVsbG8=\n", "!!binary has no JSON form"},
		{"a tag of its own", "c.yaml", "sim: !custom {enabled: true}\n", "!custom has no JSON form"},
		{"an anchor that contains itself", "c.yaml", "providers: &p\n  x: *p\n", "contains itself"},
		{"aliases that expand beyond reason", "c.yaml", laughs(), "aliases expand to more than"},
		{"a merge of a scalar", "c.yaml", "sim:\n  <<: 3\n", "a merge (<<) takes a mapping"},
		{"a YAML syntax error", "c.yaml", "sim: {enabled: true\n", "yaml:"},
		{"a value of the wrong type", "c.yaml", "workers: many\n", "cannot unmarshal"},
		{"a value out of bounds", "c.yaml", "workers: 100000\n", "workers must be between"},
		{"a second JSON value", "c.json", `{"workers": 1} {"workers": 2}`, "more than one JSON value"},
		{"YAML in a file that is not named so", "c.conf", "workers: 1\n", "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := loadFile(t, tt.name, tt.content)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("err %v, want one saying %q", err, tt.says)
			}
		})
	}
}

// laughs is a YAML file of a few lines whose aliases stand for ten billion values.
func laughs() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// records takes its older form (a bare number, with records_max_bytes beside it) and its object form
// alike; a file setting the byte bound under both spellings, or a key records does not have, is
// refused.
func TestRecordsInBothForms(t *testing.T) {
	for _, tt := range []struct {
		desc, name, content string
		want                Records
	}{
		{"the older form", "c.yaml", "records: 500\nrecords_max_bytes: 1048576\n", Records{Max: 500, MaxBytes: 1 << 20}},
		{"the older form alone", "c.json", `{"records": 500}`, Records{Max: 500, MaxBytes: 256 << 20}},
		{"the older byte bound alone", "c.json", `{"records_max_bytes": 1048576}`, Records{Max: 10000, MaxBytes: 1 << 20}},
		{"the object form", "c.yaml", "records:\n  max: 500\n  max_bytes: 1048576\n  retention_days: 90\n", Records{Max: 500, MaxBytes: 1 << 20, RetentionDays: 90}},
		{"part of the object form", "c.json", `{"records": {"retention_days": 30}}`, Records{Max: 10000, MaxBytes: 256 << 20, RetentionDays: 30}},
	} {
		cfg, err := loadFile(t, tt.name, tt.content)
		if err != nil || cfg.Records != tt.want || cfg.RecordsMaxBytes != nil {
			t.Errorf("%s: %+v (%v), %v; want %+v", tt.desc, cfg.Records, cfg.RecordsMaxBytes, err, tt.want)
		}
	}
	if cfg, _ := loadFile(t, "c.json", `{"records": {"retention_days": 30}}`); cfg.Records.Retention() != 30*24*time.Hour {
		t.Errorf("30 days keep records %v", cfg.Records.Retention())
	}
	for _, tt := range []struct{ desc, content, says string }{
		{"both byte bounds", "records: {max_bytes: 1048576}\nrecords_max_bytes: 1048576\n", "both set"},
		{"a misspelt key", "records: {retention_dais: 3}\n", `unknown key "records.retention_dais"`},
		{"a negative retention", "records: {retention_days: -1}\n", "records retention_days"},
		{"a fraction of a record", "records: 1.5\n", "records"},
	} {
		if _, err := loadFile(t, "c.yaml", tt.content); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v", tt.desc, err)
		}
	}
}
