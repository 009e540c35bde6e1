package httpapi

import (
	"mime"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxProgressEvents bounds the events one request may queue for its stream; a request with more
// (thousands of retries) loses the excess, never the answer.
const maxProgressEvents = 1024

var progressJSON = protojson.MarshalOptions{UseProtoNames: true}

// wantsEvents reports whether the caller asked for a stream of progress events (Accept:
// text/event-stream).
func wantsEvents(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

// routeWithProgress answers a route request as server-sent events: each step as it happens, named by
// its event (classified, selected, dispatched, reply, retry, consensus), then "answer" with the response
// body, or "error" with the error body and its status.
func (s *Server) routeWithProgress(w http.ResponseWriter, r *http.Request, req *messages.RouteRequest) {
	events := make(chan *messages.Progress, maxProgressEvents)
	var dropped atomic.Int64
	type result struct {
		exec *messages.Execution
		err  error
	}
	done := make(chan result, 1)
	routing(w, req.RequestId)
	go func() {
		exec, err := s.engine.RouteWithProgress(r.Context(), req, func(p *messages.Progress) {
			select {
			case events <- p:
			default:
				dropped.Add(1)
			}
		})
		done <- result{exec, err}
	}()
	st := newStream(w)
	emit := func(p *messages.Progress) {
		if raw, err := progressJSON.Marshal(p); err == nil {
			st.send(p.Event, raw)
		}
	}
	for {
		select {
		case p := <-events:
			emit(p)
		case res := <-done:
			for len(events) > 0 { // every step was queued before the answer came
				emit(<-events)
			}
			if n := dropped.Load(); n > 0 {
				s.log.Warn("progress events dropped", zap.String("event", "progress_dropped"), zap.String("request_id", req.RequestId), zap.Int64("dropped", n))
			}
			s.endProgress(w, st, req, res.exec, res.err)
			return
		}
	}
}

func (s *Server) endProgress(w http.ResponseWriter, st *sseStream, req *messages.RouteRequest, exec *messages.Execution, err error) {
	routed(w, exec)
	if exec = s.settle(req.RequestId, exec, err); exec.StatusCode != http.StatusOK {
		e := exec.Error
		st.named("error", map[string]any{"status": exec.StatusCode, "error": errorBodyOf(e.Code, e.Message, e.Details, retryViews(exec.Retries)).Error})
		return
	}
	st.named("answer", renderRoute(exec))
}
