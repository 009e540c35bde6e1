// Package store owns where execution records live: the Store interface the recorder writes through,
// and Memory, the bounded in-process store of the embedded default.
package store

import (
	"context"
	"errors"
	"sync"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
)

// ErrNotFound is returned for an unknown request id.
var ErrNotFound = errors.New("execution not found")

// Store persists execution records.
type Store interface {
	// Save writes a batch of records.
	Save(ctx context.Context, records []*messages.Execution) error
	// Get returns the record of a request, or ErrNotFound.
	Get(ctx context.Context, requestID string) (*messages.Execution, error)
	Close() error
}

// Memory keeps the most recent records up to a number of records and a number of bytes, forgetting the
// oldest first: a flood of large tasks cannot grow it past its byte budget. It is safe for concurrent
// use.
type Memory struct {
	mu       sync.RWMutex
	queue    []entry // oldest first, from head on
	head     int
	byID     map[string]*messages.Execution
	records  int
	maxBytes int64
	bytes    int64
}

type entry struct {
	rec  *messages.Execution
	size int64
}

// Defaults of the memory store.
const (
	DefaultCapacity = 10000
	DefaultMaxBytes = 256 << 20
)

// NewMemory returns a memory store holding at most records records (DefaultCapacity when <= 0) and
// about maxBytes bytes of them, as encoded (DefaultMaxBytes when <= 0). The newest record is always
// kept, even alone over the budget.
func NewMemory(records int, maxBytes int64) *Memory {
	if records <= 0 {
		records = DefaultCapacity
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Memory{byID: make(map[string]*messages.Execution), records: records, maxBytes: maxBytes}
}

// Save implements Store.
func (m *Memory) Save(_ context.Context, records []*messages.Execution) error {
	sizes := make([]int64, len(records))
	for i, r := range records {
		sizes[i] = int64(proto.Size(r))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range records {
		m.queue = append(m.queue, entry{r, sizes[i]})
		m.bytes += sizes[i]
		m.byID[r.RequestId] = r
		for n := len(m.queue) - m.head; n > 1 && (n > m.records || m.bytes > m.maxBytes); n-- {
			m.evict()
		}
	}
	return nil
}

func (m *Memory) evict() {
	old := m.queue[m.head]
	m.queue[m.head] = entry{}
	m.head++
	m.bytes -= old.size
	if m.byID[old.rec.RequestId] == old.rec {
		delete(m.byID, old.rec.RequestId)
	}
	if m.head > 1024 && m.head*2 > len(m.queue) { // compact once the dead prefix dominates
		m.queue = append(m.queue[:0], m.queue[m.head:]...)
		m.head = 0
	}
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (*messages.Execution, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r, ok := m.byID[id]; ok {
		return r, nil
	}
	return nil, ErrNotFound
}

// Len is the number of records held.
func (m *Memory) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.byID)
}

// Bytes is the encoded size of the records held (superseded versions of a record included).
func (m *Memory) Bytes() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.bytes
}

// Close implements Store.
func (m *Memory) Close() error { return nil }
