package remotedoor

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Why an inbound remote message is refused: the label values of conclave_remote_refused_total.
const (
	// RefusedAuth: no authentication, a wrong one, or one too old (see AuthHeader).
	RefusedAuth = "unauthenticated"
	// RefusedType: a message type this door does not take (a system message among them).
	RefusedType = "message_type"
	// RefusedTarget: addressed to an actor that is not reachable through this door.
	RefusedTarget = "target"
	// RefusedSender: no sender to answer, or a sender claiming to be this node.
	RefusedSender = "sender"
	// RefusedMalformed: a batch whose indexes point nowhere, a content that does not decode, a frame
	// that is not a message batch.
	RefusedMalformed = "malformed"
	// RefusedMethod: a gRPC call other than the message stream.
	RefusedMethod = "method"
	// RefusedTLS: a connection whose TLS handshake failed (no certificate the CA signed, among others).
	RefusedTLS = "tls_handshake"
	// RefusedConnections: a connection past MaxConnections.
	RefusedConnections = "connections"
	// RefusedReplayed: a route request whose authentication was seen already.
	RefusedReplayed = "replayed"
	// RefusedDestination: an authenticated message signed for another node's address (captured on
	// its way there), or for an address of this node's that it does not know as its own.
	RefusedDestination = "destination"
)

// receiveMethod is protoactor remote's message stream, the only gRPC method a door serves.
const receiveMethod = "/remote.Remoting/Receive"

// Gate decides which envelopes of an inbound message batch reach the actor system behind a remote
// listener. It runs on the gRPC stream, before protoactor reads the batch: what it drops is never
// decoded by protoactor, delivered, or answered. It holds no state; its decisions are a function of the
// batch, the time and the node's names.
type Gate struct {
	// Key authenticates each envelope (see AuthHeader); empty admits envelopes without authentication
	// (a loopback listener without a token).
	Key []byte
	// Types are the message types admitted, by full protobuf name.
	Types map[protoreflect.FullName]bool
	// Target says whether an actor may be addressed through the gate, by its name.
	Target func(id string) bool
	// Answers, when set, names the request whose answers an actor takes (the AuthHeader it was sent
	// with): an answer is authenticated as answering it, so it cannot be replayed into another.
	Answers func(id string) string
	// NeedSender refuses envelopes without a sender: a request with nobody to answer.
	NeedSender bool
	// Local is the address of the system behind the gate. Admitted envelopes are delivered to the
	// target's name here, whatever address they carried (never passed on to another node), and a
	// sender may not claim it.
	Local func() string
	// Mine says whether an address names this node. A message is signed for the address its sender
	// sent it to, which must be one of this node's; nil knows Local alone.
	Mine func(addr string) bool
	Now  func() time.Time
}

