// Package node owns a controller's place among other nodes: the protoactor remote endpoint (gRPC)
// where actors of other processes send RouteRequest messages and get the same Execution an HTTP caller
// gets, and the client side that sends them. Authentication is the API's bearer token, carried in the
// message: a node listening beyond loopback must have one.
package node

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/secret"
	"github.com/conclave-ai/conclave/validation"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// RouteActor is the name of the actor that answers route requests on every node.
const RouteActor = "route"

// Router is the pipeline behind the endpoint.
type Router interface {
	Route(ctx context.Context, req *messages.RouteRequest) (*messages.Execution, error)
}

// MaxTaskBytes bounds a remote request's task, as the HTTP body limit bounds an HTTP one.
const MaxTaskBytes = 1 << 20

// Endpoint is a started remote endpoint.
type Endpoint struct {
	remote *remote.Remote
	addr   string
}

// Addr is the address other nodes reach the endpoint at.
func (e *Endpoint) Addr() string { return e.addr }

// Stop stops serving.
func (e *Endpoint) Stop() { e.remote.Shutdown(true) }

// Start starts protoactor remote on addr ("host:port", port 0 for any) in system, and the route actor.
// A token is required unless the address is loopback.
func Start(system *actor.ActorSystem, addr string, router Router, token secret.String, log *zap.Logger) (*Endpoint, error) {
	r, err := StartRemote(system, addr)
	if err != nil {
		return nil, err
	}
	a := &routeActor{router: router, log: log, tokenSet: token.Set()}
	if a.tokenSet {
		a.token = sha256.Sum256([]byte(token.Reveal()))
	}
	if _, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }), RouteActor); err != nil {
		r.Shutdown(false)
		return nil, fmt.Errorf("remote route actor: %w", err)
	}
	ep := &Endpoint{remote: r, addr: system.Address()}
	log.Info("remote endpoint listening", zap.String("event", "remote_listening"), zap.String("address", ep.addr), zap.Bool("auth", a.tokenSet))
	return ep, nil
}

// StartRemote starts protoactor remote in system on addr ("host:port", port 0 for any), turning its refusal to listen into an error.
func StartRemote(system *actor.ActorSystem, addr string) (r *remote.Remote, err error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("remote address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("remote address %q: the port is not a number", addr)
	}
	// remote.Start panics when it cannot listen; the port is tried first so the usual case is an
	// error, and the panic is caught for the rest.
	if port != 0 {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("remote listen: %w", err)
		}
		_ = ln.Close()
	}
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("remote listen: %v", p)
		}
	}()
	r = remote.NewRemote(system, remote.Configure(host, port))
	r.Start()
	return r, nil
}

// routeActor answers RemoteRoute messages: each request runs in a goroutine of its own, as an HTTP
// handler does, and its Execution goes back to the sender.
type routeActor struct {
	router   Router
	log      *zap.Logger
	token    [sha256.Size]byte
	tokenSet bool
}

func (a *routeActor) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(*messages.RemoteRoute)
	if !ok {
		return
	}
	sender := ctx.Sender()
	if sender == nil {
		return // nobody to answer
	}
	req := m.GetRequest()
	if a.tokenSet {
		sum := sha256.Sum256([]byte(m.Token))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
			a.log.Warn("remote request refused", zap.String("event", "remote_unauthorized"), zap.String("from", sender.Address))
			ctx.Send(sender, refusal(req, http.StatusUnauthorized, "unauthorized", "a valid token is required"))
			return
		}
	}
	if problem := check(req); problem != nil {
		ctx.Send(sender, problem)
		return
	}
	// The server names the request, as over HTTP: the caller's id is kept beside it.
	req.ClientRequestId, req.RequestId = req.GetRequestId(), uuid.NewString()
	req.ReceivedAt = timestamppb.Now()
	a.log.Info("request received", zap.String("event", "request_received"), zap.String("request_id", req.RequestId),
		zap.String("endpoint", "remote"), zap.String("from", sender.Address), zap.Int("task_bytes", len(req.Task)))
	system := ctx.ActorSystem()
	go func() {
		exec, err := a.router.Route(context.Background(), req)
		if err != nil {
			exec = refusal(req, http.StatusInternalServerError, "internal", err.Error())
		}
		system.Root.Send(sender, exec)
	}()
}

// check refuses what the pipeline cannot take; everything else it checks itself, as for HTTP.
func check(req *messages.RouteRequest) *messages.Execution {
	switch {
	case req == nil:
		return refusal(nil, http.StatusBadRequest, "malformed_request", "the message holds no request")
	case len(req.Task) > MaxTaskBytes:
		return refusal(req, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the task exceeds %d bytes", MaxTaskBytes))
	case !validation.Visible(req.Task):
		return refusal(req, http.StatusBadRequest, "malformed_request", "task: must have at least one visible character")
	case req.TimeoutSeconds != nil && validation.Timeout(*req.TimeoutSeconds) != "":
		return refusal(req, http.StatusBadRequest, "malformed_request", "timeout: "+validation.Timeout(*req.TimeoutSeconds))
	}
	return nil
}

func refusal(req *messages.RouteRequest, status int, code, msg string) *messages.Execution {
	return &messages.Execution{RequestId: req.GetRequestId(), StatusCode: int32(status), Error: &messages.Failure{Code: code, Message: msg}}
}

// ErrNoAnswer is returned when a node does not answer within the wait.
var ErrNoAnswer = errors.New("the node did not answer")

// Route sends a request to the node at addr from system (which must have remote started) and waits
// for its Execution. progress, when set, receives the request's steps as they happen.
func Route(system *actor.ActorSystem, addr string, req *messages.RouteRequest, token string, wait time.Duration,
	progress func(*messages.Progress)) (*messages.Execution, error) {
	if progress != nil {
		pid, told := actors.ListenProgress(system, progress)
		defer told()
		req.ProgressTo = pid
	}
	res, err := system.Root.RequestFuture(actor.NewPID(addr, RouteActor), &messages.RemoteRoute{Request: req, Token: token}, wait).Result()
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrNoAnswer, addr, err)
	}
	exec, ok := res.(*messages.Execution)
	if !ok {
		return nil, fmt.Errorf("node %s answered %T", addr, res)
	}
	return exec, nil
}
