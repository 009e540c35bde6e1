// Package httpapi owns Conclave's HTTP API: POST /route-thompson and the read-only views of executions,
// models, providers, workers and blueprints, with bearer-token auth, a body size limit and JSON errors
// that list every validation problem.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"github.com/conclave-ai/conclave/internal/core/records"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/http/ui"
	"github.com/conclave-ai/conclave/internal/core/assign"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/platform/tracing"
	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
	"go.uber.org/zap"
)

// Engine is the pipeline behind the API.
type Engine interface {
	Route(ctx context.Context, req *messages.RouteRequest) (*messages.Execution, error)
	RouteWithProgress(ctx context.Context, req *messages.RouteRequest, onProgress func(*messages.Progress)) (*messages.Execution, error)
	RouteStreaming(ctx context.Context, req *messages.RouteRequest, onDelta func(*messages.Delta)) (*messages.Execution, error)
	// Embed asks one model for the embeddings of texts: the record, and a vector per text when it worked.
	Embed(ctx context.Context, req *messages.EmbedRequest) (*messages.EmbedResult, error)
	// CountTokens counts a request's prompt as the books count a call's, calling no model.
	CountTokens(req *messages.RouteRequest) int
	Execution(ctx context.Context, id string) (*messages.Execution, bool, error)
	Feedback(ctx context.Context, fb *messages.RecordFeedback) (*messages.FeedbackResult, error)
	Executions(ctx context.Context, f records.Filter) (records.Page, error)
	// Analyst is nil when the store keeps no analysis (the memory store).
	Analyst() records.Analyst
	Catalog() *catalog.Catalog
	Blueprints() *blueprints.Set
	Arms() bandit.Board
	Providers() []*providerstate.Snapshot
	Workers() []assign.Worker
	Ready() error
	// Metrics are the registry GET /metrics serves.
	Metrics() *metrics.Metrics
}

// Options configure the API.
type Options struct {
	// Token, when set, is the admin token: required, or an API key, as "Authorization: Bearer <token>"
	// on every endpoint but /healthz and /readyz. Without it only loopback callers are served, as admin.
	Token secret.String
	// Keys are the API keys callers may present instead of the token; nil serves no keys (the admin
	// API answers 501, and a key's secret is refused).
	Keys KeyRing
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	// EvalReport is the evaluation report GET /eval/report serves (make eval writes
	// reports/eval/report.json); read at each request, so a new evaluation shows at once.
	EvalReport string
	// AuthFailureDelay overrides AuthFailureDelay; negative answers at once (tests).
	AuthFailureDelay time.Duration
	// StreamKeepAlive is how often a stream with nothing to say yet sends a comment; zero means
	// DefaultStreamKeepAlive.
	StreamKeepAlive time.Duration
	Log             *zap.Logger
	// Tracing, when set, gives each request through a door to the pipeline a span (a child of the
	// caller's traceparent), named in the answer's traceparent and X-Trace-Id headers; nil traces nothing.
	Tracing *tracing.Tracing
}

// Server is the HTTP API.
type Server struct {
	engine  Engine
	opts    Options
	log     *zap.Logger
	token   [sha256.Size]byte
	router  *httprouter.Router
	metrics *metrics.Metrics
	keys    KeyRing
	// authFailures counts refused authentications, for the log's sampling.
	authFailures atomic.Int64
}

