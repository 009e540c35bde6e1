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
	CacheTTLSeconds          *int
	// BudgetAlerts, when set, are the key's alert shares; ClearAlerts says a null was sent (the default).
	BudgetAlerts *[]float64
	ClearAlerts  bool
	Models       *[]string
	ExpiresAt    *time.Time
	ClearExpiry  bool
	Metadata     []byte
}

// MaxCacheTTLSeconds is the longest a key keeps its answers in the exact answer cache: 30 days.
const MaxCacheTTLSeconds = 30 * 24 * 3600

// fields are what a body may hold; anything else is refused by name.
var fields = []string{"name", "budget_usd", "budget_period", "budget_alerts", "rpm", "tpm", "max_concurrency", "cache_ttl_seconds", "models", "expires_at",
	"metadata"}

// MaxBudgetAlerts bounds a key's alert shares, each in (0, MaxAlertShare].
const (
	MaxBudgetAlerts = 10
	MaxAlertShare   = 10.0
)

// ReadChanges reads the JSON object of POST /admin/keys (creating: name is required, and an expiry
// must be after now) or of PATCH /admin/keys/:id (which may expire a key at once), and lists every
// problem it finds.
func ReadChanges(body []byte, creating bool, now time.Time) (Changes, problems.Errors) {
	var r changeReader
	if err := json.Unmarshal(body, &r.obj); err != nil || r.obj == nil {
		r.bad.Add("body", "must be a JSON object")
		return r.c, r.bad
	}
	r.refuseUnknown()
	r.readName(creating)
	r.readBudget()
	r.readPeriod()
	r.readLimits()
	r.readModels()
	r.readAlerts()
	r.readExpiry()
	if creating && r.c.ExpiresAt != nil && !now.Before(*r.c.ExpiresAt) {
		r.bad.Add("expires_at", "is not in the future: a key created already expired could never be used")
	}
	r.readMetadata()
	return r.c, r.bad
}

// changeReader holds a body's fields, the changes read from them so far and the problems found.
type changeReader struct {
	obj map[string]json.RawMessage
	c   Changes
	bad problems.Errors
}

// null reports whether the body sent null for the field name.
func (r *changeReader) null(name string) bool {
	return bytes.Equal(bytes.TrimSpace(r.obj[name]), []byte("null"))
}

// refuseUnknown adds a problem for every field that is not a field of a key.
func (r *changeReader) refuseUnknown() {
	for name := range r.obj {
		if !slices.Contains(fields, name) {
			r.bad.Add(name, "is not a field of a key (fields: "+strings.Join(fields, ", ")+")")
		}
	}
}

// readName reads name, which a creation must send.
func (r *changeReader) readName(creating bool) {
	raw, ok := r.obj["name"]
	if !ok {
		if creating {
			r.bad.Add("name", "is required")
		}
		return
	}
	var s string
	switch {
	case json.Unmarshal(raw, &s) != nil:
		r.bad.Add("name", "must be a string")
	case strings.TrimSpace(s) == "":
		r.bad.Add("name", "must not be empty")
	case len(s) > MaxNameBytes:
		r.bad.Add("name", fmt.Sprintf("must be at most %d bytes", MaxNameBytes))
	default:
		r.c.Name = &s
	}
}

// readBudget reads budget_usd; null clears the budget.
func (r *changeReader) readBudget() {
	raw, ok := r.obj["budget_usd"]
	if !ok {
		return
	}
	var b money.USD
	switch {
	case r.null("budget_usd"):
		r.c.ClearBudget = true
	case b.UnmarshalJSON(raw) != nil || b < 0 || b > MaxBudget:
		r.bad.Add("budget_usd", fmt.Sprintf("must be a decimal number of US dollars from 0 to %s with at most 9 decimals, or null for no budget", MaxBudget))
	default:
		r.c.Budget = &b
	}
}

// readPeriod reads budget_period; null stands for "", the key's whole life.
func (r *changeReader) readPeriod() {
	raw, ok := r.obj["budget_period"]
	if !ok {
		return
	}
	var s string
	if r.null("budget_period") {
		s = ""
	} else if json.Unmarshal(raw, &s) != nil {
		s = "?"
	}
	if p, ok := ParsePeriod(s); ok {
		r.c.Period = &p
	} else {
		r.bad.Add("budget_period", `must be "1d", "7d", "30d", or "" (or null) for the key's whole life`)
	}
}

