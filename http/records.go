package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/julienschmidt/httprouter"
)

// query parameters of the listing and analysis endpoints.
var (
	executionsParams = map[string]bool{"category": true, "model": true, "outcome": true, "key": true, "since": true, "until": true, "limit": true,
		"after": true, "before": true}
	modelsParams = map[string]bool{"category": true, "limit": true}
	costParams   = map[string]bool{"since": true, "until": true}
	noParams     = map[string]bool{}
)

// readQuery checks a query against the parameters an endpoint takes and reads the common ones;
// problems list every parameter that is wrong.
func readQuery(q url.Values, allowed map[string]bool) (store.Filter, problems.Errors) {
	var f store.Filter
	var bad problems.Errors
	for k := range q {
		if !allowed[k] {
			bad.Add(k, "unknown parameter")
		} else if len(q[k]) > 1 {
			bad.Add(k, "given more than once")
		}
	}
	str := func(name string, max int) string {
		v := q.Get(name)
		if len(v) > max {
			bad.Add(name, "longer than "+strconv.Itoa(max)+" bytes")
			return ""
		}
		return v
	}
	when := func(name string) time.Time {
		v := q.Get(name)
		if v == "" {
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			bad.Add(name, "must be an RFC 3339 time, such as 2026-12-01T00:00:00Z")
		}
		return t
	}
	f.Category, f.Model, f.Outcome, f.KeyID = str("category", 64), str("model", 256), str("outcome", 16), str("key", 64)
	f.After, f.Before = str("after", 512), str("before", 512)
	if err := store.ValidOutcome(f.Outcome); err != nil {
		bad.Add("outcome", err.Error())
	}
	if _, _, err := store.ParseCursor(f.After); err != nil {
		bad.Add("after", err.Error())
	}
	if _, _, err := store.ParseCursor(f.Before); err != nil {
		bad.Add("before", err.Error())
	}
	if f.After != "" && f.Before != "" {
		bad.Add("before", "cannot be given with after: a page goes one way from one cursor")
	}
	f.Since, f.Until = when("since"), when("until")
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		bad.Add("until", "must be after since")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxLimit {
			bad.Add("limit", "must be an integer from 1 to "+strconv.Itoa(store.MaxLimit))
		}
		f.Limit = n
	}
	return f, bad.Capped()
}

// storeError answers a store's failure: 503 with Retry-After while it is unavailable.
func storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error(), nil)
		return
	}
	writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
}

// executions handles GET /executions: summaries newest first, filtered (by key too), by keyset pages
// either way (after= a page's next, before= its prev).
func (s *Server) executions(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	f, bad := readQuery(r.URL.Query(), executionsParams)
	if len(bad) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "the query has problems", details(bad))
		return
	}
	page, err := s.engine.Executions(r.Context(), f)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// analyst returns the store's analysis, or answers 501 when the store keeps none.
func (s *Server) analyst(w http.ResponseWriter) store.Analyst {
	a := s.engine.Analyst()
	if a == nil {
		writeError(w, http.StatusNotImplemented, "needs_database",
			"analysis reads PostgreSQL's views: set DATABASE_URL (the memory store keeps no history to analyse)", nil)
	}
	return a
}

// trace handles GET /executions/:id/trace: which responses led to the answer.
func (s *Server) trace(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	if _, bad := readQuery(r.URL.Query(), noParams); len(bad) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "the query has problems", details(bad))
		return
	}
	a := s.analyst(w)
	if a == nil {
		return
	}
	id := p.ByName("id")
	steps, err := a.Trace(r.Context(), id)
	switch {
	case err != nil:
		storeError(w, err)
	case len(steps) == 0:
		writeError(w, http.StatusNotFound, "not_found", "no execution with id "+id, nil)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"request_id": id, "responses": steps})
	}
}

// analysisModels handles GET /analysis/models: the fastest and most accurate models per category.
func (s *Server) analysisModels(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	f, bad := readQuery(r.URL.Query(), modelsParams)
	if len(bad) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "the query has problems", details(bad))
		return
	}
	a := s.analyst(w)
	if a == nil {
		return
	}
	rows, err := a.Models(r.Context(), f.Category, f.PageSize())
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": rows})
}

// analysisCost handles GET /analysis/cost: tokens and cost per request and per provider per day, for
// the last 30 days unless since and until say.
func (s *Server) analysisCost(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	f, bad := readQuery(r.URL.Query(), costParams)
	if len(bad) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "the query has problems", details(bad))
		return
	}
	a := s.analyst(w)
	if a == nil {
		return
	}
	if f.Until.IsZero() {
		f.Until = time.Now().Add(24 * time.Hour)
	}
	if f.Since.IsZero() {
		f.Since = f.Until.Add(-31 * 24 * time.Hour)
	}
	providers, requests, err := a.Cost(r.Context(), f.Since, f.Until)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"since": f.Since, "until": f.Until, "per_provider_per_day": providers, "per_request_per_day": requests})
}

// analysisLatency handles GET /analysis/latency: the slowest phases, and the providers that time out most.
func (s *Server) analysisLatency(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if _, bad := readQuery(r.URL.Query(), noParams); len(bad) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "the query has problems", details(bad))
		return
	}
	a := s.analyst(w)
	if a == nil {
		return
	}
	phases, timeouts, err := a.Latency(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"phases": phases, "provider_timeouts": timeouts})
}