// New returns the API over an engine.
func New(engine Engine, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	s := &Server{engine: engine, opts: opts, log: opts.Log, router: httprouter.New(), metrics: engine.Metrics(), keys: opts.Keys}
	if opts.Token.Set() {
		s.token = sha256.Sum256([]byte(opts.Token.Reveal()))
	}
	s.handle(http.MethodPost, "/route-thompson", s.authed(s.traced(http.MethodPost, "/route-thompson", s.route)))
	s.handle(http.MethodPost, "/v1/chat/completions", s.authedWith(s.traced(http.MethodPost, "/v1/chat/completions", s.chatCompletions), writeOpenAIError))
	s.handle(http.MethodPost, "/v1/responses", s.authedWith(s.traced(http.MethodPost, "/v1/responses", s.responses), writeOpenAIError))
	s.handle(http.MethodPost, "/v1/embeddings", s.authedWith(s.traced(http.MethodPost, "/v1/embeddings", s.embeddings), writeOpenAIError))
	// Anthropic's clients send their key as x-api-key, OpenAI's as a bearer token: every door takes both.
	s.handle(http.MethodPost, messagesPath, s.authedWith(s.traced(http.MethodPost, messagesPath, s.messagesHandler), writeAnthropicError))
	s.handle(http.MethodPost, countTokensPath, s.authedWith(s.traced(http.MethodPost, countTokensPath, s.countTokens), writeAnthropicError))
	s.handle(http.MethodGet, "/v1/models", s.authedWith(s.v1Models, writeOpenAIError))
	// Model ids hold slashes (conclave/auto, vendor/model): the id is the rest of the path.
	s.handle(http.MethodGet, "/v1/models/*id", s.authedWith(s.v1Model, writeOpenAIError))
	// A key reads its own records; the rest of the fleet's state and records is the admin's.
	s.handle(http.MethodGet, "/executions", s.authed(s.adminOnly(s.executions)))
	s.handle(http.MethodGet, "/executions/:id", s.authed(s.ownRecord(s.execution)))
	s.handle(http.MethodGet, "/executions/:id/trace", s.authed(s.ownRecord(s.trace)))
	s.handle(http.MethodPost, "/executions/:id/feedback", s.authed(s.ownRecord(s.feedback)))
	s.handle(http.MethodGet, "/analysis/models", s.authed(s.adminOnly(s.analysisModels)))
	s.handle(http.MethodGet, "/analysis/cost", s.authed(s.adminOnly(s.analysisCost)))
	s.handle(http.MethodGet, "/analysis/latency", s.authed(s.adminOnly(s.analysisLatency)))
	s.handle(http.MethodGet, "/models", s.authed(s.models))
	s.handle(http.MethodGet, "/providers", s.authed(s.adminOnly(s.providers)))
	s.handle(http.MethodGet, "/workers", s.authed(s.adminOnly(s.workers)))
	s.handle(http.MethodGet, "/blueprints", s.authed(s.blueprints))
	s.handle(http.MethodGet, "/metrics", s.authed(s.adminOnly(s.metricsHandler)))
	s.handle(http.MethodGet, "/eval/report", s.authed(s.adminOnly(s.evalReport)))
	s.handle(http.MethodPost, "/admin/keys", s.authed(s.adminOnly(s.withKeys(s.createKey))))
	s.handle(http.MethodGet, "/admin/keys", s.authed(s.adminOnly(s.withKeys(s.listKeys))))
	s.handle(http.MethodGet, "/admin/keys/:id", s.authed(s.adminOnly(s.withKeys(s.showKey))))
	s.handle(http.MethodPatch, "/admin/keys/:id", s.authed(s.adminOnly(s.withKeys(s.updateKey))))
	s.handle(http.MethodDelete, "/admin/keys/:id", s.authed(s.adminOnly(s.withKeys(s.revokeKey))))
	s.handle(http.MethodGet, "/admin/keys/:id/spend", s.authed(s.adminOnly(s.withKeys(s.keySpend))))
	s.handle(http.MethodPost, "/admin/teams", s.authed(s.adminOnly(s.withKeys(s.createTeam))))
	s.handle(http.MethodGet, "/admin/teams", s.authed(s.adminOnly(s.withKeys(s.listTeams))))
	s.handle(http.MethodGet, "/admin/teams/:id", s.authed(s.adminOnly(s.withKeys(s.showTeam))))
	s.handle(http.MethodPatch, "/admin/teams/:id", s.authed(s.adminOnly(s.withKeys(s.updateTeam))))
	s.handle(http.MethodDelete, "/admin/teams/:id", s.authed(s.adminOnly(s.withKeys(s.deleteTeam))))
	s.handle(http.MethodGet, "/admin/teams/:id/spend", s.authed(s.adminOnly(s.withKeys(s.teamSpend))))
	// The dashboard's files hold no data: they load without the token, and ask for it to read the API.
	dashboard := http.StripPrefix("/ui", ui.Handler())
	s.handle(http.MethodGet, "/ui/*file", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) { dashboard.ServeHTTP(w, r) })
	s.handle(http.MethodGet, "/ui", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	s.handle(http.MethodGet, "/readyz", s.readyz) // says nothing secret: a load balancer probes it without the token
	s.handle(http.MethodGet, "/healthz", s.healthz)
	s.handle(http.MethodHead, "/healthz", s.healthz)
	r := s.router
	// Under /v1 a client is OpenAI's, and reads errors in OpenAI's shape, but under /v1/messages it is
	// Anthropic's; elsewhere errors are in Conclave's shape.
	r.NotFound = s.unrouted(func(w http.ResponseWriter, req *http.Request) {
		code := "not_found"
		if isV1(req.URL.Path) {
			code = "unknown_url" // OpenAI's and Anthropic's name of it
		}
		errorShapeOf(req.URL.Path)(w, http.StatusNotFound, code, "no such endpoint: "+req.Method+" "+problems.Clip(req.URL.Path, 256), nil)
	})
	r.MethodNotAllowed = s.unrouted(func(w http.ResponseWriter, req *http.Request) {
		errorShapeOf(req.URL.Path)(w, http.StatusMethodNotAllowed, "method_not_allowed", req.Method+" is not allowed on "+problems.Clip(req.URL.Path, 256), nil)
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		s.log.Error("handler panicked", zap.String("event", "http_panic"), zap.String("path", req.URL.Path), zap.Any("panic", v))
		writeError(w, http.StatusInternalServerError, "internal", "internal error", nil)
	}
	return s
}

// errorShapeOf is the error shape of the clients of a path: Anthropic's under /v1/messages, OpenAI's
// elsewhere under /v1, Conclave's everywhere else.
func errorShapeOf(path string) errorWriter {
	switch {
	case isMessagesPath(path):
		return writeAnthropicError
	case isV1(path):
		return writeOpenAIError
	}
	return writeError
}

// isV1 reports whether a path is under OpenAI's /v1.
func isV1(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }

// unrouted measures the answers to requests no endpoint matched, under one label.
func (s *Server) unrouted(h http.HandlerFunc) http.Handler {
	m := s.measured("unmatched", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) { h(w, r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m(w, r, nil) })
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if s.metrics == nil {
		writeError(w, http.StatusNotFound, "not_found", "this server keeps no metrics", nil)
		return
	}
	s.metrics.Handler().ServeHTTP(w, r)
}

// maxReportBytes bounds the evaluation report served.
const maxReportBytes = 16 << 20

func (s *Server) evalReport(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	path := s.opts.EvalReport
	if path == "" {
		path = DefaultEvalReport
	}
	f, err := os.Open(path)
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no evaluation report at "+path+" (make eval writes one)", nil)
		return
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxReportBytes+1))
	switch {
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal", "could not read the evaluation report: "+err.Error(), nil)
	case len(raw) > maxReportBytes || !json.Valid(raw):
		writeError(w, http.StatusInternalServerError, "internal", "the evaluation report at "+path+" is not JSON of at most 16 MiB", nil)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	}
}

