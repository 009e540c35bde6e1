package remotedoor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
)

// AuthHeader is the envelope header that authenticates a remote message: "v2.<unix ms>.<mac>", the
// mac an HMAC-SHA256 keyed with the token over the time, the message's type, the node it is sent to
// (its address as the sender wrote it), its target's name, what it answers (an answer names its
// request's own header; a request, nothing), its sender and its content. The token itself never
// crosses the network, and a message cannot be moved to another node, target, request or sender,
// changed, or used after MaxSkew.
const AuthHeader = "conclave-auth"

// MaxSkew is how far a message's time may be from the receiver's clock: clocks differ a little, and a
// captured message is worth nothing after it.
const MaxSkew = 5 * time.Minute

// Why an envelope's authentication is refused.
var (
	ErrNoAuth    = errors.New("the message carries no authentication")
	ErrBadAuth   = errors.New("the message's authentication does not match")
	ErrStaleAuth = errors.New("the message's time is too far from this node's clock")
)

// authVersion starts every header and every mac'd text, so a later scheme cannot be confused with it.
// v1 did not cover the node a message is sent to, so a message captured on its way to one node was
// good at every other node sharing the token: it is refused.
const authVersion = "v2"

// Addressed is where a message goes and what it answers: the parts of the mac besides the message.
type Addressed struct {
	// Node is the address of the node it is sent to, as its sender addressed it (the target PID's).
	Node string
	// Target is the name of the actor it is sent to.
	Target string
	// Answers is the AuthHeader of the request it answers; empty for a request.
	Answers string
	// Sender is who is to be answered; nil for an answer.
	Sender *actor.PID
}

// Sign returns the AuthHeader value of msg sent at now to to.
func Sign(key []byte, now time.Time, to Addressed, msg proto.Message) (string, error) {
	ms := now.UnixMilli()
	mac, err := authMAC(key, ms, to, msg)
	if err != nil {
		return "", err
	}
	return authVersion + "." + strconv.FormatInt(ms, 10) + "." + base64.RawURLEncoding.EncodeToString(mac), nil
}

// auth is a header read, before the message it came with is decoded.
type auth struct {
	ms  int64
	mac []byte
}

// readAuth reads an AuthHeader value and checks its time against now: what can be refused without
// decoding the message is.
func readAuth(header string, now time.Time) (auth, error) {
	if header == "" {
		return auth{}, ErrNoAuth
	}
	version, rest, _ := strings.Cut(header, ".")
	stamp, encoded, ok := strings.Cut(rest, ".")
	if version != authVersion || !ok {
		return auth{}, fmt.Errorf("%w: not a %s header", ErrBadAuth, authVersion)
	}
	ms, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return auth{}, fmt.Errorf("%w: its time is not a number", ErrBadAuth)
	}
	if skew := now.Sub(time.UnixMilli(ms)); skew > MaxSkew || skew < -MaxSkew {
		return auth{}, ErrStaleAuth
	}
	mac, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil || len(mac) != sha256.Size {
		return auth{}, fmt.Errorf("%w: its mac is not a base64 SHA-256", ErrBadAuth)
	}
	return auth{ms: ms, mac: mac}, nil
}

// verify checks a header read against the message it came with.
func (a auth) verify(key []byte, to Addressed, msg proto.Message) error {
	want, err := authMAC(key, a.ms, to, msg)
	if err != nil {
		return err
	}
	if !hmac.Equal(a.mac, want) {
		return ErrBadAuth
	}
	return nil
}

// Verify checks an AuthHeader value against the message it came with, at now.
func Verify(key []byte, now time.Time, header string, to Addressed, msg proto.Message) error {
	a, err := readAuth(header, now)
	if err != nil {
		return err
	}
	return a.verify(key, to, msg)
}

// authMAC is the mac of one message. Each part is length-prefixed, so no two messages share a text.
// The content is the message's deterministic encoding, which both ends compute alike whatever order
// the sender's serializer wrote a map in.
func authMAC(key []byte, ms int64, to Addressed, msg proto.Message) ([]byte, error) {
	content, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode the message to authenticate it: %w", err)
	}
	h := hmac.New(sha256.New, key)
	var n [binary.MaxVarintLen64]byte
	part := func(s []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write(s)
	}
	part([]byte(authVersion))
	part(strconv.AppendInt(nil, ms, 10))
	part([]byte(proto.MessageName(msg)))
	part([]byte(to.Node))
	part([]byte(to.Target))
	part([]byte(to.Answers))
	part([]byte(to.Sender.GetAddress()))
	part([]byte(to.Sender.GetId()))
	part(content)
	return h.Sum(nil), nil
}
