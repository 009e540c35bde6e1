// Package remotedoor owns a controller's door to other nodes: the protoactor remote listener (gRPC) where
// other processes send RemoteRoute messages and get the same Execution an HTTP caller gets, and the
// client side that sends them. The listener runs an actor system of its own whose only actor is the
// route gateway, behind a gate that authenticates every inbound envelope before protoactor reads it;
// the engine's actors live in another system that has no network address at all.
package remotedoor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RouteActor is the name of the gateway that answers route requests on every node: the one actor a
// remote peer can reach.
const RouteActor = "route"

// Router is the pipeline behind the gateway. onProgress, when set, hears each step of the request in
// order before RouteWithProgress returns. The catalog and the blueprints it runs on are what intake
// judges a request against before it is routed.
type Router interface {
	RouteWithProgress(ctx context.Context, req *messages.RouteRequest, onProgress func(*messages.Progress)) (*messages.Execution, error)
	intake.Env
}

// Options configure a remote listener.
type Options struct {
	// Addr is "host:port" (port 0 for any).
	Addr string
	// Token, when set, authenticates every inbound message (see AuthHeader) and signs every answer.
	Token secret.String
	TLS   TLSFiles
	Log   *zap.Logger
	// Refused counts one refused message or connection by its reason; nil counts nothing.
	Refused func(reason string)
	// MaxInflight bounds the remote requests running at once; zero means DefaultMaxInflight.
	MaxInflight int
	// Now is the clock authentication reads; nil is the wall clock.
	Now func() time.Time
	// Names are addresses ("host:port") callers reach this node at that it cannot tell itself: a load
	// balancer's, a port forwarded to it. Its listening address, the names of its TLS certificate at
	// its port, and names resolving to the address it listens on are its names already (see names).
	Names []string
	// Redis, when set, holds the replay cache shared by every node on it under RedisPrefix: a captured
	// request is taken by one of them at most (see replays). Nil keeps it in this process.
	Redis       redis.UniversalClient
	RedisPrefix string
}

// DefaultMaxInflight bounds the remote requests running at once unless Options say otherwise; more
// are answered 503 overloaded.
const DefaultMaxInflight = 1024

// Listener is a started remote listener.
type Listener struct {
	system *actor.ActorSystem
	remote *remote.Remote
	addr   string
}

// Addr is the address other nodes reach the listener at.
func (l *Listener) Addr() string { return l.addr }

// Stop stops serving: the gRPC server, which closes every connection, then the listener's actor
// system. protoactor's graceful shutdown is not used: it tells each inbound connection's reader to
// leave on a channel that the reader closes when its peer leaves first, a race that can panic.
func (l *Listener) Stop() {
	l.remote.Shutdown(false)
	l.system.Shutdown()
}

// Listen starts a remote listener in an actor system of its own, with the route gateway its only
// reachable actor.
func Listen(router Router, opts Options) (*Listener, error) {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	refusals := newRefusals(log, opts.Refused, now)
	serverCreds, dialCreds, err := opts.TLS.credentials(MaxConnections, refusals.refuse)
	if err != nil {
		return nil, err
	}
	key := tokenKey(opts.Token)
	cert, err := opts.TLS.leaf()
	if err != nil {
		return nil, err
	}
	maxInflight := opts.MaxInflight
	if maxInflight <= 0 {
		maxInflight = DefaultMaxInflight
	}
	system := actor.NewActorSystem(logging.ActorLogger(sampled(log)))
	g := &gateway{router: router, log: log, key: key, now: now, maxInflight: int64(maxInflight), local: system.Address,
		refused: func(reason string) { refusals.refuse(reason, "") }, seen: newReplays(opts.Redis, opts.RedisPrefix, log)}
	// The gateway is there before the port opens, and the gate reads the address remote gives it then.
	if _, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return g }), RouteActor); err != nil {
		system.Shutdown()
		return nil, fmt.Errorf("remote route gateway: %w", err)
	}
	mine := newNames(system.Address, opts.Names, cert)
	gate := &Gate{Key: key, Types: map[protoreflect.FullName]bool{proto.MessageName(&messages.RemoteRoute{}): true},
		Target: func(id string) bool { return id == RouteActor }, NeedSender: true, Local: system.Address, Mine: mine.mine, Now: now}
	r, err := startRemote(system, opts.Addr, append(append(serverCreds, serverLimits...), gate.Interceptors(refusals.refuse)...), dialCreds)
	if err != nil {
		system.Shutdown()
		return nil, err
	}
	l := &Listener{system: system, remote: r, addr: system.Address()}
	log.Info("remote listener started", zap.String("event", "remote_listening"), zap.String("address", l.addr),
		zap.Bool("auth", len(key) > 0), zap.Bool("tls", opts.TLS.Enabled()), zap.Bool("mutual_tls", opts.TLS.CA != ""))
	return l, nil
}