// DefaultEvalReport is where make eval writes its report, relative to the working directory.
const DefaultEvalReport = "reports/eval/report.json"

// ServeHTTP implements http.Handler. Without a token (the loopback default) only local pages and
// local names reach the API: a web page elsewhere could otherwise drive it from the user's browser,
// and a name rebound to 127.0.0.1 read its records.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Token.Set() {
		if why := foreignRequest(r); why != "" {
			s.measured("refused", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
				writeError(w, http.StatusForbidden, "forbidden", why, nil)
			})(w, r, nil)
			return
		}
	}
	s.router.ServeHTTP(w, r)
}

// foreignRequest says why a request comes from beyond the machine, or "" when it does not: its Host
// must be a loopback name, and its Origin, when it has one, a loopback page.
func foreignRequest(r *http.Request) string {
	if !loopbackHost(r.Host) {
		return "without an API token only loopback names are served (Host " + problems.Clip(r.Host, 64) + "); set CONCLAVE_API_TOKEN to serve others"
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !loopbackHost(u.Host) {
			return "without an API token only pages on this machine may call the API (Origin " + problems.Clip(origin, 64) + ")"
		}
	}
	return ""
}

// loopbackHost reports whether a host (with or without a port) names this machine's loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authed requires the bearer token when one is configured. Both sides are hashed before the
// constant-time comparison, so neither the token's bytes nor its length leak through timing.
func (s *Server) authed(h httprouter.Handle) httprouter.Handle { return s.authedWith(h, writeError) }

