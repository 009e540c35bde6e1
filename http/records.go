package httpapi

import (
	"errors"
	"github.com/conclave-ai/conclave/internal/core/records"
	"net/http"
	"net/url"
	"strconv"
	"time"

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
func readQuery(q url.Values, allowed map[string]bool) (records.Filter, problems.Errors) {
	r := &queryReader{q: q}
	for k := range q {
		if !allowed[k] {
			r.bad.Add(k, "unknown parameter")
		} else if len(q[k]) > 1 {
			r.bad.Add(k, "given more than once")
		}
	}
	f := records.Filter{Category: r.text("category", 64), Model: r.text("model", 256), Outcome: r.text("outcome", 16), KeyID: r.text("key", 64)}
	f.After, f.Before = r.text("after", 512), r.text("before", 512)
	r.check("outcome", records.ValidOutcome(f.Outcome))
	r.cursors(f.After, f.Before)
	f.Since, f.Until = r.when("since"), r.when("until")
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		r.bad.Add("until", "must be after since")
	}
	f.Limit = r.limit()
	return f, r.bad.Capped()
}

// queryReader reads the parameters of a query, collecting every problem.
type queryReader struct {
	q   url.Values
	bad problems.Errors
}

// text reads a parameter of at most max bytes.
func (r *queryReader) text(name string, max int) string {
	v := r.q.Get(name)
	if len(v) > max {
		r.bad.Add(name, "longer than "+strconv.Itoa(max)+" bytes")
		return ""
	}
	return v
}

// when reads an RFC 3339 time; zero when left out.
func (r *queryReader) when(name string) time.Time {
	v := r.q.Get(name)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		r.bad.Add(name, "must be an RFC 3339 time, such as 2026-12-01T00:00:00Z")
	}
	return t
}

// check notes what the store finds wrong with a parameter.
func (r *queryReader) check(name string, err error) {
	if err != nil {
		r.bad.Add(name, err.Error())
	}
}

// cursors checks a page's cursors: each one the store made, and one of them at most.
func (r *queryReader) cursors(after, before string) {
	_, _, err := records.ParseCursor(after)
	r.check("after", err)
	_, _, err = records.ParseCursor(before)
	r.check("before", err)
	if after != "" && before != "" {
		r.bad.Add("before", "cannot be given with after: a page goes one way from one cursor")
	}
}

// limit reads the size of a page; zero when left out.
func (r *queryReader) limit() int {
	v := r.q.Get("limit")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > records.MaxLimit {
		r.bad.Add("limit", "must be an integer from 1 to "+strconv.Itoa(records.MaxLimit))
	}
	return n
}

// query reads a request's query with readQuery, answering its problems itself (400); false when it did.
func query(w http.ResponseWriter, r *http.Request, allowed map[string]bool) (records.Filter, bool) {
	f, bad := readQuery(r.URL.Query(), allowed)
	if len(bad) > 0 {
		writeBadQuery(w, bad)
		return f, false
	}
	return f, true
}

// writeBadQuery answers a query's problems.
func writeBadQuery(w http.ResponseWriter, bad problems.Errors) {
	writeError(w, http.StatusBadRequest, "invalid_request", "the query has problems", details(bad))
}

// analysis reads an analysis endpoint's query and the store's analysis, answering itself (false) when
// the query has problems or the store keeps no analysis.
func (s *Server) analysis(w http.ResponseWriter, r *http.Request, allowed map[string]bool) (records.Filter, records.Analyst, bool) {
	f, ok := query(w, r, allowed)
	if !ok {
		return f, nil, false
	}
	a := s.analyst(w)
	return f, a, a != nil
}

// storeError answers a store's failure: 503 with Retry-After while it is unavailable.
func storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, records.ErrUnavailable) {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error(), nil)
		return
	}
	writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
}

// executions handles GET /executions: summaries newest first, filtered (by key too), by keyset pages
// either way (after= a page's next, before= its prev).
func (s *Server) executions(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	f, ok := query(w, r, executionsParams)
	if !ok {
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
func (s *Server) analyst(w http.ResponseWriter) records.Analyst {
	a := s.engine.Analyst()
	if a == nil {
		writeError(w, http.StatusNotImplemented, "needs_database",
			"analysis reads PostgreSQL's views: set DATABASE_URL (the memory store keeps no history to analyse)", nil)
	}
	return a
}

// trace handles GET /executions/:id/trace: which responses led to the answer.
func (s *Server) trace(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	_, a, ok := s.analysis(w, r, noParams)
	if !ok {
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
	f, a, ok := s.analysis(w, r, modelsParams)
	if !ok {
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
	f, a, ok := s.analysis(w, r, costParams)
	if !ok {
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
	_, a, ok := s.analysis(w, r, noParams)
	if !ok {
		return
	}
	phases, timeouts, err := a.Latency(r.Context())
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"phases": phases, "provider_timeouts": timeouts})
}
