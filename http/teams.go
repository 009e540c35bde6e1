package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/records"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
)

// TeamRing is the teams behind the admin API: groups of keys held to an allowance of their own.
type TeamRing interface {
	CreateTeam(ctx context.Context, c keys.Changes) (keys.Team, error)
	Teams(ctx context.Context) ([]keys.Team, error)
	GetTeam(ctx context.Context, id string) (keys.Team, error)
	UpdateTeam(ctx context.Context, id string, c keys.Changes) (keys.Team, error)
	// DeleteTeam deletes a team no unrevoked key belongs to (else a *keys.TeamInUseError).
	DeleteTeam(ctx context.Context, id string) (keys.Team, error)
	// Team returns a team as this controller has it, for the requests of its keys.
	Team(id string) (keys.Team, bool)
}

// teamView is a team as the admin API shows it.
type teamView struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	allowanceView
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func (s *Server) viewTeam(ctx context.Context, t keys.Team) teamView {
	now := s.keys.Now()
	v := teamView{ID: t.ID, Name: t.Name, Status: "active", allowanceView: s.viewAllowance(ctx, t.ID, t.Allowance, now), Metadata: orEmpty(t.Metadata),
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	if t.OverBudget(now) {
		v.Status = "over_budget"
	}
	return v
}

// teamError answers a team store's failure.
func teamError(w http.ResponseWriter, err error) {
	var inUse *keys.TeamInUseError
	switch {
	case errors.Is(err, keys.ErrUnknownTeam):
		writeError(w, http.StatusNotFound, "not_found", "no such team", nil)
	case errors.As(err, &inUse):
		writeError(w, http.StatusConflict, "team_in_use", inUse.Error(), []*messages.Problem{{Field: "keys", Message: inUse.Error()}})
	default:
		keyError(w, err)
	}
}

// readTeamChanges reads a team's fields from a request's body, answering what is wrong itself.
func (s *Server) readTeamChanges(w http.ResponseWriter, r *http.Request, creating bool) (keys.Changes, bool) {
	return s.readFields(w, r, "team", func(body []byte) (keys.Changes, problems.Errors) { return keys.ReadTeamChanges(body, creating) })
}

// createTeam handles POST /admin/teams: 201 with the team.
func (s *Server) createTeam(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	c, ok := s.readTeamChanges(w, r, true)
	if !ok {
		return
	}
	t, err := s.keys.CreateTeam(r.Context(), c)
	if err != nil {
		teamError(w, err)
		return
	}
	w.Header().Set("Location", "/admin/teams/"+t.ID)
	writeJSON(w, http.StatusCreated, s.viewTeam(r.Context(), t))
}

func (s *Server) listTeams(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if _, ok := query(w, r, noParams); !ok {
		return
	}
	list, err := s.keys.Teams(r.Context())
	if err != nil {
		teamError(w, err)
		return
	}
	views := make([]teamView, 0, len(list))
	for _, t := range list {
		views = append(views, s.viewTeam(r.Context(), t))
	}
	writeJSON(w, http.StatusOK, map[string]any{"teams": views})
}

func (s *Server) showTeam(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	t, err := s.keys.GetTeam(r.Context(), p.ByName("id"))
	s.writeTeam(w, r, t, err)
}

func (s *Server) updateTeam(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	c, ok := s.readTeamChanges(w, r, false)
	if !ok {
		return
	}
	t, err := s.keys.UpdateTeam(r.Context(), p.ByName("id"), c)
	s.writeTeam(w, r, t, err)
}

// deleteTeam handles DELETE /admin/teams/:id: 200 with the team as it was; 409 while keys that are not
// revoked belong to it. What it spent stays in the books.
func (s *Server) deleteTeam(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	t, err := s.keys.DeleteTeam(r.Context(), p.ByName("id"))
	if err != nil {
		teamError(w, err)
		return
	}
	v := s.viewTeam(r.Context(), t)
	v.Status = "deleted"
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) writeTeam(w http.ResponseWriter, r *http.Request, t keys.Team, err error) {
	if err != nil {
		teamError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.viewTeam(r.Context(), t))
}

// teamSpend handles GET /admin/teams/:id/spend?since=&until=&group_by=model|day: what the team's keys
// spent, as a key's spend reads.
func (s *Server) teamSpend(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	since, until, byDay, ok := s.spendWindow(w, r)
	if !ok {
		return
	}
	t, err := s.keys.GetTeam(r.Context(), p.ByName("id"))
	if err != nil {
		teamError(w, err)
		return
	}
	s.writeSpend(w, r, "team_id", t.ID, records.SpendQuery{TeamID: t.ID, Since: since, Until: until, ByDay: byDay})
}
