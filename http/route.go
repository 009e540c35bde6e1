package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// problemsField logs validation problems (already capped) without reflection.
type problemsField []*messages.Problem

func (ps problemsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, p := range ps {
		_ = enc.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
			o.AddString("field", p.Field)
			o.AddString("message", p.Message)
			return nil
		}))
	}
	return nil
}

var routeFields = map[string]bool{
	"task": true, "category": true, "models": true, "strategy": true, "timeout": true, "workers": true,
	"min_responses": true, "quorum_grace_seconds": true, "metadata": true, "quorum": true, "quorum_tau": true,
	"parameters": true, "strict_parameters": true, "cache": true,
}

// route answers POST /route-thompson, Conclave's own door. Its opening is its own: the caller's
// X-Request-ID is checked before the body, and every refusal is in Conclave's shape.
func (s *Server) route(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	received := time.Now()
	id := uuid.NewString() // always the server's own: a caller's id never names, or replaces, a record
	w.Header().Set("X-Request-ID", id)
	clientID := r.Header.Get("X-Request-ID")
	if problem := problems.ClientID(clientID); problem != "" {
		writeError(w, http.StatusBadRequest, "malformed_request", "the X-Request-ID header is invalid",
			[]*messages.Problem{{Field: "X-Request-ID", Message: problem}})
		return
	}
	body, ok := s.readJSON(w, r)
	if !ok {
		return
	}
	req, status, why := s.parseRoute(body)
	if status != 0 {
		code, msg := "malformed_request", "the request is invalid"
		if status == http.StatusNotFound {
			code, msg = "not_found", "the request names an unknown model or blueprint"
		}
		s.log.Info("request rejected", zap.String("event", "request_rejected"), zap.String("request_id", id), zap.Int("status", status),
			zap.Array("problems", problemsField(why)))
		writeError(w, status, code, msg, why)
		return
	}
	req.RequestId, req.ClientRequestId = id, clientID
	req.ReceivedAt = timestamppb.New(received)
	if ce := s.log.Check(zap.DebugLevel, "request received"); ce != nil {
		ce.Write(zap.String("event", "request_received"), zap.String("request_id", id), zap.String("client_request_id", clientID),
			zap.Int("task_bytes", len(req.Task)), zap.String("category", req.Category), zap.Int("models", len(req.Models)), zap.String("remote", r.RemoteAddr))
	}
	s.answerRoute(w, r, req)
}

// answerRoute runs a route request and writes its answer: the response, or the events of its progress
// when the caller asked for them (Accept: text/event-stream).
func (s *Server) answerRoute(w http.ResponseWriter, r *http.Request, req *messages.RouteRequest) {
	if wantsEvents(r) {
		s.routeWithProgress(w, r, req)
		return
	}
	routing(w, req.RequestId)
	exec, err := s.engine.Route(r.Context(), req)
	routed(w, exec)
	if exec = s.settle(req.RequestId, exec, err); exec.StatusCode != http.StatusOK {
		e := exec.Error
		setRetryAfter(w, e)
		writeErrorWithRetries(w, int(exec.StatusCode), e.Code, e.Message, e.Details, retryViews(exec.Retries))
		return
	}
	writeJSON(w, http.StatusOK, renderRoute(exec))
}

// validClientID reports whether a caller's X-Request-ID may be kept beside the server's id.
func validClientID(id string) bool { return problems.ClientID(id) == "" }

// isJSON accepts application/json and any +json type, with parameters.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// readJSON reads a request's body: sent as JSON (else 415), at most MaxBodyBytes (else 413), strict
// JSON (else 400). It answers the failures itself.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	return s.readJSONWith(w, r, writeError)
}