// readLimits reads rpm, tpm and max_concurrency; null stands for 0, no limit.
func (r *changeReader) readLimits() {
	for _, f := range []struct {
		name string
		to   **int
		most int
		zero string
	}{{"rpm", &r.c.RPM, MaxLimit, "no limit"}, {"tpm", &r.c.TPM, MaxLimit, "no limit"}, {"max_concurrency", &r.c.MaxConcurrency, MaxLimit, "no limit"},
		{"cache_ttl_seconds", &r.c.CacheTTLSeconds, MaxCacheTTLSeconds, "no cache"}} {
		raw, ok := r.obj[f.name]
		if !ok {
			continue
		}
		var n int
		if r.null(f.name) {
			n = 0
		} else if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > f.most {
			r.bad.Add(f.name, fmt.Sprintf("must be a whole number from 0 (%s) to %d", f.zero, f.most))
			continue
		}
		*f.to = &n
	}
}

// readAlerts reads budget_alerts, shares of the budget (0.8 is 80 %), kept in order without repeats;
// null stands for the default.
func (r *changeReader) readAlerts() {
	raw, ok := r.obj["budget_alerts"]
	if !ok {
		return
	}
	if r.null("budget_alerts") {
		r.c.ClearAlerts = true
		return
	}
	var shares []float64
	if json.Unmarshal(raw, &shares) != nil || len(shares) > MaxBudgetAlerts {
		r.bad.Add("budget_alerts", fmt.Sprintf("must be a list of at most %d shares of the budget (0.8 is 80 %%), or null for %v", MaxBudgetAlerts, DefaultBudgetAlerts))
		return
	}
	for i, f := range shares {
		if !(f > 0 && f <= MaxAlertShare) {
			r.bad.Add(fmt.Sprintf("budget_alerts[%d]", i), fmt.Sprintf("must be a share of the budget above 0 and at most %g", MaxAlertShare))
			return
		}
	}
	slices.Sort(shares)
	shares = slices.Compact(shares)
	r.c.BudgetAlerts = &shares
}

// readModels reads models, a list of globs; null stands for the empty list.
func (r *changeReader) readModels() {
	raw, ok := r.obj["models"]
	if !ok {
		return
	}
	var globs []string
	if r.null("models") {
		globs = []string{}
	} else if json.Unmarshal(raw, &globs) != nil {
		r.bad.Add("models", `must be a list of globs over model ids, such as ["openai/*", "conclave/*"]`)
	}
	if len(globs) > MaxGlobs {
		r.bad.Add("models", fmt.Sprintf("must hold at most %d globs", MaxGlobs))
	}
	for i, g := range globs[:min(len(globs), MaxGlobs)] {
		if g == "" || len(g) > MaxGlobBytes {
			r.bad.Add(fmt.Sprintf("models[%d]", i), fmt.Sprintf("must be a glob of 1 to %d bytes", MaxGlobBytes))
		}
	}
	if globs != nil {
		r.c.Models = &globs
	}
}

// readExpiry reads expires_at; null clears the expiry.
func (r *changeReader) readExpiry() {
	raw, ok := r.obj["expires_at"]
	if !ok {
		return
	}
	var s string
	if r.null("expires_at") {
		r.c.ClearExpiry = true
	} else if t, err := time.Parse(time.RFC3339, unquote(raw, &s)); err != nil || s == "" {
		r.bad.Add("expires_at", "must be a time in RFC 3339 (2027-01-31T00:00:00Z), or null for never")
	} else {
		t = t.UTC()
		r.c.ExpiresAt = &t
	}
}

// readMetadata reads metadata, a JSON object kept compact; null stands for the empty object.
func (r *changeReader) readMetadata() {
	raw, ok := r.obj["metadata"]
	if !ok {
		return
	}
	var m map[string]any
	switch {
	case r.null("metadata"):
		r.c.Metadata = []byte("{}")
	case json.Unmarshal(raw, &m) != nil || m == nil:
		r.bad.Add("metadata", "must be a JSON object")
	case len(raw) > MaxMetadataBytes:
		r.bad.Add("metadata", fmt.Sprintf("must be at most %d bytes", MaxMetadataBytes))
	default:
		r.c.Metadata, _ = json.Marshal(m) // compact, and the same bytes whatever the spacing sent
	}
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
	}{{c.RPM, &k.RPM}, {c.TPM, &k.TPM}, {c.MaxConcurrency, &k.MaxConcurrency}, {c.CacheTTLSeconds, &k.CacheTTLSeconds}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if c.Models != nil {
		k.Models = slices.Clone(*c.Models)
	}
	switch {
	case c.ClearAlerts:
		k.BudgetAlerts = nil
	case c.BudgetAlerts != nil:
		k.BudgetAlerts = slices.Clone(*c.BudgetAlerts)
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
