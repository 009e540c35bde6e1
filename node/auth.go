package node

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

// AuthHeader is the envelope header that authenticates a remote message: "v1.<unix ms>.<mac>", the
// mac an HMAC-SHA256 keyed with the token over the time, the message's type, its target's name, its
// sender and its content. The token itself never crosses the network, and a message cannot be moved to
// another target or sender, changed, or replayed after MaxSkew.
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
const authVersion = "v1"

// Sign returns the AuthHeader value of msg sent at now from sender to the actor named target.
func Sign(key []byte, now time.Time, target string, sender *actor.PID, msg proto.Message) (string, error) {
	ms := now.UnixMilli()
	mac, err := authMAC(key, ms, target, sender, msg)
	if err != nil {
		return "", err
	}
	return authVersion + "." + strconv.FormatInt(ms, 10) + "." + base64.RawURLEncoding.EncodeToString(mac), nil
}

// Verify checks an AuthHeader value against the message it came with, at now.
func Verify(key []byte, now time.Time, header, target string, sender *actor.PID, msg proto.Message) error {
	if header == "" {
		return ErrNoAuth
	}
	version, rest, _ := strings.Cut(header, ".")
	stamp, encoded, ok := strings.Cut(rest, ".")
	if version != authVersion || !ok {
		return fmt.Errorf("%w: not a %s header", ErrBadAuth, authVersion)
	}
	ms, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: its time is not a number", ErrBadAuth)
	}
	if skew := now.Sub(time.UnixMilli(ms)); skew > MaxSkew || skew < -MaxSkew {
		return ErrStaleAuth
	}
	given, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil {
		return fmt.Errorf("%w: its mac is not base64", ErrBadAuth)
	}
	want, err := authMAC(key, ms, target, sender, msg)
	if err != nil {
		return err
	}
	if !hmac.Equal(given, want) {
		return ErrBadAuth
	}
	return nil
}

// authMAC is the mac of one message. Each part is length-prefixed, so no two messages share a text.
// The content is the message's deterministic encoding, which both ends compute alike whatever order
// the sender's serializer wrote a map in.
func authMAC(key []byte, ms int64, target string, sender *actor.PID, msg proto.Message) ([]byte, error) {
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
	part([]byte(target))
	part([]byte(sender.GetAddress()))
	part([]byte(sender.GetId()))
	part(content)
	return h.Sum(nil), nil
}
