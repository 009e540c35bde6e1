package remotedoor

import (
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/internal/testenv/remotetest"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var (
	gateNow  = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	gateKey  = []byte("a-token-of-at-least-16-bytes")
	caller   = &actor.PID{Address: "10.0.0.9:41000", Id: "future$a"}
	here     = "10.0.0.1:7001"
	routeMsg = &messages.RemoteRoute{Request: &messages.RouteRequest{Task: "What is 2 + 2?"}}
)

// hereAlso is another name of the node at here, as a name resolving to it or one of its certificate.
const hereAlso = "conclave.internal:7001"

func serverGate(key []byte) *Gate {
	return &Gate{Key: key, Types: map[protoreflect.FullName]bool{proto.MessageName(&messages.RemoteRoute{}): true},
		Target: func(id string) bool { return id == RouteActor }, NeedSender: true, Local: func() string { return here },
		Mine: func(addr string) bool { return addr == here || addr == hereAlso }, Now: func() time.Time { return gateNow }}
}

// wire is one envelope as protoactor's endpoint writer lays it out: a batch of its own.
type wire struct {
	msg      proto.Message
	typeName string // overrides the message's own name
	target   *actor.PID
	sender   *actor.PID
	header   map[string]string
	// edit changes the batch after it is laid out (indexes out of range, a serializer, the content).
	edit func(*remote.MessageBatch)
}

func (w wire) batch(t *testing.T) *remote.MessageBatch {
	t.Helper()
	b := remotetest.Batch(t, remotetest.Envelope{Msg: w.msg, TypeName: w.typeName, Target: w.target, Sender: w.sender, Header: w.header})
	if w.edit != nil {
		w.edit(b)
	}
	return b
}

// signed is the header of msg signed for the node and actor of to.
func signed(t *testing.T, key []byte, at time.Time, to *actor.PID, sender *actor.PID, msg proto.Message) map[string]string {
	t.Helper()
	auth, err := Sign(key, at, Addressed{Node: to.Address, Target: to.Id, Sender: sender}, msg)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{AuthHeader: auth, "other": "kept"}
}

