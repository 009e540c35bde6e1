package store

import (
	"context"
	"fmt"

	"github.com/conclave-ai/conclave/messages"
)

// Spend implements Spender over the records held.
func (m *Memory) Spend(_ context.Context, q SpendQuery) ([]SpendGroup, error) {
	var records []*messages.Execution
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, e := range m.queue[m.head:] {
		if s := e.summary; s.ReceivedAt.Before(q.Since) || !s.ReceivedAt.Before(q.Until) {
			continue
		}
		r := &messages.Execution{}
		if err := r.UnmarshalVT(e.raw); err != nil {
			return nil, fmt.Errorf("memory store: decode record %s: %w", e.summary.RequestID, err)
		}
		records = append(records, r)
	}
	return SpendOf(q, records), nil
}