// readJSONWith is readJSON answering failures in the shape of writeErr.
func (s *Server) readJSONWith(w http.ResponseWriter, r *http.Request, writeError errorWriter) ([]byte, bool) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be JSON, sent with Content-Type: application/json", nil)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the body exceeds the limit of %d bytes", tooLarge.Limit), nil)
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "malformed_request", "could not read the body: "+err.Error(), nil)
		return nil, false
	}
	if p := strictJSON(body); p != nil {
		writeError(w, http.StatusBadRequest, "malformed_request", "the body is not one strict JSON object", []*messages.Problem{p})
		return nil, false
	}
	return body, true
}

// parseRoute is /route-thompson's decoder: it decodes a route body and has intake judge the request,
// collecting every problem. The status is 0 when the request is valid, 400 for malformed input and 404
// when the only problems are unknown names.
func (s *Server) parseRoute(body []byte) (*messages.RouteRequest, int, []*messages.Problem) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		msg := "the body must be a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, http.StatusBadRequest, []*messages.Problem{{Field: "body", Message: msg}}
	}
	bad := newReport()
	req := &messages.RouteRequest{}
	bad.unknown("", fields, has(routeFields))
	for _, m := range routeMembers {
		raw, ok := fields[m.name]
		bad.visit(m.name)
		switch {
		case !ok && m.required:
			bad.Add(m.name, "is required")
		case ok:
			if problem := m.read(raw, req); problem != "" {
				bad.Add(m.name, problem)
			}
		}
	}
	req.Ask = readParameters(fields, bad)
	req.StrictParameters = flag(fields, "strict_parameters", bad)
	req.Cache = readGiven(fields, "cache", readCacheChoice, bad)
	if status, ps := s.judge(req, bad); status != 0 {
		return nil, status, ps
	}
	return req, 0, nil
}

// routeMember is a member of /route-thompson's body: its reader into the request returns what is wrong
// with it, or "".
type routeMember struct {
	name     string
	required bool
	read     func(raw json.RawMessage, req *messages.RouteRequest) string
}

// routeMembers are /route-thompson's members in the order they are read, which orders their problems;
// the sampling parameters and strict_parameters come after them.
var routeMembers = []routeMember{
	{name: "task", required: true, read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		return decodeOr(raw, &req.Task, "must be a string")
	}},
	{name: "category", read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		return nonEmpty(decodeOr(raw, &req.Category, "must be a string"), len(req.Category))
	}},
	{name: "models", read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		return nonEmpty(decodeOr(raw, &req.Models, "must be a list of model ids"), len(req.Models))
	}},
	{name: "strategy", read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		return optional(raw, &req.Strategy, "must be a string")
	}},
	// timeout bounds the caller's wait (answer, retries and arbiter included); the blueprint's timeout
	// stays each call's budget.
	{name: "timeout", read: func(raw json.RawMessage, req *messages.RouteRequest) string { return decimal(raw, &req.TimeoutSeconds) }},
	{name: "quorum", read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		return optional(raw, &req.Quorum, "must be \"fixed\" or \"adaptive\"")
	}},
	{name: "quorum_tau", read: func(raw json.RawMessage, req *messages.RouteRequest) string { return decimal(raw, &req.QuorumTau) }},
	{name: "quorum_grace_seconds", read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		return decimal(raw, &req.QuorumGraceSeconds)
	}},
	{name: "workers", read: func(raw json.RawMessage, req *messages.RouteRequest) string { return count(raw, &req.Workers) }},
	{name: "min_responses", read: func(raw json.RawMessage, req *messages.RouteRequest) string { return count(raw, &req.MinResponses) }},
	{name: "metadata", read: func(raw json.RawMessage, req *messages.RouteRequest) string {
		var md map[string]any
		if err := json.Unmarshal(raw, &md); err != nil || md == nil {
			return "must be a JSON object"
		}
		var err error
		if req.Metadata, err = structpb.NewStruct(md); err != nil {
			return err.Error()
		}
		return ""
	}},
}

// decodeOr decodes raw into v, or says what it must be.
func decodeOr(raw json.RawMessage, v any, must string) string {
	if json.Unmarshal(raw, v) != nil {
		return must
	}
	return ""
}

