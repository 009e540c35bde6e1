package httpapi

import (
	"errors"
	"github.com/conclave-ai/conclave/internal/core/records"
	"net/http"
	"sort"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
	"google.golang.org/protobuf/encoding/protojson"
)

var recordJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func (s *Server) execution(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	id := p.ByName("id")
	exec, found, err := s.engine.Execution(r.Context(), id)
	switch {
	case errors.Is(err, records.ErrUnavailable):
		storeError(w, err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
	case !found:
		writeError(w, http.StatusNotFound, "not_found", "no execution with id "+id, nil)
	default:
		opts := recordJSON
		if isPretty(w) {
			opts.Multiline, opts.Indent = true, "  "
		}
		raw, err := opts.Marshal(exec)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "could not encode the record: "+err.Error(), nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(raw)
	}
}

type armView struct {
	Alpha   float64 `json:"alpha"`
	Beta    float64 `json:"beta"`
	Mean    float64 `json:"mean"`
	Recency float64 `json:"recency"`
	Pulls   int64   `json:"pulls"`
}

type modelView struct {
	ID                 string             `json:"id"`
	Provider           string             `json:"provider"`
	Tier               int                `json:"tier"`
	ContextWindow      int                `json:"context_window"`
	InputPricePerMTok  money.Price        `json:"input_price_per_mtok"`
	OutputPricePerMTok money.Price        `json:"output_price_per_mtok"`
	Capabilities       []string           `json:"capabilities"`
	Arms               map[string]armView `json:"arms"`
}

func viewArm(a bandit.Arm) armView {
	return armView{Alpha: a.Alpha, Beta: a.Beta, Mean: a.Mean(), Recency: a.Recency, Pulls: a.Pulls}
}

// models lists every candidate with its learned arms: all categories it has been rewarded in, or with
// ?category=, that category's arm of every model (the prior where nothing was learned yet).
func (s *Server) models(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	category := r.URL.Query().Get("category")
	if category != "" && !s.engine.Blueprints().Has(category) {
		writeError(w, http.StatusNotFound, "not_found", "unknown blueprint "+problems.Clip(category, 64), nil)
		return
	}
	order := r.URL.Query().Get("sort")
	if order != "" && order != "id" && order != "mean" {
		writeError(w, http.StatusBadRequest, "malformed_request", "the query is invalid",
			[]*messages.Problem{{Field: "sort", Message: "must be id or mean"}})
		return
	}
	board := s.engine.Arms()
	// sort=mean ranks by the category's arm, or by each model's arm over all categories.
	rankBy := category
	if rankBy == "" {
		rankBy = bandit.AllCategories
	}
	views := map[string]*modelView{}
	means := map[string]float64{}
	var ids []string
	for _, m := range s.engine.Catalog().All() {
		v := &modelView{ID: m.ID, Provider: m.Provider, Tier: m.Tier, ContextWindow: m.ContextWindow, InputPricePerMTok: m.InputPricePerMTok,
			OutputPricePerMTok: m.OutputPricePerMTok, Capabilities: m.Capabilities, Arms: map[string]armView{}}
		if category != "" {
			v.Arms[category] = viewArm(board.Arm(category, m.ID))
		}
		if order == "mean" {
			means[m.ID] = board.Arm(rankBy, m.ID).Mean()
		}
		views[m.ID] = v
		ids = append(ids, m.ID)
	}
	if category == "" {
		for _, a := range board.Published() {
			if v, ok := views[a.Model]; ok {
				v.Arms[a.Category] = viewArm(a)
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		if a, b := means[ids[i]], means[ids[j]]; a != b {
			return a > b
		}
		return ids[i] < ids[j]
	})
	out := make([]*modelView, len(ids))
	for i, id := range ids {
		out[i] = views[id]
	}
	writeJSON(w, http.StatusOK, map[string]any{"prior": board.Prior(), "models": out})
}

func (s *Server) providers(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	writeJSON(w, http.StatusOK, map[string]any{"providers": s.engine.Providers()})
}

func (s *Server) workers(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	writeJSON(w, http.StatusOK, map[string]any{"workers": s.engine.Workers()})
}

func (s *Server) blueprints(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	set := s.engine.Blueprints()
	rejected := set.Rejected()
	if rejected == nil {
		rejected = []blueprints.Rejection{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"source": set.Source(), "blueprints": set.All(), "rejected": rejected})
}
