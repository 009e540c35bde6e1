package remotedoor

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/validation"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds on a remote request, as the HTTP API bounds its body.
const (
	MaxTaskBytes     = 1 << 20
	maxModels        = 64
	maxModelIDBytes  = 200
	maxClientIDBytes = 128
)

// gateway answers RemoteRoute messages, which the gate lets through only with the token: each request
// runs in a goroutine of its own, as an HTTP handler does, and its progress and Execution go back to
// the sender, signed as answers to it. The request reaches the engine as a method call, never as a
// message to one of its actors, and its progress comes back through a listener the engine makes.
type gateway struct {
	router      Router
	log         *zap.Logger
	key         []byte
	now         func() time.Time
	local       func() string
	refused     func(reason string)
	seen        *replays
	maxInflight int64
	inflight    atomic.Int64
}

func (g *gateway) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(*messages.RemoteRoute)
	sender := ctx.Sender()
	if !ok || sender == nil {
		return // the gate lets nothing else through; nothing to answer without a sender
	}
	// The gate checked the header; a request is taken once (see replays).
	auth := ctx.MessageHeader().Get(AuthHeader)
	if len(g.key) > 0 && !g.seen.first(auth, g.now()) {
		g.refused(RefusedReplayed)
		return
	}
	system := ctx.ActorSystem()
	req := m.GetRequest()
	reply := func(exec *messages.Execution) {
		if err := answer(system, g.key, g.now(), sender, auth, exec); err != nil {
			g.log.Error("remote answer not sent", zap.String("event", "remote_answer_failed"), zap.String("request_id", exec.RequestId), zap.Error(err))
		}
	}
	if problem := g.check(req, sender); problem != nil {
		reply(problem)
		return
	}
	if g.inflight.Add(1) > g.maxInflight {
		g.inflight.Add(-1)
		exec := refusal(req, http.StatusServiceUnavailable, "overloaded", fmt.Sprintf("%d remote requests are running already", g.maxInflight))
		exec.Error.RetryAfterSeconds = 1
		reply(exec)
		return
	}
	// The server names the request, as over HTTP: the caller's id is kept beside it.
	req.ClientRequestId, req.RequestId = req.GetRequestId(), uuid.NewString()
	req.ReceivedAt = timestamppb.Now()
	progressTo := req.ProgressTo
	req.ProgressTo = nil // the engine's progress listener takes its place
	if ce := g.log.Check(zap.DebugLevel, "request received"); ce != nil {
		ce.Write(zap.String("event", "request_received"), zap.String("request_id", req.RequestId),
			zap.String("client_request_id", req.ClientRequestId), zap.String("endpoint", "remote"), zap.String("from", sender.Address),
			zap.Int("task_bytes", len(req.Task)))
	}
	go func() {
		defer g.inflight.Add(-1)
		var onProgress func(*messages.Progress)
		if progressTo != nil {
			onProgress = func(p *messages.Progress) { _ = answer(system, g.key, g.now(), progressTo, auth, p) }
		}
		exec, err := g.router.RouteWithProgress(context.Background(), req, onProgress)
		if err != nil {
			exec = refusal(req, http.StatusInternalServerError, "internal", err.Error())
		}
		reply(exec)
	}()
}