// nonEmpty is a member's problem, or that it is empty (of length n) when given.
func nonEmpty(problem string, n int) string {
	if problem == "" && n == 0 {
		return "must not be empty when given"
	}
	return problem
}

// optional decodes a string that is left unset when it does not decode, or says what it must be.
func optional(raw json.RawMessage, v **string, must string) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return must
	}
	*v = &s
	return ""
}

// decimal decodes a number, or says it must be one.
func decimal(raw json.RawMessage, v **float64) string {
	n, ok := numberOf(raw)
	if !ok {
		return "must be a number"
	}
	*v = n
	return ""
}

// count decodes a whole number, or says it must be one. One past what a request's field holds stays
// past its bounds, for intake to refuse.
func count(raw json.RawMessage, v **int32) string {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) {
		return "must be an integer"
	}
	n := int32(max(min(f, math.MaxInt32), math.MinInt32))
	*v = &n
	return ""
}

// readParameters reads the sampling parameters, as chat completions names them, which reach every
// model asked.
func readParameters(fields map[string]json.RawMessage, bad *report) *messages.Ask {
	bad.visit("parameters")
	raw, ok := given(fields, "parameters")
	if !ok {
		return nil
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(raw, &params); err != nil || params == nil {
		bad.Add("parameters", "must be an object of sampling parameters")
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !samplingFields[k] {
			bad.Add("parameters."+k, "unknown parameter (want temperature, top_p, max_tokens, max_completion_tokens, stop, seed, "+
				"presence_penalty, frequency_penalty, logit_bias or user)")
		}
	}
	if sampling := chatSampling.read(params, "parameters.", bad); sampling != nil {
		return &messages.Ask{Sampling: sampling}
	}
	return nil
}

// maxJSONDepth bounds the nesting of a body.
const maxJSONDepth = 32

// strictJSON checks that a body is one JSON value and nothing after it, with no key twice in any
// object, nested at most maxJSONDepth deep; it returns the problem, or nil. The standard library's
// scanner checks the syntax without allocating; keys and depth are then read off the bytes it
// accepted (json.Decoder.Token, which could do both, costs an allocation per token).
func strictJSON(body []byte) *messages.Problem {
	if !json.Valid(body) {
		var v any
		msg := "the body must hold exactly one JSON object, with nothing after it"
		if err := json.Unmarshal(body, &v); err != nil {
			msg = "the body must be a JSON object: " + err.Error()
		}
		return &messages.Problem{Field: "body", Message: msg}
	}
	return checkKeys(body)
}

// container is an object or array open while checkKeys reads a body.
type container struct {
	path   string // the field the container is, as problems name it
	object bool   // an object, whose strings alternate between key and value
	key    bool   // the next string in the object is a key
	// names are the object's keys so far, while they are few (read in place from the body); seen holds
	// them once they are many, so that a body of many keys costs no more than a map per object.
	names [][]byte
	seen  map[string]bool
}

// maxListedKeys is how many keys of an object checkKeys compares one by one before it keeps a map.
const maxListedKeys = 16

// add records an object's key, reporting whether it was there already.
func (c *container) add(name []byte) bool {
	if c.seen == nil {
		for _, n := range c.names {
			if bytes.Equal(n, name) {
				return true
			}
		}
		if len(c.names) < maxListedKeys {
			c.names = append(c.names, name)
			return false
		}
		c.seen = make(map[string]bool, 2*maxListedKeys)
		for _, n := range c.names {
			c.seen[string(n)] = true
		}
	}
	if c.seen[string(name)] {
		return true
	}
	c.seen[string(name)] = true
	return false
}

// checkKeys finds a key twice in one object, or a value nested deeper than maxJSONDepth, in a body
// json.Valid accepted.
func checkKeys(body []byte) *messages.Problem {
	k := keyScanner{body: body}
	var p *messages.Problem
	for i := 0; i < len(body) && p == nil; i++ {
		switch body[i] {
		case '{', '[':
			p = k.open(body[i] == '{')
		case '}', ']':
			k.stack = k.stack[:len(k.stack)-1]
		case ',':
			k.comma()
		case '"':
			i, p = k.text(i)
		case ' ', '\t', '\n', '\r', ':':
		default: // a number, true, false or null
			i, p = k.scalar(i)
		}
	}
	return p
}

// keyScanner reads a body json.Valid accepted, one token at a time: the containers open, and the last
// key read, which names the value after it (its path is made only when a problem or a nested
// container needs it).
type keyScanner struct {
	body  []byte
	stack []container
	last  []byte
}

// deep is the problem of a value that starts at the current depth, when that is too deep.
func (k *keyScanner) deep() *messages.Problem {
	if len(k.stack) > maxJSONDepth {
		return &messages.Problem{Field: "body", Message: fmt.Sprintf("the body nests deeper than %d levels", maxJSONDepth)}
	}
	return nil
}

// path is the field the innermost container is, as problems name it.
func (k *keyScanner) path() string {
	if len(k.stack) == 0 {
		return ""
	}
	return k.stack[len(k.stack)-1].path
}

// lastPath is the field the last key read names.
func (k *keyScanner) lastPath() string {
	if p := k.path(); p != "" {
		return p + "." + string(k.last)
	}
	return string(k.last)
}

// open opens an object or a list, a value of the container around it.
func (k *keyScanner) open(object bool) *messages.Problem {
	if p := k.deep(); p != nil {
		return p
	}
	field := k.path()
	if n := len(k.stack); n > 0 && k.stack[n-1].object {
		field = k.lastPath()
	}
	k.stack = append(k.stack, container{path: field, object: object, key: object})
	return nil
}

// comma ends a member: in an object, a key comes next.
func (k *keyScanner) comma() {
	if n := len(k.stack); k.stack[n-1].object {
		k.stack[n-1].key = true
	}
}

// text reads the string that starts at i, a key or a value; it returns where the string ends.
func (k *keyScanner) text(i int) (int, *messages.Problem) {
	end := i + 1
	escaped := false
	for ; k.body[end] != '"'; end++ {
		if k.body[end] == '\\' {
			escaped = true
			end++
		}
	}
	raw := k.body[i : end+1]
	top := len(k.stack) - 1
	if top < 0 || !k.stack[top].object || !k.stack[top].key {
		return end, k.deep()
	}
	name := raw[1 : len(raw)-1]
	if escaped {
		var unquoted string
		_ = json.Unmarshal(raw, &unquoted) // valid JSON: its keys unquote
		name = []byte(unquoted)
	}
	k.last, k.stack[top].key = name, false
	if k.stack[top].add(name) {
		return end, &messages.Problem{Field: k.lastPath(), Message: "appears twice"}
	}
	return end, nil
}

// scalar reads the number, true, false or null that starts at i; it returns where it ends.
func (k *keyScanner) scalar(i int) (int, *messages.Problem) {
	if p := k.deep(); p != nil {
		return i, p
	}
	for i+1 < len(k.body) && !strings.ContainsRune(",]} \t\n\r", rune(k.body[i+1])) {
		i++
	}
	return i, nil
}

func details(errs problems.Errors) []*messages.Problem {
	out := make([]*messages.Problem, len(errs))
	for i, p := range errs {
		out[i] = &messages.Problem{Field: p.Field, Message: p.Message}
	}
	return out
}

// number reads a number; nil when left out or not a number.
func number(fields map[string]json.RawMessage, name string, bad *report) *float64 {
	raw, ok := fields[name]
	bad.visit(name)
	if !ok {
		return nil
	}
	var v *float64
	if problem := decimal(raw, &v); problem != "" {
		bad.Add(name, problem)
	}
	return v
}

// The response of POST /route-thompson.
type routeResponse struct {
	RequestID       string         `json:"request_id"`
	ClientRequestID string         `json:"client_request_id,omitempty"`
	Category        string         `json:"category"`
	Confidence      float64        `json:"confidence"`
	Blueprint       blueprintView  `json:"blueprint"`
	Answer          string         `json:"answer"`
	Consensus       consensusView  `json:"consensus"`
	Responses       []responseView `json:"responses"`
	Phases          *phasesView    `json:"phases"`
	Retries         []retryView    `json:"retries"`
	Degraded        bool           `json:"degraded"`
	// Usage and Cost (US dollars, exact) sum every call the request made, the arbiter's included.
	Usage usageView `json:"usage"`
	Cost  money.USD `json:"cost"`
	// Quorum says how many of the selected models were asked, in how many waves, and why asking stopped.
	Quorum *quorumView `json:"quorum,omitempty"`
	// DroppedParameters names the parameters that a called model's provider could not carry, left out
	// of that call (each response names its own).
	DroppedParameters []string `json:"dropped_parameters"`
}

// phasesView is each phase's time, its fields in the order of their names.
type phasesView struct {
	AssignMs    float64 `json:"assign_ms"`
	BlueprintMs float64 `json:"blueprint_ms"`
	ClassifyMs  float64 `json:"classify_ms"`
	CollectMs   float64 `json:"collect_ms"`
	ConsensusMs float64 `json:"consensus_ms"`
	DispatchMs  float64 `json:"dispatch_ms"`
	FeedbackMs  float64 `json:"feedback_ms"`
	SelectMs    float64 `json:"select_ms"`
	TotalMs     float64 `json:"total_ms"`
}

type quorumView struct {
	Mode      string  `json:"mode"`
	Asked     int32   `json:"asked"`
	Selected  int32   `json:"selected"`
	Waves     int32   `json:"waves"`
	Stopped   string  `json:"stopped"`
	Posterior float64 `json:"posterior,omitempty"`
}

// usageView is a call's or a request's tokens; estimated says Conclave counted them, the provider
// having reported none (a call cut before its last event).
type usageView struct {
	InputTokens  int32 `json:"input_tokens"`
	OutputTokens int32 `json:"output_tokens"`
	Estimated    bool  `json:"estimated,omitempty"`
}

func viewUsage(u *messages.Usage) usageView {
	return usageView{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(), Estimated: u.GetEstimated()}
}

type blueprintView struct {
	Name               string  `json:"name"`
	Workers            int32   `json:"workers"`
	TimeoutSeconds     float64 `json:"timeout_seconds"`
	Strategy           string  `json:"strategy"`
	MinResponses       int32   `json:"min_responses"`
	QuorumGraceSeconds float64 `json:"quorum_grace_seconds,omitempty"`
	Quorum             string  `json:"quorum,omitempty"`
	QuorumTau          float64 `json:"quorum_tau,omitempty"`
}

type consensusView struct {
	Strategy     string   `json:"strategy"`
	Arbiter      string   `json:"arbiter"`
	ChosenModel  string   `json:"chosen_model"`
	Agreement    []string `json:"agreement"`
	Disagreement []string `json:"disagreement"`
	ArbiterError string   `json:"arbiter_error,omitempty"`
}

type responseView struct {
	Model     string  `json:"model"`
	Provider  string  `json:"provider"`
	Worker    string  `json:"worker"`
	Status    string  `json:"status"`
	LatencyMs float64 `json:"latency_ms"`
	// ProviderLatencyMs is the provider's own round trip, within LatencyMs.
	ProviderLatencyMs float64   `json:"provider_latency_ms,omitempty"`
	WeightedScore     float64   `json:"weighted_score"`
	Contributed       bool      `json:"contributed"`
	Decider           bool      `json:"decider,omitempty"` // it decided a majority vote; the others broke ties
	Attempt           int32     `json:"attempt"`
	ErrorKind         string    `json:"error_kind,omitempty"`
	ErrorScope        string    `json:"error_scope,omitempty"`
	Usage             usageView `json:"usage"`
	Cost              money.USD `json:"cost"`
	DroppedParameters []string  `json:"dropped_parameters,omitempty"`
}

type retryView struct {
	Model      string  `json:"model"`
	Provider   string  `json:"provider"`
	FromWorker string  `json:"from_worker,omitempty"`
	ToWorker   string  `json:"to_worker,omitempty"`
	Attempt    int32   `json:"attempt"`
	Kind       string  `json:"kind"`
	DelayMs    float64 `json:"delay_ms"`
	Outcome    string  `json:"outcome"`
}

func retryViews(rs []*messages.Retry) []retryView {
	out := make([]retryView, len(rs))
	for i, r := range rs {
		out[i] = retryView{Model: r.Model, Provider: r.Provider, FromWorker: r.FromWorker, ToWorker: r.ToWorker, Attempt: r.Attempt, Kind: r.Kind,
			DelayMs: r.DelayMs, Outcome: r.Outcome}
	}
	return out
}

func renderRoute(e *messages.Execution) routeResponse {
	resp := routeResponse{
		RequestID: e.RequestId, ClientRequestID: e.ClientRequestId, Answer: e.Answer, Degraded: e.Degraded, Retries: retryViews(e.Retries),
		Usage: viewUsage(e.Usage), Cost: money.USD(e.CostNanos),
		Responses: make([]responseView, len(e.Results)),
		Consensus: consensusView{Agreement: []string{}, Disagreement: []string{}}, DroppedParameters: e.DroppedParameters,
	}
	if resp.DroppedParameters == nil {
		resp.DroppedParameters = []string{}
	}
	if c := e.Classification; c != nil {
		resp.Category, resp.Confidence = c.Category, c.Confidence
	}
	if b := e.Blueprint; b != nil {
		resp.Blueprint = blueprintView{Name: b.Name, Workers: b.Workers, TimeoutSeconds: b.TimeoutSeconds, Strategy: b.Strategy,
			MinResponses: b.MinResponses, QuorumGraceSeconds: b.QuorumGraceSeconds, Quorum: b.Quorum, QuorumTau: b.QuorumTau}
	}
	if q := e.Quorum; q != nil {
		resp.Quorum = &quorumView{Mode: q.Mode, Asked: q.Asked, Selected: q.Selected, Waves: q.Waves, Stopped: q.Stopped, Posterior: q.Posterior}
	}
	if d := e.Decision; d != nil {
		resp.Consensus.Strategy, resp.Consensus.Arbiter, resp.Consensus.ChosenModel, resp.Consensus.ArbiterError = d.Strategy, d.Arbiter, d.ChosenModel, d.ArbiterError
		if d.Agreement != nil {
			resp.Consensus.Agreement = d.Agreement
		}
		if d.Disagreement != nil {
			resp.Consensus.Disagreement = d.Disagreement
		}
	}
	for i, r := range e.Results {
		resp.Responses[i] = responseView{Model: r.Model, Provider: r.Provider, Worker: r.Worker, Status: r.Status, LatencyMs: r.LatencyMs,
			ProviderLatencyMs: r.ProviderLatencyMs, WeightedScore: r.WeightedScore, Contributed: r.Contributed, Decider: r.Decider, Attempt: r.Attempt, ErrorKind: r.ErrorKind, ErrorScope: r.ErrorScope,
			Usage: viewUsage(r.Usage), Cost: money.USD(r.CostNanos), DroppedParameters: r.DroppedParameters}
	}
	if p := e.Phases; p != nil {
		resp.Phases = &phasesView{ClassifyMs: p.ClassifyMs, BlueprintMs: p.BlueprintMs, SelectMs: p.SelectMs, AssignMs: p.AssignMs,
			DispatchMs: p.DispatchMs, CollectMs: p.CollectMs, ConsensusMs: p.ConsensusMs, FeedbackMs: p.FeedbackMs, TotalMs: p.TotalMs}
	}
	return resp
}
