// Package keys owns what an API key is and what it allows: its limits, its budget and the periods the
// budget counts over, the globs of the models it may call, and the decisions made on them (may this
// key ask now, may it call this model). It does no I/O: the key store keeps keys, the engine enforces
// the decisions.
package keys

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
)

// ErrUnavailable wraps a failure to reach the store of keys.
var ErrUnavailable = errors.New("the key store is unavailable")

// Allowance is what a key and a team each hold: a budget over periods, request limits, the models
// allowed, and what was spent against the budget. A request is held to its key's and its team's.
type Allowance struct {
	// Budget is the most that may be spent in a period; nil is no budget.
	Budget *money.USD
	Period Period
	// PeriodOrigin is when the periods start counting from: the creation, or the last change of the
	// period (which starts its spend afresh).
	PeriodOrigin time.Time
	// RPM, TPM and MaxConcurrency limit requests per minute, tokens per minute and requests at once;
	// zero is no limit.
	RPM, TPM, MaxConcurrency int
	// Models are globs over model ids ("*" matches any run of characters, "/" included); empty allows
	// every model.
	Models []string
	// BudgetAlerts are the shares of the budget whose crossing, once per period, is told (the
	// budget_alert event and the alerts webhook); nil is DefaultBudgetAlerts.
	BudgetAlerts []float64
	Spend        Spend
}

// Key is one caller's API key, as stored (the secret only as its hash).
type Key struct {
	ID   string
	Name string
	// TeamID is the team the key belongs to, whose allowance holds it too; "" for none.
	TeamID string
	Allowance
	// ExpiresAt, when set, is when the key stops working.
	ExpiresAt *time.Time
	// CacheTTLSeconds, when positive, keeps the answers to the key's requests in the exact answer
	// cache that long (a request's own choice comes first).
	CacheTTLSeconds int
	// Metadata is the caller's own JSON object, kept as given.
	Metadata              []byte
	CreatedAt, UpdatedAt  time.Time
	RevokedAt, LastUsedAt *time.Time
}

// Team is a group of keys with an allowance of its own, shared by its keys: their requests together
// are held to the team's limits and budget, each also to its key's.
type Team struct {
	ID   string
	Name string
	Allowance
	Metadata             []byte
	CreatedAt, UpdatedAt time.Time
}

// Holder is a key or a team that a request and its calls are held to: what it is ("API key" or
// "team", as refusals name it), its id and its allowance.
type Holder struct {
	What, ID string
	Allowance
}

// Holders are what a key's requests are held to: the key, then its team when it has one.
func Holders(k Key, team *Team) []Holder {
	out := []Holder{{"API key", k.ID, k.Allowance}}
	if team != nil {
		out = append(out, Holder{"team", team.ID, team.Allowance})
	}
	return out
}

// PeriodStart is when the budget period that holds now began.
func (a Allowance) PeriodStart(now time.Time) time.Time { return a.Period.Start(a.PeriodOrigin, now) }

// PeriodEnd is when the budget period that holds now ends; zero for a lifetime budget.
func (a Allowance) PeriodEnd(now time.Time) time.Time { return a.Period.End(a.PeriodOrigin, now) }

// Spend is what was spent: in the budget period that began at PeriodStart, and in all.
type Spend struct {
	PeriodStart time.Time
	Period      money.USD
	Total       money.USD
}

// Errors of a key that may not be used. They are the caller's to read: they name no secret.
var (
	ErrUnknown = errors.New("no such API key")
	ErrRevoked = errors.New("the API key was revoked")
	ErrExpired = errors.New("the API key has expired")
)

// Usable reports why a key may not be used at now, or nil.
func (k Key) Usable(now time.Time) error {
	switch {
	case k.RevokedAt != nil:
		return ErrRevoked
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return ErrExpired
	}
	return nil
}

// Status names a key's state at now: revoked, expired, over_budget (usable again when its period
// turns, or its budget is raised) or active.
func (k Key) Status(now time.Time) string {
	switch k.Usable(now) {
	case ErrRevoked:
		return "revoked"
	case ErrExpired:
		return "expired"
	}
	if k.OverBudget(now) {
		return "over_budget"
	}
	return "active"
}

// Spent is what was spent in the period that holds now: nothing when the stored spend counts an
// earlier period.
func (a Allowance) Spent(now time.Time) money.USD {
	if a.Spend.PeriodStart.Equal(a.PeriodStart(now)) {
		return a.Spend.Period
	}
	return 0
}

// DefaultBudgetAlerts are the shares of a budget told when crossed, unless a key or team says others.
var DefaultBudgetAlerts = []float64{0.8, 1.0}

// Alerts are the shares of the budget told when crossed.
func (a Allowance) Alerts() []float64 {
	if a.BudgetAlerts == nil {
		return DefaultBudgetAlerts
	}
	return a.BudgetAlerts
}

// Crossed are the shares of the budget that the spend in the period that holds now has reached, in
// order; none without a budget.
func (a Allowance) Crossed(now time.Time) []float64 {
	if a.Budget == nil || *a.Budget <= 0 {
		return nil
	}
	var out []float64
	spent := float64(a.Spent(now)) / float64(*a.Budget)
	for _, f := range a.Alerts() {
		if spent >= f {
			out = append(out, f)
		}
	}
	return out
}