func TestGateAdmitsOnlyAnAuthenticatedRouteRequest(t *testing.T) {
	route := &actor.PID{Address: here, Id: RouteActor}
	elsewhere := &actor.PID{Address: "10.0.0.2:7001", Id: RouteActor} // another node sharing the token
	good := signed(t, gateKey, gateNow, route, caller, routeMsg)
	other := &messages.RemoteRoute{Request: &messages.RouteRequest{Task: "What is 3 + 3?"}}
	for _, tc := range []struct {
		desc string
		gate *Gate
		in   wire
		want string // the refusal, or "" when admitted
	}{
		{"a signed route request", serverGate(gateKey), wire{msg: routeMsg, target: route, sender: caller, header: good}, ""},
		{"addressed to this node by another of its names", serverGate(gateKey),
			wire{msg: routeMsg, target: &actor.PID{Address: hereAlso, Id: RouteActor}, sender: caller,
				header: signed(t, gateKey, gateNow, &actor.PID{Address: hereAlso, Id: RouteActor}, caller, routeMsg)}, ""},
		{"signed for another node", serverGate(gateKey),
			wire{msg: routeMsg, target: elsewhere, sender: caller, header: signed(t, gateKey, gateNow, elsewhere, caller, routeMsg)}, RefusedDestination},
		{"signed for another node, readdressed to this one", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: signed(t, gateKey, gateNow, elsewhere, caller, routeMsg)}, RefusedAuth},
		{"signed for this node by another of its names, sent to its address", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: signed(t, gateKey, gateNow, &actor.PID{Address: hereAlso, Id: RouteActor}, caller, routeMsg)}, RefusedAuth},
		{"signed within the skew", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: signed(t, gateKey, gateNow.Add(-MaxSkew+time.Second), route, caller, routeMsg)}, ""},
		{"no authentication", serverGate(gateKey), wire{msg: routeMsg, target: route, sender: caller}, RefusedAuth},
		{"another token", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: signed(t, []byte("another-token-0123456789"), gateNow, route, caller, routeMsg)}, RefusedAuth},
		{"too old", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: signed(t, gateKey, gateNow.Add(-MaxSkew-time.Second), route, caller, routeMsg)}, RefusedAuth},
		{"from the future", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: signed(t, gateKey, gateNow.Add(MaxSkew+time.Second), route, caller, routeMsg)}, RefusedAuth},
		{"another content under a signature", serverGate(gateKey), wire{msg: other, target: route, sender: caller, header: good}, RefusedAuth},
		{"another sender under a signature", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: &actor.PID{Address: "10.0.0.66:41000", Id: "future$a"}, header: good}, RefusedAuth},
		{"a header that is not ours", serverGate(gateKey), wire{msg: routeMsg, target: route, sender: caller, header: map[string]string{AuthHeader: "v2.x.y"}}, RefusedAuth},
		{"a header of the first version", serverGate(gateKey), wire{msg: routeMsg, target: route, sender: caller, header: map[string]string{AuthHeader: "v1" + good[AuthHeader][2:]}}, RefusedAuth},
		{"another message type, signed", serverGate(gateKey),
			wire{msg: &messages.Rewards{}, target: route, sender: caller, header: signed(t, gateKey, gateNow, route, caller, &messages.Rewards{})}, RefusedType},
		{"a system message", serverGate(gateKey), wire{msg: &actor.Stop{}, target: route, sender: caller}, RefusedType},
		{"a dispatch to a worker", serverGate(gateKey),
			wire{msg: &messages.Dispatch{Job: &messages.Job{Model: "m"}}, target: &actor.PID{Address: here, Id: "conclave/fleet/worker-01"}, sender: caller}, RefusedType},
		{"a route request to another actor", serverGate(gateKey),
			wire{msg: routeMsg, target: &actor.PID{Address: here, Id: "conclave/bandit"}, sender: caller, header: signed(t, gateKey, gateNow, &actor.PID{Address: here, Id: "conclave/bandit"}, caller, routeMsg)}, RefusedTarget},
		{"no target", serverGate(gateKey), wire{msg: routeMsg, sender: caller, header: good}, RefusedTarget},
		{"nobody to answer", serverGate(gateKey), wire{msg: routeMsg, target: route, header: good}, RefusedSender},
		{"a sender claiming this node", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: &actor.PID{Address: here, Id: "future$a"}, header: good}, RefusedSender},
		{"a sender claiming to be local", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: &actor.PID{Address: nonhost, Id: "conclave/bandit"}, header: good}, RefusedSender},
		{"a type index out of range", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: good, edit: func(b *remote.MessageBatch) { b.Envelopes[0].TypeId = 3 }}, RefusedMalformed},
		{"a negative target index", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: good, edit: func(b *remote.MessageBatch) { b.Envelopes[0].Target = -1 }}, RefusedMalformed},
		{"a sender index out of range", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: good, edit: func(b *remote.MessageBatch) { b.Envelopes[0].Sender = 2 }}, RefusedMalformed},
		{"the JSON serializer", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: good, edit: func(b *remote.MessageBatch) { b.Envelopes[0].SerializerId = 1 }}, RefusedMalformed},
		{"a serializer that does not exist", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: good, edit: func(b *remote.MessageBatch) { b.Envelopes[0].SerializerId = 7 }}, RefusedMalformed},
		{"content that does not decode", serverGate(gateKey),
			wire{msg: routeMsg, target: route, sender: caller, header: good, edit: func(b *remote.MessageBatch) { b.Envelopes[0].MessageData = []byte{0xff, 0xff} }}, RefusedMalformed},
		{"without a token, an unsigned route request", serverGate(nil), wire{msg: routeMsg, target: route, sender: caller}, ""},
		{"without a token, still only the route gateway", serverGate(nil),
			wire{msg: routeMsg, target: &actor.PID{Address: here, Id: "conclave/recorder"}, sender: caller}, RefusedTarget},
		{"without a token, still only route requests", serverGate(nil),
			wire{msg: &messages.PeerBreakerOpened{Provider: "groq"}, target: route, sender: caller}, RefusedType},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			b := tc.in.batch(t)
			var refused []string
			kept := tc.gate.Admit(b, func(reason string) { refused = append(refused, reason) })
			if tc.want == "" {
				if kept != 1 || len(refused) != 0 {
					t.Fatalf("kept %d, refused %v: want it admitted", kept, refused)
				}
				if got := b.Targets[b.Envelopes[0].Target]; got.Address != here || got.Id != RouteActor {
					t.Fatalf("admitted to %v: want the local gateway", got)
				}
				if h := b.Envelopes[0].GetMessageHeader().GetHeaderData(); len(tc.gate.Key) > 0 && h[AuthHeader] == "" {
					t.Fatal("the authentication header did not reach the gateway, which binds the answers to it")
				}
				return
			}
			if kept != 0 || len(b.Envelopes) != 0 || len(refused) != 1 || refused[0] != tc.want {
				t.Fatalf("kept %d, refused %v: want it refused as %s", kept, refused, tc.want)
			}
		})
	}
}