// serverLimits bound what one peer may hold of a listener: protoactor needs one stream per peer,
// frames no larger than a request, and a peer that pings more often than every 10 s is cut off.
var serverLimits = []grpc.ServerOption{
	grpc.MaxConcurrentStreams(4),
	grpc.MaxRecvMsgSize(MaxTaskBytes + 1<<20),
	grpc.ConnectionTimeout(10 * time.Second),
	grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
}

// sampled bounds what protoactor logs of a listener's system: it writes a line for every stream a
// peer opens and closes, which a peer without the token could otherwise turn into one line per
// connection. At most three lines of a kind every ten seconds.
func sampled(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, 10*time.Second, 3, 0)
	}))
}

// tokenKey is the key that authenticates messages: the token's bytes, or nil without one.
func tokenKey(token secret.String) []byte {
	if !token.Set() {
		return nil
	}
	return []byte(token.Reveal())
}

// startRemote starts protoactor remote in system on addr ("host:port", port 0 for any) with the given
// gRPC options, turning its refusal to listen into an error.
func startRemote(system *actor.ActorSystem, addr string, server []grpc.ServerOption, dial []grpc.DialOption) (r *remote.Remote, err error) {
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
	r = remote.NewRemote(system, remote.Configure(host, port, remote.WithServerOptions(server...), remote.WithDialOptions(dial...)))
	r.Start()
	return r, nil
}

// envelope wraps msg for a remote actor, signed with key when there is one, and returns it with its
// authentication.
func envelope(key []byte, now time.Time, to *actor.PID, answers string, sender *actor.PID, msg proto.Message) (*actor.MessageEnvelope, string, error) {
	env := &actor.MessageEnvelope{Message: msg, Sender: sender}
	if len(key) == 0 {
		return env, "", nil
	}
	auth, err := Sign(key, now, Addressed{Node: to.Address, Target: to.Id, Answers: answers, Sender: sender}, msg)
	if err != nil {
		return nil, "", err
	}
	env.SetHeader(AuthHeader, auth)
	return env, auth, nil
}

// answer sends msg, signed as an answer to the request authenticated by answers, for the node of to.
func answer(system *actor.ActorSystem, key []byte, now time.Time, to *actor.PID, answers string, msg proto.Message) error {
	env, _, err := envelope(key, now, to, answers, nil, msg)
	if err != nil {
		return err
	}
	system.Root.Send(to, env)
	return nil
}

// ErrNoAnswer is returned when a node does not answer within the wait.
var ErrNoAnswer = errors.New("the node did not answer")

// refusals counts what a listener refuses and logs it: the first refusal, then at most one line every
// RefusalLogEvery with the count since, never one line per message.
type refusals struct {
	log   *zap.Logger
	count func(reason string)
	now   func() time.Time

	mu            sync.Mutex
	total, logged int64
	last          time.Time
}

// RefusalLogEvery is how often at most a remote listener logs its refusals.
const RefusalLogEvery = 10 * time.Second

func newRefusals(log *zap.Logger, count func(string), now func() time.Time) *refusals {
	return &refusals{log: log, count: count, now: now}
}

func (r *refusals) refuse(reason, from string) {
	if r.count != nil {
		r.count(reason)
	}
	now := r.now()
	r.mu.Lock()
	r.total++
	if r.total > 1 && now.Sub(r.last) < RefusalLogEvery {
		r.mu.Unlock()
		return
	}
	total, since := r.total, r.total-r.logged
	r.last, r.logged = now, r.total
	r.mu.Unlock()
	r.log.Warn("remote message refused", zap.String("event", "remote_refused"), zap.String("reason", reason), zap.String("from", from),
		zap.Int64("refused", total), zap.Int64("since_last_line", since))
}
