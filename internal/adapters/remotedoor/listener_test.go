package remotedoor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/blueprints"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/remotetest"
	"github.com/conclave-ai/conclave/internal/testenv/tlstest"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const testToken = secret.String("remote-token-0123456789")

// pipeline is a Router that answers every task, telling two steps first, and counts what reached it.
type pipeline struct {
	mu    sync.Mutex
	tasks []string
	hold  chan struct{} // when set, requests wait for it to close
	shed  []string      // the codes of the requests the gateway refused for load
}

func (p *pipeline) Shed(code string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shed = append(p.shed, code)
}

func (p *pipeline) RouteWithProgress(_ context.Context, req *messages.RouteRequest, onProgress func(*messages.Progress)) (*messages.Execution, error) {
	p.mu.Lock()
	p.tasks = append(p.tasks, req.Task)
	hold := p.hold
	p.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if onProgress != nil {
		onProgress(&messages.Progress{RequestId: req.RequestId, Event: "classified"})
		onProgress(&messages.Progress{RequestId: req.RequestId, Event: "selected"})
	}
	return &messages.Execution{RequestId: req.RequestId, ClientRequestId: req.ClientRequestId, StatusCode: 200, Answer: "4"}, nil
}

// The pipeline runs on the embedded catalog and blueprints, which intake judges requests against.
var (
	embeddedCatalog    = must(catalog.Embedded())
	embeddedBlueprints = must(blueprints.Embedded())
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func (p *pipeline) Catalog() *catalog.Catalog   { return embeddedCatalog }
func (p *pipeline) Blueprints() *blueprints.Set { return embeddedBlueprints }

func (p *pipeline) reached() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.tasks...)
}

// refusalCounts counts refusals by reason, safely across the listener's goroutines.
type refusalCounts struct {
	mu sync.Mutex
	by map[string]int
}

func (r *refusalCounts) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]int{}
	}
	r.by[reason]++
}

func (r *refusalCounts) get(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[reason]
}

func listen(t *testing.T, router Router, opts Options) (*Listener, *refusalCounts) {
	t.Helper()
	counts := &refusalCounts{}
	opts.Addr, opts.Refused = "127.0.0.1:0", counts.add
	l, err := Listen(router, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	return l, counts
}

// isolatedEnv names the test a process runs alone (see alone).
const isolatedEnv = "CONCLAVE_NODE_TEST_ALONE"

// alone runs the calling test again in a process of its own and reports whether this is that process.
// protoactor's remote sets gRPC's global logger each time it starts, unsynchronised with the gRPC
// goroutines still ending from an earlier test: a test that starts a listener runs alone, as a
// controller does.
func alone(t *testing.T) bool {
	t.Helper()
	if os.Getenv(isolatedEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), isolatedEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}

// waitFor polls cond until it holds; the listener's refusals and deliveries are asynchronous.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func refusedInAll(r *refusalCounts) int {
	total := 0
	for _, reason := range []string{RefusedAuth, RefusedType, RefusedTarget, RefusedSender, RefusedMalformed} {
		total += r.get(reason)
	}
	return total
}