// A batch mixing a good envelope with bad ones keeps the good one only; a target the bad ones named is
// never made local.
func TestGateSortsAMixedBatch(t *testing.T) {
	route := &actor.PID{Address: here, Id: RouteActor}
	elsewhere := &actor.PID{Address: "10.0.0.2:7001", Id: "conclave/bandit"}
	data, _ := proto.Marshal(routeMsg)
	auth := signed(t, gateKey, gateNow, route, caller, routeMsg)
	b := &remote.MessageBatch{
		TypeNames: []string{string(proto.MessageName(routeMsg)), string(proto.MessageName(&messages.Rewards{}))},
		Targets:   []*actor.PID{route, elsewhere},
		Senders:   []*actor.PID{caller},
		Envelopes: []*remote.MessageEnvelope{
			{TypeId: 1, Target: 0, Sender: 1},
			{TypeId: 0, Target: 1, Sender: 1, MessageData: data},
			{TypeId: 0, Target: 0, Sender: 1, MessageData: data, MessageHeader: &remote.MessageHeader{HeaderData: auth}},
			nil,
		},
	}
	counts := map[string]int{}
	if kept := serverGate(gateKey).Admit(b, func(r string) { counts[r]++ }); kept != 1 || b.Envelopes[0].Target != 0 {
		t.Fatalf("kept %d: %v", kept, b.Envelopes)
	}
	if counts[RefusedType] != 1 || counts[RefusedTarget] != 1 || counts[RefusedMalformed] != 1 {
		t.Fatalf("refusals %v", counts)
	}
	if b.Targets[1] != elsewhere {
		t.Fatalf("a refused envelope's target was rewritten: %v", b.Targets[1])
	}
}

