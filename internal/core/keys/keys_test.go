package keys

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		desc, glob, model string
		want              bool
	}{
		{"a star matches a provider's every model", "openai/*", "openai/gpt-4o", true},
		{"a star matches slashes too", "openai/*", "openai/org/gpt-4o", true},
		{"another provider's model does not match", "openai/*", "anthropic/claude-3", false},
		{"a lone star matches everything", "*", "conclave/auto", true},
		{"a lone star matches the empty id", "*", "", true},
		{"no star matches only itself", "openai/gpt-4o", "openai/gpt-4o", true},
		{"no star is no prefix", "openai/gpt-4o", "openai/gpt-4o-mini", false},
		{"a star inside", "*/gpt-*-mini", "openai/gpt-4o-mini", true},
		{"a star inside needs the rest", "*/gpt-*-mini", "openai/gpt-4o", false},
		{"backtracking over a false start", "a*ab", "aaab", true},
		{"stars in a row", "a**b", "ab", true},
		{"a glob longer than the id", "openai/*x", "openai/", false},
		{"the glob's characters are not patterns", "open?i/*", "openai/x", false},
	} {
		if got := Match(c.glob, c.model); got != c.want {
			t.Errorf("%s: Match(%q, %q) = %v", c.desc, c.glob, c.model, got)
		}
	}
}

func TestAllows(t *testing.T) {
	if !(Key{}).Allows("any/model") {
		t.Error("a key without globs must allow every model")
	}
	k := Key{Allowance: Allowance{Models: []string{"openai/*", "conclave/*"}}}
	for model, want := range map[string]bool{"openai/gpt-4o": true, "conclave/auto": true, "groq/llama": false} {
		if got := k.Allows(model); got != want {
			t.Errorf("Allows(%q) = %v", model, got)
		}
	}
}

func TestPeriods(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		desc       string
		period     Period
		now        time.Time
		start, end time.Time
	}{
		{"a lifetime starts at creation and never ends", Lifetime, created.Add(400 * 24 * time.Hour), created, time.Time{}},
		{"the first day", Day, created.Add(3 * time.Hour), created, created.Add(24 * time.Hour)},
		{"the day's last instant is still the first day", Day, created.Add(24*time.Hour - 1), created, created.Add(24 * time.Hour)},
		{"the second day starts on the hour of creation", Day, created.Add(24 * time.Hour), created.Add(24 * time.Hour), created.Add(48 * time.Hour)},
		{"weeks follow each other", Week, created.Add(15 * 24 * time.Hour), created.Add(14 * 24 * time.Hour), created.Add(21 * 24 * time.Hour)},
		{"30 days", Month, created.Add(31 * 24 * time.Hour), created.Add(30 * 24 * time.Hour), created.Add(60 * 24 * time.Hour)},
		{"a clock behind the creation is in the first period", Day, created.Add(-time.Hour), created, created.Add(24 * time.Hour)},
	} {
		if got := c.period.Start(created, c.now); !got.Equal(c.start) {
			t.Errorf("%s: start %v, want %v", c.desc, got, c.start)
		}
		if got := c.period.End(created, c.now); !got.Equal(c.end) {
			t.Errorf("%s: end %v, want %v", c.desc, got, c.end)
		}
	}
}

func TestBudgetsAndUse(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := created.Add(36 * time.Hour)
	budget := money.Dollar
	past := now.Add(-time.Minute)
	k := Key{CreatedAt: created, Allowance: Allowance{PeriodOrigin: created, Budget: &budget, Period: Day,
		Spend: Spend{PeriodStart: created.Add(24 * time.Hour), Period: money.Dollar, Total: 3 * money.Dollar}}}
	if !k.OverBudget(now) {
		t.Error("a key that spent its budget in this period must be over it")
	}
	if k.OverBudget(created.Add(50 * time.Hour)) {
		t.Error("the next period starts from nothing")
	}
	k.Spend.PeriodStart = created // the spend kept is an earlier period's
	if k.Spent(now) != 0 || k.OverBudget(now) {
		t.Error("an earlier period's spend counts for nothing now")
	}
	if (Key{Allowance: Allowance{Spend: Spend{Period: 100}}}).OverBudget(now) {
		t.Error("a key without a budget is never over it")
	}
	for _, c := range []struct {
		desc   string
		key    Key
		want   error
		status string
	}{
		{"a fresh key", Key{}, nil, "active"},
		{"a revoked key", Key{RevokedAt: &past}, ErrRevoked, "revoked"},
		{"an expired key", Key{ExpiresAt: &past}, ErrExpired, "expired"},
		{"a key expiring now has expired", Key{ExpiresAt: &now}, ErrExpired, "expired"},
		{"a key that spent its budget", Key{Allowance: Allowance{Budget: &budget, Spend: Spend{Period: budget}}}, nil, "over_budget"},
	} {
		if err := c.key.Usable(now); err != c.want || c.key.Status(now) != c.status {
			t.Errorf("%s: Usable %v, Status %q", c.desc, err, c.key.Status(now))
		}
	}
}

