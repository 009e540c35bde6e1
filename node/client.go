package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/logging"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/secret"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ClientOptions configure a node that sends route requests.
type ClientOptions struct {
	// Listen is the client's own remote address, where nodes send progress and answers.
	Listen string
	// Token signs the requests and authenticates the answers; it must be the node's.
	Token secret.String
	TLS   TLSFiles
	Log   *zap.Logger
}

// Client sends route requests to other nodes. It listens too (protoactor answers by connecting back),
// behind a gate of its own that takes only answers and progress addressed to its requests.
type Client struct {
	system *actor.ActorSystem
	remote *remote.Remote
	key    []byte
	seq    atomic.Uint64
}

// progressPrefix starts the names of a client's progress listeners.
const progressPrefix = "progress-"

// NewClient starts a client node.
func NewClient(opts ClientOptions) (*Client, error) {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	refusals := newRefusals(log, nil, time.Now)
	serverCreds, dialCreds, err := opts.TLS.credentials(refusals.refuse)
	if err != nil {
		return nil, err
	}
	c := &Client{key: tokenKey(opts.Token)}
	types := map[protoreflect.FullName]bool{}
	for _, m := range answerTypes {
		types[proto.MessageName(m)] = true
	}
	gate := &Gate{Key: c.key, Types: types, Now: time.Now, Target: func(id string) bool {
		return strings.HasPrefix(id, "future$") || strings.HasPrefix(id, progressPrefix)
	}}
	c.system = actor.NewActorSystem(logging.ActorLogger(log))
	if c.remote, err = startRemote(c.system, opts.Listen, append(serverCreds, gate.Interceptors(refusals.refuse)...), dialCreds); err != nil {
		c.system.Shutdown()
		return nil, err
	}
	gate.Local = c.system.Address()
	return c, nil
}

// Close stops the client's listener and actor system.
func (c *Client) Close() {
	c.remote.Shutdown(false)
	c.system.Shutdown()
}

// Route sends a request to the node at addr and waits for its Execution, at most wait and no longer
// than ctx lasts. A node refuses a request without the right token by not answering at all, so a
// wrong token ends in ErrNoAnswer. progress, when set, receives the request's steps as they happen,
// on an actor of the client's: it must not block.
func (c *Client) Route(ctx context.Context, addr string, req *messages.RouteRequest, wait time.Duration, progress func(*messages.Progress)) (*messages.Execution, error) {
	if progress != nil {
		name := progressPrefix + strconv.FormatUint(c.seq.Add(1), 10)
		pid, err := c.system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
			if p, ok := ctx.Message().(*messages.Progress); ok {
				progress(p)
			}
		}), name)
		if err != nil {
			return nil, fmt.Errorf("progress listener: %w", err)
		}
		// Poisoned after the answer: every step sent before it is delivered first.
		defer func() { _ = c.system.Root.PoisonFuture(pid).Wait() }()
		req.ProgressTo = pid
	}
	future := actor.NewFuture(c.system, wait)
	if err := send(c.system, c.key, time.Now(), actor.NewPID(addr, RouteActor), future.PID(), &messages.RemoteRoute{Request: req}); err != nil {
		return nil, err
	}
	var res any
	var err error
	answered := make(chan struct{})
	go func() { res, err = future.Result(); close(answered) }() // ends by wait at the latest
	select {
	case <-answered:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w at %s: %w", ErrNoAnswer, addr, context.Cause(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("%w at %s within %s (a wrong token is refused without an answer): %v", ErrNoAnswer, addr, wait, err)
	}
	exec, ok := res.(*messages.Execution)
	if !ok {
		return nil, fmt.Errorf("node %s answered %T", addr, res)
	}
	return exec, nil
}
