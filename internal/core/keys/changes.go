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

// Changes are the fields a creation or an update of a key or a team sets; a nil field is left as it
// is. ClearBudget and ClearExpiry say that a null was sent for budget_usd or expires_at.
type Changes struct {
	Name *string
	// TeamID, when set, moves a key to a team ("": to none).
	TeamID                   *string
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

// keyFields and teamFields are what a key's or a team's body may hold; anything else is refused by name.
var (
	keyFields = []string{"name", "team_id", "budget_usd", "budget_period", "budget_alerts", "rpm", "tpm", "max_concurrency", "cache_ttl_seconds", "models",
		"expires_at", "metadata"}
	teamFields = []string{"name", "budget_usd", "budget_period", "budget_alerts", "rpm", "tpm", "max_concurrency", "models", "metadata"}
)

// MaxBudgetAlerts bounds a key's alert shares, each in (0, MaxAlertShare].
const (
	MaxBudgetAlerts = 10
	MaxAlertShare   = 10.0
)

// ReadChanges reads the JSON object of POST /admin/keys (creating: name is required, and an expiry
// must be after now) or of PATCH /admin/keys/:id (which may expire a key at once), and lists every
// problem it finds.
func ReadChanges(body []byte, creating bool, now time.Time) (Changes, problems.Errors) {
	r, ok := readBody(body, "key", keyFields, creating)
	if !ok {
		return r.c, r.bad
	}
	r.readTeam()
	r.readExpiry()
	if creating && r.c.ExpiresAt != nil && !now.Before(*r.c.ExpiresAt) {
		r.bad.Add("expires_at", "is not in the future: a key created already expired could never be used")
	}
	return r.c, r.bad
}

// ReadTeamChanges reads the JSON object of POST /admin/teams (creating: name is required) or of PATCH
// /admin/teams/:id, and lists every problem it finds.
func ReadTeamChanges(body []byte, creating bool) (Changes, problems.Errors) {
	r, _ := readBody(body, "team", teamFields, creating)
	return r.c, r.bad
}

// readBody reads what keys and teams share of a body; ok is false when it is no JSON object.
func readBody(body []byte, what string, fields []string, creating bool) (*changeReader, bool) {
	r := &changeReader{what: what, fields: fields}
	if err := json.Unmarshal(body, &r.obj); err != nil || r.obj == nil {
		r.bad.Add("body", "must be a JSON object")
		return r, false
	}
	r.refuseUnknown()
	r.readName(creating)
	r.readBudget()
	r.readPeriod()
	r.readLimits()
	r.readModels()
	r.readAlerts()
	r.readMetadata()
	return r, true
}

// changeReader holds a body's fields, the changes read from them so far and the problems found.
type changeReader struct {
	what   string // "key" or "team"
	fields []string
	obj    map[string]json.RawMessage
	c      Changes
	bad    problems.Errors
}

// null reports whether the body sent null for the field name.
func (r *changeReader) null(name string) bool {
	return bytes.Equal(bytes.TrimSpace(r.obj[name]), []byte("null"))
}

// refuseUnknown adds a problem for every field that is not a field of a key (or team).
func (r *changeReader) refuseUnknown() {
	for name := range r.obj {
		if !slices.Contains(r.fields, name) {
			r.bad.Add(name, "is not a field of a "+r.what+" (fields: "+strings.Join(r.fields, ", ")+")")
		}
	}
}

// readTeam reads team_id: a team's id, or null (or "") for none. Whether the team exists is the
// store's to say.
func (r *changeReader) readTeam() {
	raw, ok := r.obj["team_id"]
	if !ok {
		return
	}
	var s string
	switch {
	case r.null("team_id"):
	case json.Unmarshal(raw, &s) != nil || (s != "" && (!IsTeamID(s) || len(s) > MaxNameBytes)):
		r.bad.Add("team_id", `must be a team's id ("`+TeamPrefix+`…"), or null for none`)
		return
	}
	r.c.TeamID = &s
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
		r.bad.Add("budget_period", `must be "1d", "7d", "30d", or "" (or null) for the `+r.what+`'s whole life`)
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
		if !slices.Contains(r.fields, f.name) {
			continue
		}
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
	if c.TeamID != nil {
		k.TeamID = *c.TeamID
	}
	k.Allowance = c.applyAllowance(k.Allowance)
	if c.CacheTTLSeconds != nil {
		k.CacheTTLSeconds = *c.CacheTTLSeconds
	}
	switch {
	case c.ClearExpiry:
		k.ExpiresAt = nil
	case c.ExpiresAt != nil:
		t := *c.ExpiresAt
		k.ExpiresAt = &t
	}
	k.Metadata = c.metadata(k.Metadata)
	k.UpdatedAt = now
	return k
}

// ApplyTeam returns t with the changes made, at now.
func (c Changes) ApplyTeam(t Team, now time.Time) Team {
	if c.Name != nil {
		t.Name = *c.Name
	}
	t.Allowance = c.applyAllowance(t.Allowance)
	t.Metadata = c.metadata(t.Metadata)
	t.UpdatedAt = now
	return t
}

// applyAllowance returns a with the changes to its budget, limits, models and alerts made.
func (c Changes) applyAllowance(a Allowance) Allowance {
	switch {
	case c.ClearBudget:
		a.Budget = nil
	case c.Budget != nil:
		b := *c.Budget
		a.Budget = &b
	}
	if c.Period != nil {
		a.Period = *c.Period
	}
	for _, f := range []struct {
		from *int
		to   *int
	}{{c.RPM, &a.RPM}, {c.TPM, &a.TPM}, {c.MaxConcurrency, &a.MaxConcurrency}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if c.Models != nil {
		a.Models = slices.Clone(*c.Models)
	}
	switch {
	case c.ClearAlerts:
		a.BudgetAlerts = nil
	case c.BudgetAlerts != nil:
		a.BudgetAlerts = slices.Clone(*c.BudgetAlerts)
	}
	return a
}

// metadata is the metadata after the changes: "{}" for none.
func (c Changes) metadata(m []byte) []byte {
	if c.Metadata != nil {
		m = c.Metadata
	}
	if len(m) == 0 {
		m = []byte("{}")
	}
	return m
}
