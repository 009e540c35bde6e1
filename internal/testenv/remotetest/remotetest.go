// Package remotetest speaks protoactor remote's wire protocol to a listener directly, as any program
// that reaches its port can: frames laid out by hand, malformed ones included, over a gRPC stream of
// its own, without an actor system.
package remotetest

import (
	"context"
	"maps"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Envelope is one message as protoactor's endpoint writer lays it out.
type Envelope struct {
	Msg proto.Message
	// TypeName, when set, replaces the message's own type name.
	TypeName string
	Target   *actor.PID
	// Sender is nil for a message without one.
	Sender *actor.PID
	Header map[string]string
}

// Batch lays an envelope out as a batch of its own.
func Batch(t testing.TB, e Envelope) *remote.MessageBatch {
	t.Helper()
	data, err := proto.Marshal(e.Msg)
	if err != nil {
		t.Fatal(err)
	}
	name := e.TypeName
	if name == "" {
		name = string(proto.MessageName(e.Msg))
	}
	b := &remote.MessageBatch{TypeNames: []string{name}, Targets: []*actor.PID{e.Target},
		Envelopes: []*remote.MessageEnvelope{{MessageData: data}}}
	if e.Sender != nil {
		b.Senders = []*actor.PID{e.Sender}
		b.Envelopes[0].Sender = 1
	}
	if e.Header != nil {
		b.Envelopes[0].MessageHeader = &remote.MessageHeader{HeaderData: maps.Clone(e.Header)}
	}
	return b
}

// EveryMessage returns an empty message of every type Conclave's actors speak (messages/).
func EveryMessage(t testing.TB) []proto.Message {
	t.Helper()
	var out []proto.Message
	descs := messages.File_conclave_proto.Messages()
	for i := range descs.Len() {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(descs.Get(i).FullName())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, mt.New().Interface())
	}
	return out
}

// Peer is a connection to a listener that has introduced itself as a node would.
type Peer struct {
	stream remote.Remoting_ReceiveClient
}

// Dial connects to the listener at addr (without TLS unless opts say otherwise) and introduces itself.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *Peer {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := remote.NewRemotingClient(conn).Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hello := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "peer", Address: "127.0.0.1:1"}}}}}
	if err := stream.Send(hello); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("no answer to the connect request: %v", err)
	}
	return &Peer{stream: stream}
}

// Send sends one batch.
func (p *Peer) Send(t testing.TB, b *remote.MessageBatch) {
	t.Helper()
	if err := p.stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
		t.Fatal(err)
	}
}
