package httpapi

import (
	"net/http"
	"strconv"
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

// routing marks the moment a handler hands its request to the pipeline.
func routing(w http.ResponseWriter) {
	if rw, ok := w.(*response); ok {
		rw.routeStart = time.Now()
	}
}

// routed takes in the pipeline's record: the time it waited for models, and the category.
func routed(w http.ResponseWriter, e *messages.Execution) {
	rw, ok := w.(*response)
	if !ok || e == nil {
		return
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