// Admit filters a batch in place, keeping the envelopes the gate admits (their targets made local),
// and calls refused for each one it drops. It returns how many it kept.
func (g *Gate) Admit(b *remote.MessageBatch, refused func(reason string)) int {
	kept := b.Envelopes[:0]
	local := make(map[int32]bool)
	for _, e := range b.Envelopes {
		if e == nil {
			refused(RefusedMalformed)
			continue
		}
		if reason := g.check(b, e); reason != "" {
			refused(reason)
			continue
		}
		local[e.Target] = true
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
	here := g.Local()
	for i := range local {
		b.Targets[i] = &actor.PID{Address: here, Id: b.Targets[i].Id}
	}
	return len(kept)
}

// check returns why an envelope is refused, or "".
func (g *Gate) check(b *remote.MessageBatch, e *remote.MessageEnvelope) string {
	if !wellFormed(b, e) {
		return RefusedMalformed
	}
	name := protoreflect.FullName(b.TypeNames[e.TypeId])
	if !g.Types[name] {
		return RefusedType
	}
	target := b.Targets[e.Target]
	if target == nil || !g.Target(target.Id) {
		return RefusedTarget
	}
	sender, ok := g.sender(b, e)
	if !ok {
		return RefusedSender
	}
	if len(g.Key) == 0 {
		return ""
	}
	return g.authenticate(e, name, target, sender)
}

// wellFormed says whether an envelope's indexes point into the batch's lists and its content is
// in the one serialization the gate reads. protoactor indexes these lists without checking: an index
// out of range would panic the server.
func wellFormed(b *remote.MessageBatch, e *remote.MessageEnvelope) bool {
	return e.TypeId >= 0 && int(e.TypeId) < len(b.TypeNames) && e.Target >= 0 && int(e.Target) < len(b.Targets) &&
		e.Sender >= 0 && int(e.Sender) <= len(b.Senders) && e.SerializerId == 0
}

// sender returns an envelope's sender (nil for none) and whether the gate takes it: a sender needs an
// address, not this node's, and an envelope without one is taken only when the gate needs no sender.
func (g *Gate) sender(b *remote.MessageBatch, e *remote.MessageEnvelope) (*actor.PID, bool) {
	if e.Sender == 0 {
		return nil, !g.NeedSender
	}
	sender := b.Senders[e.Sender-1]
	if sender == nil || sender.Address == "" || sender.Address == g.Local() || sender.Address == nonhost {
		return nil, false
	}
	return sender, true
}

// authenticate returns why an envelope's authentication is refused, or "": it must be fresh, signed
// with the gate's key for the envelope's content, target and sender, and signed for this node.
func (g *Gate) authenticate(e *remote.MessageEnvelope, name protoreflect.FullName, target, sender *actor.PID) string {
	// The header is read first: a message without a fresh one is refused before it is decoded.
	a, err := readAuth(e.GetMessageHeader().GetHeaderData()[AuthHeader], g.Now())
	if err != nil {
		return RefusedAuth
	}
	msg, err := decode(name, e.MessageData)
	if err != nil {
		return RefusedMalformed
	}
	to := Addressed{Node: target.Address, Target: target.Id, Sender: sender}
	if g.Answers != nil {
		to.Answers = g.Answers(target.Id)
	}
	if a.verify(g.Key, to, msg) != nil {
		return RefusedAuth
	}
	// Only now: the address is the signer's, and telling whether it is this node's may take a lookup.
	if !g.mine(target.Address) {
		return RefusedDestination
	}
	return ""
}

func (g *Gate) mine(addr string) bool {
	if g.Mine == nil {
		return addr == g.Local()
	}
	return g.Mine(addr)
}

// decode reads a message's content as its type, for authentication.
func decode(name protoreflect.FullName, data []byte) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, err
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(data, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// Interceptors are the gRPC server options that put the gate in front of protoactor's endpoint: the
// message stream's frames pass through Admit, a frame left empty is never handed on, and every other
// method is refused (protoactor's own answer to them is a panic).
func (g *Gate) Interceptors(refused func(reason, from string)) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			refused(RefusedMethod, peerOf(ctx))
			return nil, status.Error(codes.PermissionDenied, "not served")
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			from := peerOf(ss.Context())
			if info.FullMethod != receiveMethod {
				refused(RefusedMethod, from)
				return status.Error(codes.PermissionDenied, "not served")
			}
			return handler(srv, &gatedStream{ServerStream: ss, gate: g, refused: func(reason string) { refused(reason, from) }})
		}),
	}
}

// gatedStream hands protoactor only the frames the gate admits: the connection handshake, and message
// batches with at least one envelope left.
type gatedStream struct {
	grpc.ServerStream
	gate    *Gate
	refused func(reason string)
}

func (s *gatedStream) RecvMsg(m any) error {
	for {
		if err := s.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		msg, ok := m.(*remote.RemoteMessage)
		if !ok {
			return errors.New("remote gate: unexpected frame type")
		}
		switch t := msg.MessageType.(type) {
		case *remote.RemoteMessage_ConnectRequest:
			if t.ConnectRequest.GetServerConnection() != nil {
				return nil
			}
			s.refused(RefusedMalformed)
		case *remote.RemoteMessage_MessageBatch:
			if t.MessageBatch != nil && s.gate.Admit(t.MessageBatch, s.refused) > 0 {
				return nil
			}
		default:
			s.refused(RefusedMalformed)
		}
	}
}

func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// nonhost is the address protoactor gives a system without remote: a PID naming it is local wherever
// it is read, so no message from the network may name it.
const nonhost = "nonhost"
