package remotedoor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// replays remembers the authentication of every route request taken within MaxSkew, so that one
// captured on its way (where the door runs without TLS) is not taken a second time. With Redis, the
// memory is shared: of every node on it under one prefix (nodes sharing the token), one takes a
// request at most, whichever the copies reach. While Redis does not answer, each node remembers alone.
//
// This node's own memory is kept either way: it answers a replay to this node without asking Redis,
// and still knows, once Redis is back, what the node took while it was not. At most maxSeen are kept:
// past that, the oldest are forgotten, and a replay of one of them within its five minutes would be
// taken again; at the gateway's bound of requests in flight that takes over a thousand new requests a
// second.
type replays struct {
	mu    sync.Mutex
	seen  map[string]bool
	order []seenAuth // oldest first

	shared *sharedReplays // nil: this node's memory alone
}

type seenAuth struct {
	auth string
	at   time.Time
}

const maxSeen = 1 << 18

// newReplays returns a replay cache shared through client under prefix, or this node's alone when
// client is nil.
func newReplays(client redis.UniversalClient, prefix string, log *zap.Logger) *replays {
	r := &replays{seen: map[string]bool{}}
	if client != nil {
		if log == nil {
			log = zap.NewNop()
		}
		r.shared = &sharedReplays{client: client, prefix: prefix, log: log}
	}
	return r
}

// first reports whether auth is seen for the first time at now, and remembers it.
func (r *replays) first(auth string, now time.Time) bool {
	if !r.firstHere(auth, now) {
		return false
	}
	return r.shared == nil || r.shared.first(auth, now)
}

func (r *replays) firstHere(auth string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.order) > 0 && (now.Sub(r.order[0].at) > 2*MaxSkew || len(r.order) >= maxSeen) {
		delete(r.seen, r.order[0].auth)
		r.order = r.order[1:]
	}
	if r.seen[auth] {
		return false
	}
	r.seen[auth] = true
	r.order = append(r.order, seenAuth{auth: auth, at: now})
	return true
}

// sharedReplays is the part of the replay cache in Redis: one key per request taken, set only if it
// is not there (one atomic SET NX PX), kept 2×MaxSkew, the longest a header is good for across nodes
// whose clocks differ. After a failure Redis is left alone for replayRetries (the gateway asks it
// before answering, and a lost Redis must not cost every request its timeout), then asked again.
type sharedReplays struct {
	client redis.UniversalClient
	prefix string
	log    *zap.Logger

	mu       sync.Mutex
	down     bool
	failures int
	retryAt  time.Time
}

// replayTimeout bounds one question to Redis: past it, the node's own memory decides.
const replayTimeout = 250 * time.Millisecond

// replayRetries are the waits before Redis is asked again after a failure: the first, then every
// later one.
var replayRetries = [2]time.Duration{time.Second, 2 * time.Second}

// first reports whether no node took auth yet, and marks it taken. When Redis cannot say, it reports
// true: this node's memory, which said so already, decides.
func (s *sharedReplays) first(auth string, now time.Time) bool {
	s.mu.Lock()
	skip := s.down && now.Before(s.retryAt)
	s.mu.Unlock()
	if skip {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), replayTimeout)
	defer cancel()
	taken, err := s.claim(ctx, auth)
	s.result(err, now)
	return err != nil || taken
}

// claim marks auth taken in Redis and reports whether this call did.
func (s *sharedReplays) claim(ctx context.Context, auth string) (bool, error) {
	sum := sha256.Sum256([]byte(auth))
	key := s.prefix + ":remote:seen:" + hex.EncodeToString(sum[:])
	err := s.client.Do(ctx, "SET", key, "1", "NX", "PX", (2 * MaxSkew).Milliseconds()).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil // set already: another node, or this one, took it
	default:
		return false, err
	}
}

// result records how Redis answered, and logs each switch between shared and local once.
func (s *sharedReplays) result(err error, now time.Time) {
	s.mu.Lock()
	changed := s.down != (err != nil)
	if err == nil {
		s.down, s.failures = false, 0
	} else {
		s.down = true
		s.retryAt = now.Add(replayRetries[min(s.failures, len(replayRetries)-1)])
		s.failures++
	}
	s.mu.Unlock()
	switch {
	case !changed:
	case err != nil:
		s.log.Warn("Redis lost: each node remembers the remote requests it took alone, so another could take a replay once more",
			zap.String("event", "remote_replays_local"), zap.Error(err))
	default:
		s.log.Info("remote requests are remembered in Redis again", zap.String("event", "remote_replays_shared"))
	}
}