// check refuses what the pipeline cannot take, listing every problem; the rest (a category or a
// model the engine does not know, overrides that contradict the blueprint) the pipeline checks itself,
// as for HTTP.
func (g *gateway) check(req *messages.RouteRequest, sender *actor.PID) *messages.Execution {
	if req == nil {
		return refusal(nil, http.StatusBadRequest, "malformed_request", "the message holds no request")
	}
	if len(req.Task) > MaxTaskBytes {
		return refusal(req, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the task exceeds %d bytes", MaxTaskBytes))
	}
	var bad validation.Errors
	if !validation.Visible(req.Task) {
		bad.Add("task", "must have at least one visible character")
	}
	if len(req.RequestId) > maxClientIDBytes {
		bad.Add("request_id", fmt.Sprintf("must be at most %d bytes", maxClientIDBytes))
	}
	if len(req.Models) > maxModels {
		bad.Add("models", fmt.Sprintf("must list at most %d models", maxModels))
	} else {
		seen := make(map[string]bool, len(req.Models))
		for i, m := range req.Models {
			switch {
			case m == "" || len(m) > maxModelIDBytes:
				bad.Add(fmt.Sprintf("models[%d]", i), fmt.Sprintf("must have 1 to %d bytes", maxModelIDBytes))
			case seen[m]:
				bad.Add(fmt.Sprintf("models[%d]", i), fmt.Sprintf("model %q is listed twice", validation.Clip(m, 64)))
			}
			seen[m] = true
		}
	}
	if s := req.Strategy; s != nil && !blueprints.Strategy(*s).Valid() {
		bad.Add("strategy", "must be majority, weighted, rotating or pairwise")
	}
	if q := req.Quorum; q != nil && *q != blueprints.FixedQuorum && *q != blueprints.AdaptiveQuorum {
		bad.Add("quorum", `must be "fixed" or "adaptive"`)
	}
	if t := req.TimeoutSeconds; t != nil {
		if problem := validation.Timeout(*t); problem != "" {
			bad.Add("timeout", problem)
		}
	}
	if t := req.QuorumTau; t != nil && !(*t > 0 && *t < 1) {
		bad.Add("quorum_tau", "must be greater than 0 and less than 1")
	}
	if s := req.QuorumGraceSeconds; s != nil && !(*s >= 0 && *s <= 3600) {
		bad.Add("quorum_grace_seconds", "must be between 0 and 3600 seconds")
	}
	for _, n := range []struct {
		field string
		v     *int32
	}{{"workers", req.Workers}, {"min_responses", req.MinResponses}} {
		if n.v != nil && (*n.v < 1 || *n.v > blueprints.MaxWorkers) {
			bad.Add(n.field, fmt.Sprintf("must be between 1 and %d", blueprints.MaxWorkers))
		}
	}
	if n := req.MinResponses; n != nil {
		switch {
		case req.Workers != nil && *n > *req.Workers:
			bad.Add("min_responses", fmt.Sprintf("must not exceed workers (%d)", *req.Workers))
		case len(req.Models) > 0 && int(*n) > len(req.Models):
			bad.Add("min_responses", fmt.Sprintf("must not exceed the number of requested models (%d)", len(req.Models)))
		}
	}
	// Progress goes where the answer goes: to the caller's own node, never to another address.
	if p := req.ProgressTo; p != nil && (p.Address != sender.GetAddress() || p.Address == g.local() || p.Address == nonhost || p.Id == "") {
		bad.Add("progress_to", "must name an actor of the caller's own node")
	}
	if len(bad) == 0 {
		return nil
	}
	exec := refusal(req, http.StatusBadRequest, "malformed_request", bad.Capped().Error())
	for _, p := range bad.Capped() {
		exec.Error.Details = append(exec.Error.Details, &messages.Problem{Field: p.Field, Message: p.Message})
	}
	return exec
}

func refusal(req *messages.RouteRequest, status int, code, msg string) *messages.Execution {
	return &messages.Execution{RequestId: req.GetRequestId(), ClientRequestId: req.GetClientRequestId(), StatusCode: int32(status),
		Error: &messages.Failure{Code: code, Message: msg}}
}

// answerTypes are the messages the gateway sends back; a client's gate takes only these.
var answerTypes = []proto.Message{&messages.Execution{}, &messages.Progress{}}

// replays remembers the authentication of every route request taken within MaxSkew, so that one
// captured on its way (where the door runs without TLS) is not taken a second time. At most maxSeen
// are kept: past that, the oldest are forgotten, and a replay of one of them within its five minutes
// would be taken again; at the gateway's bound of requests in flight that takes over a thousand new
// requests a second.
type replays struct {
	mu    sync.Mutex
	seen  map[string]bool
	order []seenAuth // oldest first
}

type seenAuth struct {
	auth string
	at   time.Time
}

const maxSeen = 1 << 18

func newReplays() *replays { return &replays{seen: map[string]bool{}} }

// first reports whether auth is seen for the first time at now, and remembers it.
func (r *replays) first(auth string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.order) > 0 && (now.Sub(r.order[0].at) > 2*MaxSkew || len(r.order) >= maxSeen) {
		delete(r.seen, r.order[0].auth)
		r.order = r.order[1:]
	}
	if r.seen[auth] {
		return false
	}
	r.seen[auth] = true
	r.order = append(r.order, seenAuth{auth: auth, at: now})
	return true
}