func TestSignAndVerify(t *testing.T) {
	msg := &messages.Progress{Event: "classified"}
	to := Addressed{Node: "10.0.0.9:41000", Target: "progress-1", Answers: "v2.1.request"}
	auth, err := Sign(gateKey, gateNow, to, msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(gateKey, gateNow.Add(time.Minute), auth, to, msg); err != nil {
		t.Fatalf("a fresh signature: %v", err)
	}
	for _, tc := range []struct {
		desc   string
		header string
		to     Addressed
		now    time.Time
		want   error
	}{
		{"none", "", to, gateNow, ErrNoAuth},
		{"another node", auth, Addressed{Node: "10.0.0.8:41000", Target: to.Target, Answers: to.Answers}, gateNow, ErrBadAuth},
		{"no node", auth, Addressed{Target: to.Target, Answers: to.Answers}, gateNow, ErrBadAuth},
		{"another target", auth, Addressed{Node: to.Node, Target: "progress-2", Answers: to.Answers}, gateNow, ErrBadAuth},
		{"an answer to another request", auth, Addressed{Node: to.Node, Target: to.Target, Answers: "v2.1.another"}, gateNow, ErrBadAuth},
		{"a sender added", auth, Addressed{Node: to.Node, Target: to.Target, Answers: to.Answers, Sender: caller}, gateNow, ErrBadAuth},
		{"stale", auth, to, gateNow.Add(MaxSkew + time.Second), ErrStaleAuth},
		{"truncated", auth[:len(auth)-4], to, gateNow, ErrBadAuth},
		{"the first version", "v1" + auth[2:], to, gateNow, ErrBadAuth},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if err := Verify(gateKey, tc.now, tc.header, tc.to, msg); err == nil || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// A client's gate takes an answer only for a request it waits on, and only signed as answering that
// request: an answer captured on its way to another request is refused.
func TestAClientsGateTakesOnlyAnswersToItsOwnRequests(t *testing.T) {
	const request, other = "v2.1.the-request", "v2.1.another-request"
	const self, another = "127.0.0.1:41000", "127.0.0.1:41001" // this client, and another waiting on the same node
	pending := map[string]string{"future$a": request, "progress-1": request}
	gate := &Gate{Key: gateKey, Types: map[protoreflect.FullName]bool{proto.MessageName(&messages.Execution{}): true, proto.MessageName(&messages.Progress{}): true},
		Target:  func(id string) bool { _, ok := pending[id]; return ok },
		Answers: func(id string) string { return pending[id] },
		Local:   func() string { return self }, Now: func() time.Time { return gateNow }}
	exec := &messages.Execution{RequestId: "r", StatusCode: 200, Answer: "4"}
	answer := func(node, target, answers string, msg proto.Message) map[string]string {
		auth, err := Sign(gateKey, gateNow, Addressed{Node: node, Target: target, Answers: answers}, msg)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{AuthHeader: auth}
	}
	for _, tc := range []struct {
		desc   string
		node   string // where it is sent; this client unless set
		target string
		msg    proto.Message
		header map[string]string
		want   string
	}{
		{"the answer to its request", "", "future$a", exec, answer(self, "future$a", request, exec), ""},
		{"a step of its request", "", "progress-1", &messages.Progress{Event: "classified"}, answer(self, "progress-1", request, &messages.Progress{Event: "classified"}), ""},
		{"an answer to another request", "", "future$a", exec, answer(self, "future$a", other, exec), RefusedAuth},
		{"an unsigned answer", "", "future$a", exec, nil, RefusedAuth},
		{"an answer for a future that waits on nothing", "", "future$b", exec, answer(self, "future$b", request, exec), RefusedTarget},
		{"a request sent to a client", "", "future$a", routeMsg, answer(self, "future$a", request, routeMsg), RefusedType},
		{"an answer signed for another client", another, "future$a", exec, answer(another, "future$a", request, exec), RefusedDestination},
		{"an answer signed for another client, readdressed to this one", "", "future$a", exec, answer(another, "future$a", request, exec), RefusedAuth},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			node := tc.node
			if node == "" {
				node = self
			}
			b := wire{msg: tc.msg, target: &actor.PID{Address: node, Id: tc.target}, header: tc.header}.batch(t)
			var refused []string
			kept := gate.Admit(b, func(r string) { refused = append(refused, r) })
			if (tc.want == "" && kept != 1) || (tc.want != "" && (kept != 0 || len(refused) != 1 || refused[0] != tc.want)) {
				t.Fatalf("kept %d, refused %v: want %q", kept, refused, tc.want)
			}
		})
	}
}