// TestNothingButAnAuthenticatedRouteRequestCrossesTheDoor sends, without the token, every message type
// Conclave's actors speak and protoactor's own system messages, to the gateway, to the engine's actor
// names and to names that exist nowhere, then frames that would panic protoactor's reader: none is
// delivered or answered, and the listener stays up. (That the token opens the door is the gate's table
// test and the command's: an admitted request is answered by dialing its sender, and a second remote
// in this process would race protoactor's global gRPC logger.)
func TestNothingButAnAuthenticatedRouteRequestCrossesTheDoor(t *testing.T) {
	if !alone(t) {
		return
	}
	p := &pipeline{}
	core, logs := observer.New(zap.WarnLevel)
	l, refused := listen(t, p, Options{Token: testToken, Log: zap.New(core)})
	a := remotetest.Dial(t, l.Addr())
	msgs := remotetest.EveryMessage(t)
	msgs = append(msgs, routeMsg, &messages.Rewards{Rewards: []*messages.Reward{{Model: "openai/gpt-4o", Category: "general", Reward: 1}}},
		&messages.Acquire{Model: "openai/gpt-4o", JobId: "j"}, &actor.Stop{}, &actor.PoisonPill{}, &actor.Watch{Watcher: caller}, &actor.Terminated{Who: caller})
	names := []string{RouteActor, "conclave", "conclave/fleet/worker-01", "conclave/providers/groq", "conclave/bandit", "conclave/recorder",
		"conclave/requests", "conclave/consensus/0", "activator", "no-such-actor"}
	sent := 0
	for _, name := range names {
		for _, m := range msgs {
			for _, from := range []*actor.PID{caller, nil} {
				a.Send(t, wire{msg: m, target: &actor.PID{Address: l.Addr(), Id: name}, sender: from}.batch(t))
				sent++
			}
		}
	}
	// A route request signed with another token, and one whose time is long gone.
	a.Send(t, wire{msg: routeMsg, target: &actor.PID{Address: l.Addr(), Id: RouteActor}, sender: caller,
		header: signed(t, []byte("another-token-0123456789"), time.Now(), &actor.PID{Address: l.Addr(), Id: RouteActor}, caller, routeMsg)}.batch(t))
	a.Send(t, wire{msg: routeMsg, target: &actor.PID{Address: l.Addr(), Id: RouteActor}, sender: caller,
		header: signed(t, []byte(testToken), time.Now().Add(-time.Hour), &actor.PID{Address: l.Addr(), Id: RouteActor}, caller, routeMsg)}.batch(t))
	sent += 2
	// Indexes protoactor's reader would follow out of range, and serializers it does not have.
	for _, edit := range []func(*remote.MessageBatch){
		func(b *remote.MessageBatch) { b.Envelopes[0].TypeId = 9 },
		func(b *remote.MessageBatch) { b.Envelopes[0].Target = 5 },
		func(b *remote.MessageBatch) { b.Envelopes[0].Sender = -3 },
		func(b *remote.MessageBatch) { b.Envelopes[0].SerializerId = 12 },
	} {
		a.Send(t, wire{msg: routeMsg, target: &actor.PID{Address: l.Addr(), Id: RouteActor}, sender: caller, edit: edit}.batch(t))
		sent++
	}
	waitFor(t, "every message refused", func() bool { return refusedInAll(refused) >= sent })
	if got := p.reached(); len(got) != 0 {
		t.Fatalf("the pipeline got %q", got)
	}

	if got := refusedInAll(refused); got != sent {
		t.Fatalf("%d refusals for %d refused messages", got, sent)
	}
	if n := logs.FilterField(zap.String("event", "remote_refused")).Len(); n < 1 || n > 2 {
		t.Fatalf("%d remote_refused lines for %d refusals: want the first, then a bounded sample", n, sent)
	}
}

// Two nodes share the token: a request captured on its way to one (node A) and sent to another (this
// listener, node B) is refused there as signed for elsewhere, and readdressed to B it no longer
// authenticates. The same request signed for B's address is taken.
func TestARequestSignedForAnotherNodeIsRefused(t *testing.T) {
	if !alone(t) {
		return
	}
	p := &pipeline{}
	core, logs := observer.New(zap.WarnLevel)
	l, refused := listen(t, p, Options{Token: testToken, Log: zap.New(core)})
	b := &actor.PID{Address: l.Addr(), Id: RouteActor}
	nodeA := &actor.PID{Address: "127.0.0.1:1", Id: RouteActor}  // this machine, another port: another node
	sender := &actor.PID{Address: "127.0.0.1:2", Id: "future$a"} // answers go nowhere, at once
	forA := &messages.RemoteRoute{Request: &messages.RouteRequest{Task: "for node A"}}
	forB := &messages.RemoteRoute{Request: &messages.RouteRequest{Task: "for node B"}}
	peer := remotetest.Dial(t, l.Addr())
	peer.Send(t, wire{msg: forA, target: nodeA, sender: sender, header: signed(t, []byte(testToken), time.Now(), nodeA, sender, forA)}.batch(t))
	peer.Send(t, wire{msg: forA, target: b, sender: sender, header: signed(t, []byte(testToken), time.Now(), nodeA, sender, forA)}.batch(t))
	peer.Send(t, wire{msg: forB, target: b, sender: sender, header: signed(t, []byte(testToken), time.Now(), b, sender, forB)}.batch(t))
	waitFor(t, "the request for B", func() bool { return len(p.reached()) > 0 })
	waitFor(t, "both refusals", func() bool { return refused.get(RefusedDestination)+refused.get(RefusedAuth) >= 2 })
	if got := p.reached(); !slices.Equal(got, []string{"for node B"}) {
		t.Fatalf("the pipeline got %q", got)
	}
	if refused.get(RefusedDestination) != 1 || refused.get(RefusedAuth) != 1 {
		t.Fatalf("refused as destination %d, unauthenticated %d: want one each", refused.get(RefusedDestination), refused.get(RefusedAuth))
	}
	if lines := logs.FilterField(zap.String("event", "remote_refused")).FilterField(zap.String("reason", RefusedDestination)); lines.Len() != 1 {
		t.Fatalf("%d remote_refused lines for the request signed for node A", lines.Len())
	}
}