// errorWriter writes an error body in one of the API's shapes (Conclave's or OpenAI's).
type errorWriter func(w http.ResponseWriter, status int, code, message string, details []*messages.Problem)

// authedWith is authed answering refusals in the shape of writeErr.
func (s *Server) authedWith(h httprouter.Handle, writeErr errorWriter) httprouter.Handle {
	return s.authedBy(h, writeErr, apiKeyOrBearer, "a valid API key or admin token is required, as Authorization: Bearer or x-api-key")
}

// credential reads the token a request presents, and whether it presents one in a form the door takes.
type credential func(r *http.Request) (string, bool)

// bearer reads "Authorization: Bearer <token>"; the scheme is case-insensitive (RFC 7235).
func bearer(r *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return token, strings.EqualFold(scheme, "Bearer")
}

// apiKeyOrBearer reads x-api-key, as Anthropic's clients send their key, or else a bearer token.
func apiKeyOrBearer(r *http.Request) (string, bool) {
	if key := r.Header.Get("X-Api-Key"); key != "" {
		return key, true
	}
	return bearer(r)
}

// authedBy requires an API key or the admin token, read by cred; without a token configured, a
// request that presents no key is the (loopback) admin's. A refusal says hint, or what is wrong with
// the key, in the shape of writeErr. A refusal is logged (the first, then one in every 100) and slowed
// by AuthFailureDelay, so guessing costs time and floods no log.
func (s *Server) authedBy(h httprouter.Handle, writeErr errorWriter, cred credential, hint string) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		given, presented := cred(r)
		if presented && keys.LooksLikeSecret(given) && s.keys != nil {
			k, err := s.keys.Authenticate(r.Context(), given)
			switch {
			case err == nil:
				h(w, r.WithContext(keys.WithCaller(r.Context(), k)), p)
			case errors.Is(err, keys.ErrUnavailable):
				w.Header().Set("Retry-After", "5")
				writeErr(w, http.StatusServiceUnavailable, "store_unavailable", "the key store is unavailable: the API key could not be checked", nil)
			case errors.Is(err, keys.ErrUnknown):
				s.refuseAuth(w, r, writeErr, "invalid_api_key", "the API key is not valid")
			default:
				s.refuseAuth(w, r, writeErr, "invalid_api_key", err.Error())
			}
			return
		}
		if !s.opts.Token.Set() {
			h(w, r, p)
			return
		}
		sum := sha256.Sum256([]byte(given))
		if subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 || !presented {
			s.refuseAuth(w, r, writeErr, "unauthorized", hint)
			return
		}
		h(w, r, p)
	}
}

