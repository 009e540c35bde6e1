package remotedoor

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
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
	// pending holds, by the name of each future and progress listener waiting for a node, the
	// authentication of the request it waits on: what the gate lets in for it, and what an answer
	// must answer.
	pending sync.Map
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
	serverCreds, dialCreds, err := opts.TLS.credentials(MaxConnections, refusals.refuse)
	if err != nil {
		return nil, err
	}
	c := &Client{key: tokenKey(opts.Token), system: actor.NewActorSystem(logging.ActorLogger(sampled(log)))}
	types := map[protoreflect.FullName]bool{}
	for _, m := range answerTypes {
		types[proto.MessageName(m)] = true
	}
	// Answers are signed for the address the client's requests named as their sender, its own: no
	// other name of it is taken (Mine is left to Local).
	gate := &Gate{Key: c.key, Types: types, Now: time.Now, Local: c.system.Address,
		Target: func(id string) bool {
			_, waiting := c.pending.Load(id)
			return waiting
		},
		Answers: func(id string) string {
			auth, _ := c.pending.Load(id)
			s, _ := auth.(string)
			return s
		}}
	if c.remote, err = startRemote(c.system, opts.Listen, append(append(serverCreds, serverLimits...), gate.Interceptors(refusals.refuse)...), dialCreds); err != nil {
		c.system.Shutdown()
		return nil, err
	}
	return c, nil
}

// Close stops the client's listener and actor system. The connections it dialed end with the process:
// a program makes one Client and keeps it (protoactor's remote sets process-wide state as it starts).
func (c *Client) Close() {
	c.remote.Shutdown(false)
	c.system.Shutdown()
}

// Route sends a request to the node at addr and waits for its Execution, at most wait and no longer
// than ctx lasts. A node refuses a request without the right token by not answering at all, so a
// wrong token ends in ErrNoAnswer. progress, when set, receives the request's steps as they happen,
// on an actor of the client's: it must not block.
func (c *Client) Route(ctx context.Context, addr string, req *messages.RouteRequest, wait time.Duration, progress func(*messages.Progress)) (*messages.Execution, error) {
	var waiting []string // names under pending, until the answer
	defer func() {
		for _, name := range waiting {
			c.pending.Delete(name)
		}
	}()
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
		waiting = append(waiting, name)
	}
	future := actor.NewFuture(c.system, wait)
	to := actor.NewPID(addr, RouteActor)
	env, auth, err := envelope(c.key, time.Now(), to, "", future.PID(), &messages.RemoteRoute{Request: req})
	if err != nil {
		return nil, err
	}
	waiting = append(waiting, future.PID().Id)
	for _, name := range waiting {
		c.pending.Store(name, auth)
	}
	c.system.Root.Send(to, env)
	var res any
	var resErr error
	answered := make(chan struct{})
	go func() { res, resErr = future.Result(); close(answered) }() // ends by wait at the latest
	select {
	case <-answered:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w at %s: %w", ErrNoAnswer, addr, context.Cause(ctx))
	}
	if resErr != nil {
		return nil, fmt.Errorf("%w at %s within %s (a wrong token is refused without an answer): %v", ErrNoAnswer, addr, wait, resErr)
	}
	exec, ok := res.(*messages.Execution)
	if !ok {
		return nil, fmt.Errorf("node %s answered %T", addr, res)
	}
	return exec, nil
}