// protoactor's remote answers its other gRPC methods with a panic, which would end the process: the
// gate refuses them.
func TestOtherGRPCMethodsAreRefused(t *testing.T) {
	if !alone(t) {
		return
	}
	l, refused := listen(t, &pipeline{}, Options{Token: testToken})
	conn, err := grpc.Dial(l.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, call := range []func() error{
		func() error {
			_, err := remote.NewRemotingClient(conn).ListProcesses(context.Background(), &remote.ListProcessesRequest{})
			return err
		},
		func() error {
			_, err := remote.NewRemotingClient(conn).GetProcessDiagnostics(context.Background(), &remote.GetProcessDiagnosticsRequest{})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("got %v: want permission denied", err)
		}
	}
	if n := refused.get(RefusedMethod); n != 2 {
		t.Fatalf("%d refusals counted", n)
	}
}

func TestRefusalsAreLoggedFirstThenSampled(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	now := gateNow
	counted := 0
	r := newRefusals(zap.New(core), func(string) { counted++ }, func() time.Time { return now })
	for range 1000 {
		r.refuse(RefusedAuth, "10.0.0.9:1")
	}
	now = now.Add(RefusalLogEvery)
	r.refuse(RefusedType, "10.0.0.9:1")
	lines := logs.FilterField(zap.String("event", "remote_refused")).All()
	if counted != 1001 || len(lines) != 2 {
		t.Fatalf("counted %d, logged %d lines: want every refusal counted, two lines", counted, len(lines))
	}
	if f := lines[1].ContextMap(); f["refused"] != int64(1001) || f["since_last_line"] != int64(1000) || f["reason"] != RefusedType {
		t.Fatalf("the second line: %v", f)
	}
}

// gateway runs the gateway in an actor system without remote: what reaches it has crossed the gate.
func gatewayFor(t *testing.T, p Router, maxInflight int64) (*actor.ActorSystem, *actor.PID) {
	system, pid, _ := keyedGateway(t, p, maxInflight, nil, nil)
	return system, pid
}

// keyedGateway is a gateway whose requests were authenticated with key, remembering them in seen (its
// own memory when nil); it counts its refusals.
func keyedGateway(t *testing.T, p Router, maxInflight int64, key []byte, seen *replays) (*actor.ActorSystem, *actor.PID, *refusalCounts) {
	t.Helper()
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
	t.Cleanup(system.Shutdown)
	counts := &refusalCounts{}
	if seen == nil {
		seen = newReplays(nil, "", nil)
	}
	g := &gateway{router: p, log: zap.NewNop(), now: time.Now, local: func() string { return nonhost }, maxInflight: maxInflight,
		key: key, refused: counts.add, seen: seen}
	pid, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return g }), RouteActor)
	if err != nil {
		t.Fatal(err)
	}
	return system, pid, counts
}

