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
	"io"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
)

// ErrUnavailable wraps a failure to reach the store of keys.
var ErrUnavailable = errors.New("the key store is unavailable")

// Key is one caller's API key, as stored (the secret only as its hash).
type Key struct {
	ID   string
	Name string
	// Budget is the most the key may spend in a period; nil is no budget.
	Budget *money.USD
	Period Period
	// PeriodOrigin is when the key's periods start counting from: its creation, or the last change of
	// its period (which starts its spend afresh). Zero is its creation.
	PeriodOrigin time.Time
	// RPM, TPM and MaxConcurrency limit the key's requests per minute, tokens per minute and requests
	// at once; zero is no limit.
	RPM, TPM, MaxConcurrency int
	// Models are globs over model ids ("*" matches any run of characters, "/" included); empty allows
	// every model.
	Models []string
	// ExpiresAt, when set, is when the key stops working.
	ExpiresAt *time.Time
	// CacheTTLSeconds, when positive, keeps the answers to the key's requests in the exact answer
	// cache that long (a request's own choice comes first).
	CacheTTLSeconds int
	// BudgetAlerts are the shares of the budget whose crossing, once per period, is told (the
	// budget_alert event and the alerts webhook); nil is DefaultBudgetAlerts.
	BudgetAlerts []float64
	// Metadata is the caller's own JSON object, kept as given.
	Metadata              []byte
	CreatedAt, UpdatedAt  time.Time
	RevokedAt, LastUsedAt *time.Time
	Spend                 Spend
}

// Origin is when the key's budget periods count from.
func (k Key) Origin() time.Time {
	if k.PeriodOrigin.IsZero() {
		return k.CreatedAt
	}
	return k.PeriodOrigin
}

// PeriodStart is when the budget period that holds now began.
func (k Key) PeriodStart(now time.Time) time.Time { return k.Period.Start(k.Origin(), now) }

// PeriodEnd is when the budget period that holds now ends; zero for a lifetime budget.
func (k Key) PeriodEnd(now time.Time) time.Time { return k.Period.End(k.Origin(), now) }

// Spend is what a key has spent: in the budget period that began at PeriodStart, and in all.
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

// Spent is what the key has spent in the period that holds now: nothing when its stored spend counts
// an earlier period.
func (k Key) Spent(now time.Time) money.USD {
	if k.Spend.PeriodStart.Equal(k.PeriodStart(now)) {
		return k.Spend.Period
	}
	return 0
}

// DefaultBudgetAlerts are the shares of a budget told when crossed, unless a key says others.
var DefaultBudgetAlerts = []float64{0.8, 1.0}

// Alerts are the shares of the key's budget told when crossed.
func (k Key) Alerts() []float64 {
	if k.BudgetAlerts == nil {
		return DefaultBudgetAlerts
	}
	return k.BudgetAlerts
}

// Crossed are the shares of its budget the key's spend in the period that holds now has reached, in
// order; none without a budget.
func (k Key) Crossed(now time.Time) []float64 {
	if k.Budget == nil || *k.Budget <= 0 {
		return nil
	}
	var out []float64
	spent := float64(k.Spent(now)) / float64(*k.Budget)
	for _, f := range k.Alerts() {
		if spent >= f {
			out = append(out, f)
		}
	}
	return out
}

// OverBudget reports whether the key has spent its budget in the period that holds now.
func (k Key) OverBudget(now time.Time) bool {
	return k.Budget != nil && k.Spent(now) >= *k.Budget
}

// Allows reports whether the key may call a model.
func (k Key) Allows(model string) bool { return len(k.Models) == 0 || Matches(k.Models, model) }

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

// Start is when the period that holds now began: periods follow each other from the key's creation.
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
func NewID(rand io.Reader) (string, error) {
	var b [12]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", err
	}
	return "key_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}