// refuseAuth answers a failed authentication with 401, after AuthFailureDelay.
func (s *Server) refuseAuth(w http.ResponseWriter, r *http.Request, writeErr errorWriter, code, why string) {
	if n := s.authFailures.Add(1); n == 1 || n%100 == 0 {
		s.log.Warn("authentication failed", zap.String("event", "auth_failed"), zap.String("remote", r.RemoteAddr),
			zap.String("path", problems.Clip(r.URL.Path, 128)), zap.Int64("failures", n))
	}
	select {
	case <-time.After(s.authDelay()):
	case <-r.Context().Done():
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="conclave"`)
	writeErr(w, http.StatusUnauthorized, code, why, nil)
}

// adminOnly refuses a caller that came with an API key: the endpoint is the admin token's.
func (s *Server) adminOnly(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		if _, keyed := keys.CallerOf(r.Context()); keyed {
			writeError(w, http.StatusForbidden, "forbidden", "this endpoint needs the admin token, not an API key", nil)
			return
		}
		h(w, r, p)
	}
}

// ownRecord lets a caller with an API key reach only the records of its own requests: another's is
// not found, as an unknown one.
func (s *Server) ownRecord(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
		if k, keyed := keys.CallerOf(r.Context()); keyed {
			exec, found, err := s.engine.Execution(r.Context(), p.ByName("id"))
			if err == nil && (!found || exec.KeyId != k.ID) {
				writeError(w, http.StatusNotFound, "not_found", "no execution with id "+problems.Clip(p.ByName("id"), 128), nil)
				return
			}
		}
		h(w, r, p)
	}
}

// withKeys answers 501 when the server keeps no API keys.
func (s *Server) withKeys(h httprouter.Handle) httprouter.Handle {
	if s.keys == nil {
		return func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
			writeError(w, http.StatusNotImplemented, "no_keys", "this server keeps no API keys", nil)
		}
	}
	return h
}

// AuthFailureDelay is how long a refused authentication waits before its answer.
const AuthFailureDelay = 250 * time.Millisecond

func (s *Server) authDelay() time.Duration {
	if s.opts.AuthFailureDelay != 0 {
		return max(s.opts.AuthFailureDelay, 0)
	}
	return AuthFailureDelay
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	if err := s.engine.Ready(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not_ready", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// writeJSON writes v as the whole body, encoded first into a pooled buffer so that the answer goes out
// with its Content-Length in one write rather than in chunks.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(buf)
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if isPretty(w) {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	if buf.Cap() > maxPooledBody {
		*buf = bytes.Buffer{} // a rare large answer does not stay in the pool
	}
}

// bodies pools the buffers answers are encoded into.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer kept for the next answer.
const maxPooledBody = 64 << 10

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string              `json:"code"`
	Message string              `json:"message"`
	Details []*messages.Problem `json:"details"`
	Retries []retryView         `json:"retries"`
}

func writeError(w http.ResponseWriter, status int, code, message string, details []*messages.Problem) {
	writeErrorWithRetries(w, status, code, message, details, nil)
}

func writeErrorWithRetries(w http.ResponseWriter, status int, code, message string, details []*messages.Problem, retries []retryView) {
	writeJSON(w, status, errorBodyOf(code, message, details, retries))
}

// errorBodyOf is an error body; messages may quote the input, so it stays small whatever came in.
func errorBodyOf(code, message string, details []*messages.Problem, retries []retryView) errorBody {
	if retries == nil {
		retries = []retryView{}
	}
	return errorBody{Error: errorDetail{Code: code, Message: problems.Clip(message, 1024), Details: clipProblems(details), Retries: retries}}
}

// settle turns what the engine returned into the execution to answer with: an engine error is an
// internal failure, and a failed execution always says why.
func (s *Server) settle(id string, exec *messages.Execution, err error) *messages.Execution {
	if err != nil {
		s.log.Error("request not routed", zap.String("event", "request_error"), zap.String("request_id", id), zap.Error(err))
		return &messages.Execution{RequestId: id, StatusCode: http.StatusInternalServerError, Error: &messages.Failure{Code: "internal", Message: err.Error()}}
	}
	if exec.StatusCode != http.StatusOK && exec.Error == nil {
		exec.Error = &messages.Failure{Code: "internal", Message: "the request failed"}
	}
	return exec
}

// setRetryAfter tells a caller when to come back, when the failure knows. A spent budget asks for no
// retry at all (x-should-retry: false, which the official SDKs obey): its period may end in a month,
// and a client that waits out a Retry-After would hang; the body says when it resets.
func setRetryAfter(w http.ResponseWriter, f *messages.Failure) {
	if f.GetCode() == string(resilience.BudgetExceeded) {
		w.Header().Set("X-Should-Retry", "false")
		return
	}
	if ra := f.GetRetryAfterSeconds(); ra > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ra))))
	}
}

// clipProblems bounds a problem list and what each problem quotes.
func clipProblems(details []*messages.Problem) []*messages.Problem {
	clipped := make([]*messages.Problem, 0, min(len(details), problems.MaxProblems+1))
	for _, d := range details[:min(len(details), problems.MaxProblems+1)] {
		clipped = append(clipped, &messages.Problem{Field: problems.Clip(d.Field, problems.MaxFieldBytes), Message: problems.Clip(d.Message, problems.MaxMessageBytes)})
	}
	return clipped
}

// problemSummary is an error's message as OpenAI's and Anthropic's shapes write it: the message, then
// the first problems (the body lists them all).
func problemSummary(message string, details []*messages.Problem) string {
	var b strings.Builder
	b.WriteString(problems.Clip(message, 1024))
	for i, d := range details[:min(len(details), 3)] {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		b.WriteString(sep + d.Field + " " + d.Message)
	}
	return b.String()
}