func TestSecretsAndIDs(t *testing.T) {
	rand := bytes.NewReader(bytes.Repeat([]byte{0xfb}, 64))
	s, err := NewSecret(rand)
	if err != nil || !strings.HasPrefix(s, "ck-") || len(s) != 3+43 || strings.ContainsAny(s[3:], "+/=") {
		t.Fatalf("secret %q, %v", s, err)
	}
	if !LooksLikeSecret(s) || LooksLikeSecret("an-admin-token-0123456789") {
		t.Error("a secret is told by its prefix")
	}
	if h := Hash(s); len(h) != 32 || bytes.Equal(h, Hash(s+"x")) {
		t.Error("a hash is SHA-256's, one per secret")
	}
	id, err := NewID(rand)
	if err != nil || !strings.HasPrefix(id, "key_") || len(id) != 4+16 {
		t.Fatalf("id %q, %v", id, err)
	}
	if _, err := NewSecret(bytes.NewReader(nil)); err == nil {
		t.Error("a secret needs its random bytes")
	}
}

func TestReadChanges(t *testing.T) {
	for _, c := range []struct {
		desc     string
		body     string
		creating bool
		bad      []string // fields with problems
		check    func(Changes) bool
	}{
		{"a full creation", `{"name":"team-a","budget_usd":5,"budget_period":"7d","rpm":2,"tpm":1000,"max_concurrency":3,
			"models":["openai/*"],"expires_at":"2027-01-31T00:00:00+01:00","metadata":{"team": "a"}}`, true, nil,
			func(c Changes) bool {
				return *c.Name == "team-a" && *c.Budget == 5*money.Dollar && *c.Period == Week && *c.RPM == 2 && *c.TPM == 1000 && *c.MaxConcurrency == 3 &&
					(*c.Models)[0] == "openai/*" && c.ExpiresAt.Equal(time.Date(2027, 1, 30, 23, 0, 0, 0, time.UTC)) && string(c.Metadata) == `{"team":"a"}`
			}},
		{"a creation needs a name", `{"rpm":2}`, true, []string{"name"}, nil},
		{"budget alerts, in order, once each", `{"budget_alerts":[1,0.5,0.5]}`, false, nil,
			func(c Changes) bool {
				return len(*c.BudgetAlerts) == 2 && (*c.BudgetAlerts)[0] == 0.5 && (*c.BudgetAlerts)[1] == 1
			}},
		{"budget alerts null: the default", `{"budget_alerts":null}`, false, nil, func(c Changes) bool { return c.ClearAlerts }},
		{"a budget alert of no share", `{"budget_alerts":[0]}`, false, []string{"budget_alerts[0]"}, nil},
		{"a creation already expired is refused", `{"name":"late","expires_at":"2025-12-31T23:59:59Z"}`, true, []string{"expires_at"}, nil},
		{"an update may expire a key at once", `{"expires_at":"2025-12-31T23:59:59Z"}`, false, nil,
			func(c Changes) bool { return c.ExpiresAt.Equal(time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC)) }},
		{"a budget is exact", `{"budget_usd":0.1}`, false, nil, func(c Changes) bool { return *c.Budget == money.Dollar/10 }},
		{"a budget as a decimal string", `{"budget_usd":"12.000000001"}`, false, nil, func(c Changes) bool { return *c.Budget == 12*money.Dollar+1 }},
		{"a budget finer than a nano-dollar", `{"budget_usd":0.0000000001}`, false, []string{"budget_usd"}, nil},
		{"a budget past the most a ledger holds exactly", `{"budget_usd":9000000.000000001}`, false, []string{"budget_usd"}, nil},
		{"an update does not", `{"rpm":2}`, false, nil, func(c Changes) bool { return c.Name == nil && *c.RPM == 2 }},
		{"nulls clear", `{"budget_usd":null,"expires_at":null,"models":null}`, false, nil,
			func(c Changes) bool { return c.ClearBudget && c.ClearExpiry && len(*c.Models) == 0 }},
		{"every problem at once", `{"name":"","budget_usd":-1,"budget_period":"2d","rpm":1.5,"tpm":-3,"max_concurrency":"x",
			"models":["",3],"expires_at":"tomorrow","metadata":[1],"key":"ck-mine"}`, false,
			[]string{"name", "budget_usd", "budget_period", "rpm", "tpm", "max_concurrency", "models", "expires_at", "metadata", "key"}, nil},
		{"a glob too long", `{"models":["` + strings.Repeat("a", MaxGlobBytes+1) + `"]}`, false, []string{"models[0]"}, nil},
		{"not an object", `[1]`, false, []string{"body"}, nil},
	} {
		got, bad := ReadChanges([]byte(c.body), c.creating, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		var fields []string
		for _, p := range bad {
			fields = append(fields, p.Field)
		}
		for _, f := range c.bad {
			found := false
			for _, g := range fields {
				found = found || g == f
			}
			if !found {
				t.Errorf("%s: no problem with %s among %v", c.desc, f, bad)
			}
		}
		if len(c.bad) == 0 && len(bad) > 0 {
			t.Errorf("%s: problems %v", c.desc, bad)
		}
		if c.check != nil && len(bad) == 0 && !c.check(got) {
			t.Errorf("%s: read %+v", c.desc, got)
		}
	}
}

