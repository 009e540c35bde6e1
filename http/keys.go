package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/records"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
)

// KeyRing is the API keys behind the admin API and the authentication of every request.
type KeyRing interface {
	// Authenticate returns a secret's key, or why it may not be used (keys.ErrUnknown, ErrRevoked,
	// ErrExpired, or an error wrapping keys.ErrUnavailable).
	Authenticate(ctx context.Context, secret string) (keys.Key, error)
	// Create returns the new key and its secret, which is never shown again.
	Create(ctx context.Context, c keys.Changes) (keys.Key, string, error)
	List(ctx context.Context) ([]keys.Key, error)
	Get(ctx context.Context, id string) (keys.Key, error)
	Update(ctx context.Context, id string, c keys.Changes) (keys.Key, error)
	Revoke(ctx context.Context, id string) (keys.Key, error)
	// Usage is how much of a key's or team's limits is in use now.
	Usage(ctx context.Context, id string, a keys.Allowance) (providerstate.Usage, error)
	Spend(ctx context.Context, q records.SpendQuery) ([]records.SpendGroup, error)
	Now() time.Time
	TeamRing
}

// keyView is a key as the admin API shows it: never its secret.
type keyView struct {
	ID     string  `json:"id"`
	Key    string  `json:"key,omitempty"` // the secret, in the answer to its creation only
	Name   string  `json:"name"`
	TeamID *string `json:"team_id"`
	Status string  `json:"status"`
	allowanceView
	CacheTTL   int             `json:"cache_ttl_seconds"`
	ExpiresAt  *time.Time      `json:"expires_at"`
	Metadata   json.RawMessage `json:"metadata"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	RevokedAt  *time.Time      `json:"revoked_at"`
	LastUsedAt *time.Time      `json:"last_used_at"`
}

// allowanceView is what a key and a team show alike: their budget, limits, models and alerts, what
// they spent and the limits in use now.
type allowanceView struct {
	BudgetUSD      *money.USD   `json:"budget_usd"`
	BudgetPeriod   string       `json:"budget_period"`
	RPM            int          `json:"rpm"`
	TPM            int          `json:"tpm"`
	MaxConcurrency int          `json:"max_concurrency"`
	BudgetAlerts   []float64    `json:"budget_alerts"`
	Models         []string     `json:"models"`
	Spend          spendView    `json:"spend"`
	Usage          keyUsageView `json:"usage"`
}

type spendView struct {
	PeriodStart time.Time  `json:"period_start"`
	PeriodEnd   *time.Time `json:"period_end"`
	SpendUSD    money.USD  `json:"spend_usd"`
	TotalUSD    money.USD  `json:"total_usd"`
}

// keyUsageView is the key's (or team's) limits in use now, in the window they count over.
type keyUsageView struct {
	Requests int `json:"requests"`
	Tokens   int `json:"tokens"`
	InFlight int `json:"in_flight"`
}

func (s *Server) viewKey(ctx context.Context, k keys.Key) keyView {
	now := s.keys.Now()
	v := keyView{ID: k.ID, Name: k.Name, Status: k.Status(now), allowanceView: s.viewAllowance(ctx, k.ID, k.Allowance, now), CacheTTL: k.CacheTTLSeconds,
		ExpiresAt: k.ExpiresAt, Metadata: orEmpty(k.Metadata), CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt, RevokedAt: k.RevokedAt, LastUsedAt: k.LastUsedAt}
	if k.TeamID != "" {
		v.TeamID = &k.TeamID
	}
	return v
}

// viewAllowance shows the allowance of the key or team of id at now, with its limits in use (zero
// when they cannot be read).
func (s *Server) viewAllowance(ctx context.Context, id string, a keys.Allowance, now time.Time) allowanceView {
	v := allowanceView{BudgetUSD: a.Budget, BudgetPeriod: a.Period.String(), RPM: a.RPM, TPM: a.TPM, MaxConcurrency: a.MaxConcurrency,
		BudgetAlerts: a.Alerts(), Models: a.Models, Spend: spendView{PeriodStart: a.PeriodStart(now), SpendUSD: a.Spent(now), TotalUSD: a.Spend.Total}}
	if v.Models == nil {
		v.Models = []string{}
	}
	if end := a.PeriodEnd(now); !end.IsZero() {
		v.Spend.PeriodEnd = &end
	}
	if u, err := s.keys.Usage(ctx, id, a); err == nil {
		v.Usage = keyUsageView{Requests: u.Requests, Tokens: u.Tokens, InFlight: u.InFlight}
	}
	return v
}

// orEmpty is a JSON object as kept, or {} for none.
func orEmpty(m []byte) json.RawMessage {
	if len(m) == 0 {
		return json.RawMessage("{}")
	}
	return m
}

// keyError answers a key store's failure.
func keyError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, keys.ErrUnknown):
		writeError(w, http.StatusNotFound, "not_found", "no such API key", nil)
	case errors.Is(err, keys.ErrUnknownTeam):
		writeError(w, http.StatusBadRequest, "invalid_request", "the key has problems",
			[]*messages.Problem{{Field: "team_id", Message: "no such team (GET /admin/teams lists them)"}})
	case errors.Is(err, keys.ErrUnavailable):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the key store is unavailable", nil)
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
	}
}

// readChanges reads a key's fields from a request's body, answering what is wrong itself.
func (s *Server) readChanges(w http.ResponseWriter, r *http.Request, creating bool) (keys.Changes, bool) {
	return s.readFields(w, r, "key", func(body []byte) (keys.Changes, problems.Errors) {
		return keys.ReadChanges(body, creating, s.keys.Now())
	})
}

// readFields reads a key's or team's (what's) fields from a request's body with read, answering what is
// wrong itself.
func (s *Server) readFields(w http.ResponseWriter, r *http.Request, what string, read func([]byte) (keys.Changes, problems.Errors)) (keys.Changes, bool) {
	body, ok := s.readJSON(w, r)
	if !ok {
		return keys.Changes{}, false
	}
	c, bad := read(body)
	if len(bad) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "the "+what+" has problems", details(bad.Capped()))
		return keys.Changes{}, false
	}
	return c, true
}

// createKey handles POST /admin/keys: 201 with the key and, this once only, its secret.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	c, ok := s.readChanges(w, r, true)
	if !ok {
		return
	}
	k, secret, err := s.keys.Create(r.Context(), c)
	if err != nil {
		keyError(w, err)
		return
	}
	v := s.viewKey(r.Context(), k)
	v.Key = secret
	w.Header().Set("Cache-Control", "no-store") // the secret must not stay in a cache
	w.Header().Set("Location", "/admin/keys/"+k.ID)
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if _, ok := query(w, r, noParams); !ok {
		return
	}
	list, err := s.keys.List(r.Context())
	if err != nil {
		keyError(w, err)
		return
	}
	views := make([]keyView, 0, len(list))
	for _, k := range list {
		views = append(views, s.viewKey(r.Context(), k))
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": views})
}

func (s *Server) showKey(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	k, err := s.keys.Get(r.Context(), p.ByName("id"))
	s.writeKey(w, r, k, err)
}

func (s *Server) updateKey(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	c, ok := s.readChanges(w, r, false)
	if !ok {
		return
	}
	k, err := s.keys.Update(r.Context(), p.ByName("id"), c)
	s.writeKey(w, r, k, err)
}

// revokeKey handles DELETE /admin/keys/:id: the key is refused at once, on every controller sharing
// the store; it stays listed, revoked, with its spend.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	k, err := s.keys.Revoke(r.Context(), p.ByName("id"))
	s.writeKey(w, r, k, err)
}

// writeKey answers with a key as the admin API shows it, or with the failure to reach it.
func (s *Server) writeKey(w http.ResponseWriter, r *http.Request, k keys.Key, err error) {
	if err != nil {
		keyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.viewKey(r.Context(), k))
}

var spendParams = map[string]bool{"since": true, "until": true, "group_by": true}

// DefaultSpendWindow is how far back GET /admin/keys/:id/spend looks without since.
const DefaultSpendWindow = 30 * 24 * time.Hour

// spendWindow reads the query of a spend: since, until (now when absent), since defaulting to
// DefaultSpendWindow before until, and group_by (model or day), answering what is wrong itself.
func (s *Server) spendWindow(w http.ResponseWriter, r *http.Request) (since, until time.Time, byDay, ok bool) {
	f, bad := readQuery(r.URL.Query(), spendParams)
	switch r.URL.Query().Get("group_by") {
	case "", "model":
	case "day":
		byDay = true
	default:
		bad = append(bad, problems.Problem{Field: "group_by", Message: "must be model or day"})
	}
	if len(bad) > 0 {
		writeBadQuery(w, bad)
		return since, until, false, false
	}
	since, until = f.Since, f.Until
	if until.IsZero() {
		until = s.keys.Now().Add(time.Millisecond) // what was received up to now
	}
	if since.IsZero() {
		since = until.Add(-DefaultSpendWindow)
	}
	return since.UTC(), until.UTC(), byDay, true
}

// groupName is the group_by a spend answers with.
func groupName(byDay bool) string {
	if byDay {
		return "day"
	}
	return "model"
}

// keySpend handles GET /admin/keys/:id/spend?since=&until=&group_by=model|day.
func (s *Server) keySpend(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	since, until, byDay, ok := s.spendWindow(w, r)
	if !ok {
		return
	}
	k, err := s.keys.Get(r.Context(), p.ByName("id"))
	if err != nil {
		keyError(w, err)
		return
	}
	s.writeSpend(w, r, "key_id", k.ID, records.SpendQuery{KeyID: k.ID, Since: since, Until: until, ByDay: byDay})
}

// writeSpend answers with a key's or team's spend (who names it: key_id or team_id).
func (s *Server) writeSpend(w http.ResponseWriter, r *http.Request, who, id string, q records.SpendQuery) {
	groups, err := s.keys.Spend(r.Context(), q)
	if err != nil {
		storeError(w, err)
		return
	}
	var total money.USD
	for _, g := range groups {
		total += g.CostUSD
	}
	if groups == nil {
		groups = []records.SpendGroup{}
	}
	writeJSON(w, http.StatusOK, map[string]any{who: id, "since": q.Since, "until": q.Until, "group_by": groupName(q.ByDay),
		"total_usd": total, "groups": groups})
}
