package store

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/conclave-ai/conclave/messages"
)

// Memory keeps the most recent records up to a number of records and a number of bytes, forgetting the
// oldest first: a flood of large tasks cannot grow it past its byte budget. Nothing survives the
// process. It is safe for concurrent use. Records are held encoded, beside their summaries: thousands
// of decoded records are a heap of pointers every garbage collection would mark again, and that
// marking cost the server a tenth of its CPU under load.
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
	raw      []byte  // the record, encoded
	summary  Summary // what listing reads; Feedback says whether the record has any
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

// Write implements Store: the memory store keeps records; the journal is not kept (it would die with
// the process anyway), and its settlements are charged to keys as they come (see keystore.Memory).
func (m *Memory) Write(ctx context.Context, b Batch) error { return m.Insert(ctx, b.Records) }

// Insert implements Store.
func (m *Memory) Insert(_ context.Context, records []*messages.Execution) error {
	entries := make([]*entry, len(records))
	for i, r := range records {
		raw, err := r.MarshalVT()
		if err != nil {
			return fmt.Errorf("memory store: encode record %s: %w", r.RequestId, err)
		}
		entries[i] = &entry{raw: raw, summary: Summarize(r, false)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		if _, ok := m.byID[e.summary.RequestID]; ok {
			continue
		}
		m.queue = append(m.queue, e)
		m.byID[e.summary.RequestID] = e
		m.bytes += int64(len(e.raw))
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
	m.bytes -= int64(len(old.raw))
	delete(m.byID, old.summary.RequestID)
	if m.head > 1024 && m.head*2 > len(m.queue) { // compact once the dead prefix dominates
		m.queue = append(m.queue[:0], m.queue[m.head:]...)
		m.head = 0
	}
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (*messages.Execution, error) {
	m.mu.RLock()
	e, ok := m.byID[id]
	var fb *Feedback
	if ok {
		fb = e.feedback
	}
	m.mu.RUnlock()
	if !ok {
		return nil, ErrNotFound
	}
	rec := &messages.Execution{}
	if err := rec.UnmarshalVT(e.raw); err != nil {
		return nil, fmt.Errorf("memory store: decode record %s: %w", id, err)
	}
	return WithFeedback(rec, fb), nil
}

// SetFeedback implements Store.
func (m *Memory) SetFeedback(_ context.Context, id string, fb Feedback) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	switch {
	case !ok:
		return false, ErrNotFound
	case e.summary.Feedback:
		return false, nil
	}
	e.feedback, e.summary.Feedback = &fb, true
	return true, nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, f Filter) (Page, error) {
	pos, err := f.Position()
	if err != nil {
		return Page{}, err
	}
	m.mu.RLock()
	var hits []Summary
	for _, e := range m.queue[m.head:] {
		if s := e.summary; f.Matches(s) && pos.Admits(s.ReceivedAt, s.RequestID) {
			hits = append(hits, s)
		}
	}
	m.mu.RUnlock()
	// The nearest records to the position first: the newest from the start or after a cursor, the
	// oldest before one.
	slices.SortFunc(hits, newestFirst)
	if pos.Newer {
		slices.Reverse(hits)
	}
	n := f.PageSize()
	rows := append([]Summary{}, hits[:min(n+1, len(hits))]...)
	for i := range rows {
		rows[i].Models = slices.Clone(rows[i].Models) // the caller's to keep; the page's alone
	}
	return PageOf(rows, n, pos), nil
}

func newestFirst(a, b Summary) int {
	if c := b.ReceivedAt.Compare(a.ReceivedAt); c != 0 {
		return c
	}
	switch {
	case a.RequestID > b.RequestID:
		return -1
	case a.RequestID < b.RequestID:
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
