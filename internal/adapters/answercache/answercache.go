// Package answercache owns where the exact answer cache keeps its answers: in Redis, shared by every
// controller, or in this process's memory on the embedded default. Both are bounded in bytes and let
// the least recently read answer go first; each answer also expires after its time to live. What is
// kept, under which key and for how long is internal/core/exactcache's to decide.
package answercache

import (
	"container/list"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store keeps answers by key for a time, bounded in bytes.
type Store interface {
	// Get returns the answer kept under key; found is false when there is none (or it expired).
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
	// Put keeps value under key for ttl, making room by letting the least recently read answers go; an
	// answer larger than the whole bound is not kept.
	Put(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// DefaultMaxBytes bounds a cache whose configuration gives no bound (cache.max_bytes).
const DefaultMaxBytes = 64 << 20

// Memory is a Store in this process, for the embedded default.
type Memory struct {
	max int64
	now func() time.Time

	mu    sync.Mutex
	used  int64
	order *list.List // of *memoryEntry, the most recently read first
	byKey map[string]*list.Element
}

type memoryEntry struct {
	key     string
	value   []byte
	expires time.Time
}

// NewMemory returns a memory store of at most maxBytes of answers; now is its clock (nil: the wall's).
func NewMemory(maxBytes int64, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{max: maxBytes, now: now, order: list.New(), byKey: map[string]*list.Element{}}
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byKey[key]
	if !ok {
		return nil, false, nil
	}
	e := el.Value.(*memoryEntry)
	if !m.now().Before(e.expires) {
		m.remove(el)
		return nil, false, nil
	}
	m.order.MoveToFront(el)
	return e.value, true, nil
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, key string, value []byte, ttl time.Duration) error {
	size := int64(len(value))
	if size > m.max || ttl <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[key]; ok {
		m.remove(el)
	}
	for m.used+size > m.max {
		m.remove(m.order.Back())
	}
	m.byKey[key] = m.order.PushFront(&memoryEntry{key: key, value: value, expires: m.now().Add(ttl)})
	m.used += size
	return nil
}

// remove lets an entry go; the lock is held.
func (m *Memory) remove(el *list.Element) {
	e := m.order.Remove(el).(*memoryEntry)
	delete(m.byKey, e.key)
	m.used -= int64(len(e.value))
}

// Used is how many bytes of answers the store holds.
func (m *Memory) Used() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// Redis is a Store every controller sharing the Redis (and the prefix) shares. Each answer is a key of
// its own with its time to live; a sorted set orders the answers by their last read, on the server's
// clock, a hash keeps their sizes and a counter their sum, and one script each reads (and marks the
// read) and writes (and lets the least recently read go until the new answer fits), atomically. The
// answers' keys are made from the prefix inside the scripts, so the store wants a Redis that is not a
// cluster.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	max    int64
}

//go:embed get.lua
var getScript string

//go:embed put.lua
var putScript string

var (
	get = redis.NewScript(getScript)
	put = redis.NewScript(putScript)
)

// NewRedis returns the store in c under prefix ("conclave" makes conclave:answers:...), of at most
// maxBytes of answers.
func NewRedis(c redis.UniversalClient, prefix string, maxBytes int64) *Redis {
	return &Redis{c: c, prefix: prefix + ":answers:", max: maxBytes}
}

func (r *Redis) keys() []string {
	return []string{r.prefix + "lru", r.prefix + "sizes", r.prefix + "bytes"}
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := get.Run(ctx, r.c, r.keys(), key, r.prefix+"v:").Text()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("answer cache: %w", err)
	}
	return []byte(v), true, nil
}

// Put implements Store.
func (r *Redis) Put(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if int64(len(value)) > r.max || ttl <= 0 {
		return nil
	}
	if err := put.Run(ctx, r.c, r.keys(), key, value, ttl.Milliseconds(), r.max, r.prefix+"v:").Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("answer cache: %w", err)
	}
	return nil
}