// OverBudget reports whether the budget is spent in the period that holds now.
func (a Allowance) OverBudget(now time.Time) bool {
	return a.Budget != nil && a.Spent(now) >= *a.Budget
}

// Allows reports whether a model may be called.
func (a Allowance) Allows(model string) bool { return len(a.Models) == 0 || Matches(a.Models, model) }

// Matches reports whether one of globs matches a model id.
func Matches(globs []string, model string) bool {
	for _, g := range globs {
		if Match(g, model) {
			return true
		}
	}
	return false
}

// Match reports whether a glob matches a whole model id: "*" matches any run of characters, slashes
// included; every other character matches itself.
func Match(glob, s string) bool {
	// The classic greedy match with one backtrack point: linear enough for ids of a few hundred bytes.
	g, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case g < len(glob) && glob[g] == '*':
			star, mark = g, i
			g++
		case g < len(glob) && glob[g] == s[i]:
			g++
			i++
		case star >= 0:
			g, mark = star+1, mark+1
			i = mark
		default:
			return false
		}
	}
	for g < len(glob) && glob[g] == '*' {
		g++
	}
	return g == len(glob)
}

// Period is how long a budget lasts before it starts again: a day, a week, 30 days, or the key's whole
// life (zero).
type Period time.Duration

// The periods a budget may have.
const (
	Lifetime Period = 0
	Day             = Period(24 * time.Hour)
	Week            = 7 * Day
	Month           = 30 * Day
)

// ParsePeriod reads "1d", "7d", "30d" or "" (the key's whole life).
func ParsePeriod(s string) (Period, bool) {
	switch s {
	case "":
		return Lifetime, true
	case "1d":
		return Day, true
	case "7d":
		return Week, true
	case "30d":
		return Month, true
	}
	return 0, false
}

func (p Period) String() string {
	switch p {
	case Day:
		return "1d"
	case Week:
		return "7d"
	case Month:
		return "30d"
	}
	return ""
}

// Start is when the period that holds now began: periods follow each other from their origin (the key's
// or team's creation, or the last change of its period).
func (p Period) Start(created, now time.Time) time.Time {
	created = created.UTC().Truncate(time.Microsecond) // as PostgreSQL keeps it
	if p <= 0 || now.Before(created) {
		return created
	}
	n := now.Sub(created) / time.Duration(p)
	return created.Add(n * time.Duration(p))
}

// End is when the period that holds now ends; zero for a lifetime.
func (p Period) End(created, now time.Time) time.Time {
	if p <= 0 {
		return time.Time{}
	}
	return p.Start(created, now).Add(time.Duration(p))
}

// caller is the context key of the key a request authenticated with.
type caller struct{}

// WithCaller returns ctx carrying the key a request authenticated with: the way in reads the key
// once, and what runs the request admits it on that reading.
func WithCaller(ctx context.Context, k Key) context.Context {
	return context.WithValue(ctx, caller{}, k)
}

// CallerOf returns the key ctx carries, if any (none for the admin token).
func CallerOf(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(caller{}).(Key)
	return k, ok
}

// SecretPrefix starts every key's secret, so that a secret is told from the admin token at a glance
// and found by secret scanners.
const SecretPrefix = "ck-"

// NewSecret returns a new secret: SecretPrefix and 43 URL-safe characters (256 bits from rand).
func NewSecret(rand io.Reader) (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", err
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// LooksLikeSecret reports whether a credential is meant as a key's secret rather than the admin token.
func LooksLikeSecret(s string) bool { return strings.HasPrefix(s, SecretPrefix) }

// Hash is what is kept of a secret. A secret holds 256 random bits, so one SHA-256 is as hard to
// reverse as a slow hash would be, and cheap enough to compute on every request.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// NewID returns a key's id: "key_" and 16 characters from rand. Ids are not secret.
func NewID(rand io.Reader) (string, error) { return newID("key_", rand) }

// NewTeamID returns a team's id: TeamPrefix and 16 characters from rand.
func NewTeamID(rand io.Reader) (string, error) { return newID(TeamPrefix, rand) }

// TeamPrefix starts every team's id, which no key's id starts with: the books name a budget account by
// the id of its key or team.
const TeamPrefix = "team_"

// IsTeamID reports whether an id is a team's.
func IsTeamID(id string) bool { return strings.HasPrefix(id, TeamPrefix) }

func newID(prefix string, rand io.Reader) (string, error) {
	var b [12]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Errors of teams: ErrUnknownTeam for a team id nobody made, TeamInUseError for a team that keys that
// can still be used belong to (it is not deleted).
var ErrUnknownTeam = errors.New("no such team")

// TeamInUseError refuses to delete a team whose keys are not revoked.
type TeamInUseError struct{ Keys []string }

func (e *TeamInUseError) Error() string {
	return fmt.Sprintf("%d API keys that are not revoked belong to the team (%s): move them to another team or revoke them first",
		len(e.Keys), strings.Join(e.Keys[:min(len(e.Keys), 10)], ", "))
}