func ask(t *testing.T, system *actor.ActorSystem, pid *actor.PID, req *messages.RouteRequest) *messages.Execution {
	t.Helper()
	res, err := system.Root.RequestFuture(pid, &messages.RemoteRoute{Request: req}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res.(*messages.Execution)
}

func TestTheGatewayChecksARequest(t *testing.T) {
	p := &pipeline{}
	system, pid := gatewayFor(t, p, 8)
	workers, tau, strategy, quorum, timeout := int32(0), 1.5, "loudest", "most", math.NaN()
	for _, tc := range []struct {
		desc   string
		req    *messages.RouteRequest
		status int32
		fields []string
	}{
		{"no request", nil, 400, nil},
		{"an invisible task", &messages.RouteRequest{Task: " \t"}, 400, []string{"task"}},
		{"a task too large", &messages.RouteRequest{Task: string(make([]byte, MaxTaskBytes+1))}, 413, nil},
		{"impossible overrides", &messages.RouteRequest{Task: "hi", Workers: &workers, QuorumTau: &tau, Strategy: &strategy, Quorum: &quorum,
			TimeoutSeconds: &timeout, Models: []string{"deepseek-chat", "deepseek-chat", ""}},
			400, []string{"models[1]", "models[2]", "strategy", "timeout", "quorum", "quorum_tau", "workers"}},
		{"progress sent to the node itself", &messages.RouteRequest{Task: "hi", ProgressTo: &actor.PID{Address: nonhost, Id: "conclave/bandit"}}, 400, []string{"progress_to"}},
		{"a request id too long", &messages.RouteRequest{Task: "hi", RequestId: string(make([]byte, 200))}, 400, []string{"request_id"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			exec := ask(t, system, pid, tc.req)
			if exec.StatusCode != tc.status {
				t.Fatalf("got %v: want %d", exec, tc.status)
			}
			var fields []string
			for _, d := range exec.GetError().GetDetails() {
				fields = append(fields, d.Field)
			}
			if !slices.Equal(fields, tc.fields) {
				t.Fatalf("problems %v: want %v", fields, tc.fields)
			}
		})
	}
	if got := p.reached(); len(got) != 0 {
		t.Fatalf("the pipeline got %q", got)
	}
	if exec := ask(t, system, pid, &messages.RouteRequest{Task: "What is 2 + 2?", RequestId: "wf-1"}); exec.StatusCode != 200 ||
		exec.ClientRequestId != "wf-1" || exec.RequestId == "wf-1" || exec.RequestId == "" {
		t.Fatalf("a good request: %v", exec)
	}
}

// A route request is taken once: the same authenticated message again (captured and replayed) is
// refused without an answer.
func TestARouteRequestIsTakenOnce(t *testing.T) {
	p := &pipeline{}
	system, pid, refused := keyedGateway(t, p, 8, gateKey, nil)
	send := func(auth string) (*messages.Execution, error) { return sendAuthenticated(system, pid, auth) }
	first, err := Sign(gateKey, time.Now(), Addressed{Node: here, Target: RouteActor, Sender: caller}, routeMsg)
	if err != nil {
		t.Fatal(err)
	}
	if exec, err := send(first); err != nil || exec.StatusCode != 200 {
		t.Fatalf("the request: %v %v", exec, err)
	}
	if _, err := send(first); err == nil {
		t.Fatal("the replayed request was answered")
	}
	if len(p.reached()) != 1 || refused.get(RefusedReplayed) != 1 {
		t.Fatalf("the pipeline got %q; %d replays refused", p.reached(), refused.get(RefusedReplayed))
	}
	second, _ := Sign(gateKey, time.Now().Add(time.Millisecond), Addressed{Node: here, Target: RouteActor, Sender: caller}, routeMsg)
	if exec, err := send(second); err != nil || exec.StatusCode != 200 {
		t.Fatalf("the same task sent again, signed anew: %v %v", exec, err)
	}
}

// sendAuthenticated hands the gateway at pid a route request with the authentication header auth, as
// the gate does once it checked it, and waits a second for the answer.
func sendAuthenticated(system *actor.ActorSystem, pid *actor.PID, auth string) (*messages.Execution, error) {
	future := actor.NewFuture(system, time.Second)
	env := &actor.MessageEnvelope{Message: routeMsg, Sender: future.PID()}
	env.SetHeader(AuthHeader, auth)
	system.Root.Send(pid, env)
	res, err := future.Result()
	if err != nil {
		return nil, err
	}
	return res.(*messages.Execution), nil
}

func TestReplaysForgetWhatIsPastTheSkew(t *testing.T) {
	r := newReplays(nil, "", nil)
	if !r.first("a", gateNow) || r.first("a", gateNow.Add(MaxSkew)) {
		t.Fatal("a replay within the skew was taken")
	}
	if !r.first("a", gateNow.Add(2*MaxSkew+time.Second)) {
		t.Fatal("an authentication past any skew is still remembered")
	}
}

func TestRemoteRequestsBeyondTheBoundAreShed(t *testing.T) {
	p := &pipeline{hold: make(chan struct{})}
	system, pid := gatewayFor(t, p, 1)
	first := system.Root.RequestFuture(pid, &messages.RemoteRoute{Request: &messages.RouteRequest{Task: "first"}}, 10*time.Second)
	waitFor(t, "the first request to run", func() bool { return len(p.reached()) == 1 })
	exec := ask(t, system, pid, &messages.RouteRequest{Task: "second"})
	if exec.StatusCode != 503 || exec.GetError().GetCode() != "overloaded" || exec.GetError().GetRetryAfterSeconds() <= 0 {
		t.Fatalf("the second request: %v", exec)
	}
	p.mu.Lock()
	if !slices.Equal(p.shed, []string{"overloaded"}) { // in the engine's one line for all
		t.Errorf("refusals counted for the log: %v", p.shed)
	}
	p.mu.Unlock()
	close(p.hold)
	if res, err := first.Result(); err != nil || res.(*messages.Execution).StatusCode != 200 {
		t.Fatalf("the first request: %v %v", res, err)
	}
	if exec := ask(t, system, pid, &messages.RouteRequest{Task: "third"}); exec.StatusCode != 200 {
		t.Fatalf("after the first ended: %v", exec)
	}
}

// A client without a certificate the CA signed is refused at the handshake, and counted.
func TestMutualTLSRefusesAClientWithoutACertificate(t *testing.T) {
	if !alone(t) {
		return
	}
	ca := tlstest.NewCA(t, "conclave")
	server := ca.Issue(t, "node-a")
	stranger := tlstest.NewCA(t, "elsewhere").Issue(t, "node-x")
	l, refused := listen(t, &pipeline{}, Options{Token: testToken, TLS: TLSFiles{Cert: server.Cert, Key: server.Key, CA: ca.Cert}})
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.Cert)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the CA does not load")
	}
	strangerCert, err := tls.LoadX509KeyPair(stranger.Cert, stranger.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc  string
		certs []tls.Certificate
	}{{"no certificate", nil}, {"a certificate another CA signed", []tls.Certificate{strangerCert}}} {
		t.Run(tc.desc, func(t *testing.T) {
			before := refused.get(RefusedTLS)
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr(),
				&tls.Config{RootCAs: pool, Certificates: tc.certs, NextProtos: []string{"h2"}})
			if err == nil {
				// TLS 1.3 ends the client's side of the handshake first: the server's refusal comes with the first read.
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if err == nil {
				t.Fatal("the client connected")
			}
			waitFor(t, "the handshake refusal", func() bool { return refused.get(RefusedTLS) > before })
		})
	}
	member := ca.Issue(t, "node-b")
	memberCert, err := tls.LoadX509KeyPair(member.Cert, member.Key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", l.Addr(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{memberCert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("a client the CA signed: %v", err)
	}
	conn.Close()
}

