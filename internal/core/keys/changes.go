package keys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
)

// Bounds of what a key may hold.
const (
	MaxNameBytes     = 128
	MaxGlobs         = 100
	MaxGlobBytes     = 256
	MaxMetadataBytes = 4096
	MaxLimit         = 1_000_000_000
	// MaxBudget keeps a budget, and what is spent and held against it, below 2^53 nano-dollars: the
	// shared ledger's Lua arithmetic is in doubles, exact up to there.
	MaxBudget = 9_000_000 * money.Dollar
)

// Changes are the fields a creation or an update sets; a nil field is left as it is. ClearBudget and
// ClearExpiry say that a null was sent for budget_usd or expires_at.
type Changes struct {
	Name                     *string
	Budget                   *money.USD
	ClearBudget              bool
	Period                   *Period
	RPM, TPM, MaxConcurrency *int
	Models                   *[]string
	ExpiresAt                *time.Time
	ClearExpiry              bool
	Metadata                 []byte
}

// fields are what a body may hold; anything else is refused by name.
var fields = []string{"name", "budget_usd", "budget_period", "rpm", "tpm", "max_concurrency", "models", "expires_at", "metadata"}

// ReadChanges reads the JSON object of POST /admin/keys (creating: name is required) or of PATCH
// /admin/keys/:id, and lists every problem it finds.
func ReadChanges(body []byte, creating bool) (Changes, problems.Errors) {
	var c Changes
	var bad problems.Errors
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		bad.Add("body", "must be a JSON object")
		return c, bad
	}
	for name := range obj {
		if !slices.Contains(fields, name) {
			bad.Add(name, "is not a field of a key (fields: "+strings.Join(fields, ", ")+")")
		}
	}
	null := func(name string) bool { return bytes.Equal(bytes.TrimSpace(obj[name]), []byte("null")) }
	if raw, ok := obj["name"]; ok {
		var s string
		switch {
		case json.Unmarshal(raw, &s) != nil:
			bad.Add("name", "must be a string")
		case strings.TrimSpace(s) == "":
			bad.Add("name", "must not be empty")
		case len(s) > MaxNameBytes:
			bad.Add("name", fmt.Sprintf("must be at most %d bytes", MaxNameBytes))
		default:
			c.Name = &s
		}
	} else if creating {
		bad.Add("name", "is required")
	}
	if raw, ok := obj["budget_usd"]; ok {
		var b money.USD
		switch {
		case null("budget_usd"):
			c.ClearBudget = true
		case b.UnmarshalJSON(raw) != nil || b < 0 || b > MaxBudget:
			bad.Add("budget_usd", fmt.Sprintf("must be a decimal number of US dollars from 0 to %s with at most 9 decimals, or null for no budget", MaxBudget))
		default:
			c.Budget = &b
		}
	}
	if raw, ok := obj["budget_period"]; ok {
		var s string
		if null("budget_period") {
			s = ""
		} else if json.Unmarshal(raw, &s) != nil {
			s = "?"
		}
		if p, ok := ParsePeriod(s); ok {
			c.Period = &p
		} else {
			bad.Add("budget_period", `must be "1d", "7d", "30d", or "" (or null) for the key's whole life`)
		}
	}
	for _, f := range []struct {
		name string
		to   **int
	}{{"rpm", &c.RPM}, {"tpm", &c.TPM}, {"max_concurrency", &c.MaxConcurrency}} {
		raw, ok := obj[f.name]
		if !ok {
			continue
		}
		var n int
		if null(f.name) {
			n = 0
		} else if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > MaxLimit {
			bad.Add(f.name, fmt.Sprintf("must be a whole number from 0 (no limit) to %d", MaxLimit))
			continue
		}
		*f.to = &n
	}
	if raw, ok := obj["models"]; ok {
		var globs []string
		if null("models") {
			globs = []string{}
		} else if json.Unmarshal(raw, &globs) != nil {
			bad.Add("models", `must be a list of globs over model ids, such as ["openai/*", "conclave/*"]`)
		}
		if len(globs) > MaxGlobs {
			bad.Add("models", fmt.Sprintf("must hold at most %d globs", MaxGlobs))
		}
		for i, g := range globs[:min(len(globs), MaxGlobs)] {
			if g == "" || len(g) > MaxGlobBytes {
				bad.Add(fmt.Sprintf("models[%d]", i), fmt.Sprintf("must be a glob of 1 to %d bytes", MaxGlobBytes))
			}
		}
		if globs != nil {
			c.Models = &globs
		}
	}
	if raw, ok := obj["expires_at"]; ok {
		var s string
		if null("expires_at") {
			c.ClearExpiry = true
		} else if t, err := time.Parse(time.RFC3339, unquote(raw, &s)); err != nil || s == "" {
			bad.Add("expires_at", "must be a time in RFC 3339 (2027-01-31T00:00:00Z), or null for never")
		} else {
			t = t.UTC()
			c.ExpiresAt = &t
		}
	}
	if raw, ok := obj["metadata"]; ok {
		var m map[string]any
		switch {
		case null("metadata"):
			c.Metadata = []byte("{}")
		case json.Unmarshal(raw, &m) != nil || m == nil:
			bad.Add("metadata", "must be a JSON object")
		case len(raw) > MaxMetadataBytes:
			bad.Add("metadata", fmt.Sprintf("must be at most %d bytes", MaxMetadataBytes))
		default:
			c.Metadata, _ = json.Marshal(m) // compact, and the same bytes whatever the spacing sent
		}
	}
	return c, bad
}

// unquote reads a JSON string into s and returns it ("" when raw is not a string).
func unquote(raw json.RawMessage, s *string) string {
	if json.Unmarshal(raw, s) != nil {
		*s = ""
	}
	return *s
}

// Apply returns k with the changes made, at now.
func (c Changes) Apply(k Key, now time.Time) Key {
	if c.Name != nil {
		k.Name = *c.Name
	}
	switch {
	case c.ClearBudget:
		k.Budget = nil
	case c.Budget != nil:
		b := *c.Budget
		k.Budget = &b
	}
	if c.Period != nil {
		k.Period = *c.Period
	}
	for _, f := range []struct {
		from *int
		to   *int
	}{{c.RPM, &k.RPM}, {c.TPM, &k.TPM}, {c.MaxConcurrency, &k.MaxConcurrency}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if c.Models != nil {
		k.Models = slices.Clone(*c.Models)
	}
	switch {
	case c.ClearExpiry:
		k.ExpiresAt = nil
	case c.ExpiresAt != nil:
		t := *c.ExpiresAt
		k.ExpiresAt = &t
	}
	if c.Metadata != nil {
		k.Metadata = c.Metadata
	}
	if len(k.Metadata) == 0 {
		k.Metadata = []byte("{}")
	}
	k.UpdatedAt = now
	return k
}
