package store

import (
	"context"
	"slices"
	"sync"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
)

// Memory keeps the most recent records up to a number of records and a number of bytes, forgetting the
// oldest first: a flood of large tasks cannot grow it past its byte budget. Nothing survives the
// process. It is safe for concurrent use.
type Memory struct {
	mu       sync.RWMutex
	queue    []*entry // oldest first, from head on
	head     int
	byID     map[string]*entry
	records  int
	maxBytes int64
	bytes    int64
}

type entry struct {
	rec      *messages.Execution
	size     int64
	feedback *Feedback
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
	return &Memory{byID: make(map[string]*entry), records: records, maxBytes: maxBytes}
}

// Insert implements Store.
func (m *Memory) Insert(_ context.Context, records []*messages.Execution) error {
	sizes := make([]int64, len(records))
	for i, r := range records {
		sizes[i] = int64(proto.Size(r))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range records {
		if _, ok := m.byID[r.RequestId]; ok {
			continue
		}
		e := &entry{rec: r, size: sizes[i]}
		m.queue = append(m.queue, e)
		m.byID[r.RequestId] = e
		m.bytes += sizes[i]
		for n := len(m.queue) - m.head; n > 1 && (n > m.records || m.bytes > m.maxBytes); n-- {
			m.evict()
		}
	}
	return nil
}

func (m *Memory) evict() {
	old := m.queue[m.head]
	m.queue[m.head] = nil
	m.head++
	m.bytes -= old.size
	delete(m.byID, old.rec.RequestId)
	if m.head > 1024 && m.head*2 > len(m.queue) { // compact once the dead prefix dominates
		m.queue = append(m.queue[:0], m.queue[m.head:]...)
		m.head = 0
	}
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (*messages.Execution, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e, ok := m.byID[id]; ok {
		return WithFeedback(e.rec, e.feedback), nil
	}
	return nil, ErrNotFound
}

// SetFeedback implements Store.
func (m *Memory) SetFeedback(_ context.Context, id string, fb Feedback) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	switch {
	case !ok:
		return false, ErrNotFound
	case e.feedback != nil || len(e.rec.Feedback) > 0:
		return false, nil
	}
	e.feedback = &fb
	return true, nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, f Filter) (Page, error) {
	after, hasAfter, err := ParseCursor(f.After)
	if err != nil {
		return Page{}, err
	}
	m.mu.RLock()
	var hits []*entry
	for _, e := range m.queue[m.head:] {
		if f.Matches(e.rec) && (!hasAfter || after.Before(e.rec.GetReceivedAt().AsTime(), e.rec.RequestId)) {
			hits = append(hits, e)
		}
	}
	page := Page{Records: []Summary{}}
	slices.SortFunc(hits, func(a, b *entry) int { return newestFirst(a.rec, b.rec) })
	n := f.PageSize()
	for _, e := range hits[:min(n, len(hits))] {
		page.Records = append(page.Records, Summarize(e.rec, e.feedback != nil))
	}
	m.mu.RUnlock()
	if len(hits) > n {
		last := page.Records[n-1]
		page.Next = Cursor{ReceivedAt: last.ReceivedAt, RequestID: last.RequestID}.Encode()
	}
	return page, nil
}

func newestFirst(a, b *messages.Execution) int {
	if c := b.GetReceivedAt().AsTime().Compare(a.GetReceivedAt().AsTime()); c != 0 {
		return c
	}
	switch {
	case a.RequestId > b.RequestId:
		return -1
	case a.RequestId < b.RequestId:
		return 1
	}
	return 0
}

// Len is the number of records held.
func (m *Memory) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.byID)
}

// Bytes is the encoded size of the records held.
func (m *Memory) Bytes() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.bytes
}

// Close implements Store.
func (m *Memory) Close() error { return nil }