func TestTLSFilesMustBeComplete(t *testing.T) {
	ca := tlstest.NewCA(t, "conclave")
	pair := ca.Issue(t, "node-a")
	for _, tc := range []struct {
		desc  string
		files TLSFiles
	}{
		{"a certificate without its key", TLSFiles{Cert: pair.Cert}},
		{"a CA alone", TLSFiles{CA: ca.Cert}},
		{"a key that is not the certificate's", TLSFiles{Cert: pair.Cert, Key: ca.Cert}},
		{"a CA file without a certificate in it", TLSFiles{Cert: pair.Cert, Key: pair.Key, CA: pair.Key}},
		{"a missing file", TLSFiles{Cert: pair.Cert, Key: pair.Key, CA: ca.Cert + ".missing"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if _, err := Listen(&pipeline{}, Options{Addr: "127.0.0.1:0", TLS: tc.files}); err == nil {
				t.Fatal("the listener started")
			}
		})
	}
}

// A listener holds its connections to a number: one past it is closed unserved and counted, and a
// place comes back when a connection closes.
func TestConnectionsAreBounded(t *testing.T) {
	refused := &refusalCounts{}
	creds := &guardedCreds{TransportCredentials: insecure.NewCredentials(), max: 2, live: new(atomic.Int64),
		refused: func(reason, _ string) { refused.add(reason) }}
	var held []net.Conn
	for i := range 3 {
		a, b := net.Pipe()
		defer b.Close()
		conn, _, err := creds.ServerHandshake(a)
		if i < 2 {
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			held = append(held, conn)
		} else if err == nil || refused.get(RefusedConnections) != 1 {
			t.Fatalf("the connection past the bound: %v, %d refused", err, refused.get(RefusedConnections))
		}
	}
	held[0].Close()
	held[0].Close() // twice gives one place back
	a, b := net.Pipe()
	defer b.Close()
	if _, _, err := creds.Clone().ServerHandshake(a); err != nil {
		t.Fatalf("after one closed: %v", err)
	}
	c, d := net.Pipe()
	defer d.Close()
	if _, _, err := creds.ServerHandshake(c); err == nil {
		t.Fatal("a second place came back for one closed connection")
	}
}
