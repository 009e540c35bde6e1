package httpapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/tracing"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
)

// OverheadHeader carries the milliseconds a request spent in Conclave itself: its whole time, less
// the time it waited for models (collection and the arbiter's call, as its record measures them).
const OverheadHeader = "X-Conclave-Overhead-Ms"

// response wraps every answer: it keeps the status and category for the metrics, sets the overhead
// header when the status goes out, and says whether JSON is pretty-printed (?pretty=1).
type response struct {
	http.ResponseWriter
	start       time.Time
	status      int
	category    string
	pretty      bool
	routeStart  time.Time // when the pipeline was asked; zero before
	waited      time.Duration
	routed      bool
	wroteHeader bool
}

// handle registers a handler measured under its path pattern (a bounded label).
func (s *Server) handle(method, path string, h httprouter.Handle) {
	s.router.Handle(method, path, s.measured(path, h))
}

func (s *Server) measured(endpoint string, h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		rw := &response{ResponseWriter: w, start: time.Now()}
		if r.URL.RawQuery != "" { // most requests have no query: none is parsed for them
			q := r.URL.Query().Get("pretty")
			rw.pretty = q == "1" || q == "true"
		}
		h(rw, r, p)
		if !rw.wroteHeader {
			rw.WriteHeader(http.StatusOK)
		}
		took := time.Since(rw.start)
		s.metrics.Request(endpoint, rw.status, rw.category, took)
		if rw.routed {
			s.metrics.Overhead(took - rw.waited)
		}
	}
}

func (rw *response) overhead(now time.Time) time.Duration {
	switch {
	case rw.routed:
		return now.Sub(rw.start) - rw.waited
	case !rw.routeStart.IsZero():
		// The status goes out while the models are still asked (a stream's first keep-alive): only
		// the time before the pipeline was asked is known to be Conclave's.
		return rw.routeStart.Sub(rw.start)
	}
	return now.Sub(rw.start)
}

func (rw *response) WriteHeader(code int) {
	if rw.wroteHeader {
		return
	}
	rw.wroteHeader, rw.status = true, code
	ms := float64(max(rw.overhead(time.Now()), 0)) / float64(time.Millisecond)
	rw.Header().Set(OverheadHeader, strconv.FormatFloat(ms, 'f', 3, 64))
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *response) Write(b []byte) (int, error) {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	return rw.ResponseWriter.Write(b)
}

// Flush lets streams through the wrapper.
func (rw *response) Flush() {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	if f, ok := rw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the connection underneath.
func (rw *response) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// traced gives a request through a door to the pipeline its span, once its caller is authenticated
// (so that nobody without a key makes spans): a child of the caller's traceparent when it sent one.
// The answer's traceparent and X-Trace-Id name the span before the handler writes anything, so a
// stream's headers carry them too. Without tracing the handler is left as it is.
func (s *Server) traced(method, route string, h httprouter.Handle) httprouter.Handle {
	if s.opts.Tracing == nil {
		return h
	}
	t := s.opts.Tracing
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		ctx, span := t.StartHTTP(r, method, route)
		tracing.Headers(w.Header(), span.SpanContext())
		defer func() {
			status := http.StatusOK
			if rw, ok := w.(*response); ok && rw.wroteHeader {
				status = rw.status
			}
			tracing.EndHTTP(span, status)
		}()
		h(w, r.WithContext(ctx), p)
	}
}

// The panel's headers: what the answer's conclave field says, for the clients that keep no field
// they do not know. The request's id goes out with any answer, a stream's included; the rest with
// an answer written whole (a stream's headers go before its models answer: its record has them).
const (
	RequestIDHeader   = "X-Conclave-Request-Id"
	ModelsHeader      = "X-Conclave-Models" // the models that answered, in the order they were asked
	ChosenModelHeader = "X-Conclave-Chosen-Model"
	AgreementHeader   = "X-Conclave-Agreement"
	CostHeader        = "X-Conclave-Cost-Usd"
	// CacheHeader says "hit" on an answer the exact answer cache gave, and CachedFromHeader names the
	// request it first answered.
	CacheHeader      = "X-Conclave-Cache"
	CachedFromHeader = "X-Conclave-Cached-From"
)

// routing marks the moment a handler hands request id to the pipeline, and names it in the answer.
func routing(w http.ResponseWriter, id string) {
	w.Header().Set(RequestIDHeader, id)
	if rw, ok := w.(*response); ok {
		rw.routeStart = time.Now()
	}
}

// routed takes in the pipeline's record: the time it waited for models, the category, and the
// panel's headers while none is written.
func routed(w http.ResponseWriter, e *messages.Execution) {
	rw, ok := w.(*response)
	if !ok || e == nil {
		return
	}
	if !rw.wroteHeader {
		panelHeaders(w.Header(), e)
	}
	rw.routed = true
	rw.waited = time.Duration((e.GetPhases().GetCollectMs() + e.GetDecision().GetArbiterLatencyMs()) * float64(time.Millisecond))
	rw.category = e.GetClassification().GetCategory()
}

// isPretty reports whether the caller asked for indented JSON.
func isPretty(w http.ResponseWriter) bool {
	rw, ok := w.(*response)
	return ok && rw.pretty
}

// panelHeaders sets the panel's headers from its record.
func panelHeaders(h http.Header, e *messages.Execution) {
	x := extensionOf(e)
	answered := make([]string, 0, x.Answered)
	for _, r := range e.Results {
		if r.Status == "ok" && !slices.Contains(answered, r.Model) {
			answered = append(answered, r.Model)
		}
	}
	h.Set(ModelsHeader, strings.Join(answered, ","))
	if x.ChosenModel != "" {
		h.Set(ChosenModelHeader, x.ChosenModel)
	}
	h.Set(AgreementHeader, strconv.FormatFloat(x.Agreement, 'f', -1, 64))
	h.Set(CostHeader, x.CostUSD.String())
	if e.CachedFrom != "" {
		h.Set(CacheHeader, "hit")
		h.Set(CachedFromHeader, e.CachedFrom)
	}
}
