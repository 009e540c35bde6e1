package remotedoor

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxTaskBytes bounds a remote request's task, as the HTTP API bounds its body.
const MaxTaskBytes = 1 << 20

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
		if s, ok := g.router.(shedder); ok {
			s.Shed("overloaded")
		}
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

// shedder is a router that logs the requests refused for load in one line for all (the engine): the
// gateway's bound refuses them without a line of its own.
type shedder interface{ Shed(code string) }

// check refuses what the pipeline cannot take, listing every problem: the door's own (the size of the
// task, the caller's id, where progress goes) and intake's, the one validation of a route request every
// door calls.
func (g *gateway) check(req *messages.RouteRequest, sender *actor.PID) *messages.Execution {
	if req == nil {
		return refusal(nil, http.StatusBadRequest, "malformed_request", "the message holds no request")
	}
	if len(req.Task) > MaxTaskBytes {
		return refusal(req, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the task exceeds %d bytes", MaxTaskBytes))
	}
	var door problems.Errors
	if problem := problems.ClientID(req.RequestId); problem != "" {
		door.Add("request_id", problem)
	}
	// Progress goes where the answer goes: to the caller's own node, never to another address.
	if p := req.ProgressTo; p != nil && (p.Address != sender.GetAddress() || p.Address == g.local() || p.Address == nonhost || p.Id == "") {
		door.Add("progress_to", "must name an actor of the caller's own node")
	}
	return Judge(req, g.router, door)
}

// Judge is the gateway's answer to a request intake refuses, with the problems the door found with its
// own fields: 400 with every problem, or 404 not_found when the only problems are unknown models or
// blueprints. It is nil when the request may go on.
func Judge(req *messages.RouteRequest, env intake.Env, door problems.Errors) *messages.Execution {
	v := intake.Check(req, env)
	if v.OK() && len(door) == 0 {
		return nil
	}
	status, code, all := http.StatusBadRequest, "malformed_request", append(append(append(problems.Errors{}, v.Bad...), door...), v.Unknown...)
	if len(door) == 0 && v.NotFound() {
		status, code = http.StatusNotFound, "not_found"
	}
	all = all.Capped()
	exec := refusal(req, status, code, all.Error())
	for _, p := range all {
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
