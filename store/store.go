// Package store owns where execution records live: the Store interface the recorder writes through,
// and Memory, the bounded in-process store of the embedded default.
package store

import (
	"context"
	"errors"
	"sync"

	"github.com/conclave-ai/conclave/messages"
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

// Memory keeps the most recent records up to a capacity, forgetting the oldest first. It is safe for
// concurrent use.
type Memory struct {
	mu   sync.RWMutex
	ring []*messages.Execution
	next int
	byID map[string]*messages.Execution
}

// DefaultCapacity is the number of records Memory keeps when not told otherwise.
const DefaultCapacity = 10000

// NewMemory returns a memory store holding at most capacity records (DefaultCapacity when <= 0).
func NewMemory(capacity int) *Memory {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Memory{ring: make([]*messages.Execution, capacity), byID: make(map[string]*messages.Execution, capacity)}
}

// Save implements Store.
func (m *Memory) Save(_ context.Context, records []*messages.Execution) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range records {
		if old := m.ring[m.next]; old != nil && m.byID[old.RequestId] == old {
			delete(m.byID, old.RequestId)
		}
		m.ring[m.next] = r
		m.byID[r.RequestId] = r
		m.next = (m.next + 1) % len(m.ring)
	}
	return nil
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

// Close implements Store.
func (m *Memory) Close() error { return nil }