func TestApply(t *testing.T) {
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	budget, rpm := 2*money.Dollar, 0
	k := Key{Name: "old", Allowance: Allowance{Budget: &budget, RPM: 5, Models: []string{"*"}}}
	models := []string{"groq/*"}
	got := Changes{ClearBudget: true, RPM: &rpm, Models: &models}.Apply(k, now)
	if got.Budget != nil || got.RPM != 0 || got.Models[0] != "groq/*" || got.Name != "old" || !got.UpdatedAt.Equal(now) || string(got.Metadata) != "{}" {
		t.Fatalf("applied: %+v", got)
	}
	if *k.Budget != 2*money.Dollar || k.RPM != 5 || k.Models[0] != "*" {
		t.Error("applying changed the key it was given")
	}
}

// TestCrossed: the shares of the budget the spend in the period reached, the default ones for a key
// that names none; nothing without a budget.
func TestCrossed(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	budget := money.Dollar
	for _, c := range []struct {
		desc  string
		key   Key
		spent money.USD
		want  []float64
	}{
		{"below every share", Key{Allowance: Allowance{Budget: &budget}}, money.Dollar / 2, nil},
		{"past 80 %, the default's first", Key{Allowance: Allowance{Budget: &budget}}, money.Dollar * 8 / 10, []float64{0.8}},
		{"the whole budget", Key{Allowance: Allowance{Budget: &budget}}, money.Dollar, []float64{0.8, 1.0}},
		{"a key's own shares", Key{Allowance: Allowance{Budget: &budget, BudgetAlerts: []float64{0.25, 0.5}}}, money.Dollar * 3 / 10, []float64{0.25}},
		{"no budget, no alert", Key{}, money.Dollar * 9, nil},
	} {
		c.key.Spend = Spend{PeriodStart: c.key.PeriodStart(now), Period: c.spent}
		if got := c.key.Crossed(now); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.desc, got, c.want)
		}
	}
}

// TestTeamChanges: a team's body holds a team's fields only; a key's team_id is a team's id or null.
func TestTeamChanges(t *testing.T) {
	c, bad := ReadTeamChanges([]byte(`{"name":"research","budget_usd":10,"budget_period":"30d","rpm":60,"tpm":0,"max_concurrency":4,
		"models":["openai/*"],"budget_alerts":[0.5],"metadata":{"cost_center":"42"}}`), true)
	if len(bad) > 0 || *c.Name != "research" || *c.Budget != 10*money.Dollar || *c.Period == Lifetime || *c.MaxConcurrency != 4 {
		t.Fatalf("a full team: %+v, %v", c, bad)
	}
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	team := c.ApplyTeam(Team{ID: "team_x", CreatedAt: now, Allowance: Allowance{PeriodOrigin: now}}, now)
	if *team.Budget != 10*money.Dollar || team.RPM != 60 || team.Models[0] != "openai/*" || string(team.Metadata) != `{"cost_center":"42"}` {
		t.Fatalf("applied: %+v", team)
	}
	_, bad = ReadTeamChanges([]byte(`{"rpm":1,"expires_at":null,"cache_ttl_seconds":5,"team_id":"team_y"}`), false)
	if got := fieldsOf(bad); !slices.Equal(got, []string{"cache_ttl_seconds", "expires_at", "team_id"}) {
		t.Errorf("a key's fields on a team: %v", got)
	}
	if _, bad := ReadTeamChanges([]byte(`{"rpm":1}`), true); !slices.Equal(fieldsOf(bad), []string{"name"}) {
		t.Errorf("a team needs a name: %v", bad)
	}
	for _, c := range []struct {
		desc, body string
		want       *string
		bad        bool
	}{
		{"a team's id", `{"team_id":"team_abc"}`, ptr("team_abc"), false},
		{"null leaves the team", `{"team_id":null}`, ptr(""), false},
		{"not a team's id", `{"team_id":"key_abc"}`, nil, true},
		{"not a string", `{"team_id":7}`, nil, true},
	} {
		got, bad := ReadChanges([]byte(c.body), false, now)
		if (len(bad) > 0) != c.bad || (c.want != nil && (got.TeamID == nil || *got.TeamID != *c.want)) {
			t.Errorf("%s: %v, %v", c.desc, got.TeamID, bad)
		}
	}
	if k := (Changes{TeamID: ptr("team_abc")}).Apply(Key{}, now); k.TeamID != "team_abc" {
		t.Errorf("a key moved to a team: %q", k.TeamID)
	}
	id, err := NewTeamID(strings.NewReader(strings.Repeat("r", 12)))
	if err != nil || !IsTeamID(id) || IsTeamID("key_abc") {
		t.Errorf("team id %q, %v", id, err)
	}
}

func fieldsOf(bad problems.Errors) []string {
	var out []string
	for _, p := range bad {
		out = append(out, p.Field)
	}
	slices.Sort(out)
	return out
}

func ptr[T any](v T) *T { return &v }
