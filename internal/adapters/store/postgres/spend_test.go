package postgres

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestSpendAgreesWithTheMemoryStore sums a key's spend in PostgreSQL (from the books, charged as the
// calls settle) and in the memory store (from the records) over the same requests: by model (the
// arbiter's call included) and by day, within the window, no other key's.
func TestSpendAgreesWithTheMemoryStore(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	mem := store.NewMemory(0, 0)
	day := time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC)
	var records []*messages.Execution
	for i, c := range []struct {
		key string
		at  time.Time
	}{{"key_a", day}, {"key_a", day.Add(2 * time.Hour)}, {"key_b", day}, {"key_a", day.Add(48 * time.Hour)}, {"", day}} {
		r := record("r"+string(rune('0'+i)), "science", c.at)
		r.KeyId = c.key
		if i == 1 {
			r.Decision.Arbiter, r.Decision.ArbiterCostNanos, r.CostNanos = "judge/model", int64(4*money.Dollar/1000), int64(7*money.Dollar/1000)
		}
		records = append(records, r)
	}
	ctx := context.Background()
	var calls []*messages.Call
	for _, r := range records {
		calls = append(calls, settledCalls(r)...)
	}
	if err := s.Write(ctx, store.Batch{Calls: calls, Records: records}); err != nil {
		t.Fatal(err)
	}
	// Written again, as a spool would: nothing is charged or counted twice.
	if err := s.Write(ctx, store.Batch{Calls: calls, Records: records}); err != nil {
		t.Fatal(err)
	}
	if err := mem.Insert(ctx, records); err != nil {
		t.Fatal(err)
	}
	window := store.SpendQuery{KeyID: "key_a", Since: day.Add(-time.Hour), Until: day.Add(24 * time.Hour)}
	byModel, err := s.Spend(ctx, window)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SpendGroup{{Model: "judge/model", Requests: 1, CostUSD: 4 * money.Dollar / 1000}, {Model: "m-b", Requests: 2, CostUSD: 4 * money.Dollar / 1000},
		{Model: "m-a", Requests: 2, CostUSD: 2 * money.Dollar / 1000}, {Model: "m-c", Requests: 2, CostUSD: 0}}
	if !equalGroups(byModel, want) {
		t.Errorf("by model: %+v, want %+v", byModel, want)
	}
	window.ByDay = true
	byDay, err := s.Spend(ctx, window)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.SpendGroup{{Day: "2026-03-01", Requests: 1, CostUSD: 3 * money.Dollar / 1000}, {Day: "2026-03-02", Requests: 1, CostUSD: 7 * money.Dollar / 1000}}; !equalGroups(byDay, want) {
		t.Errorf("by day: %+v, want %+v", byDay, want)
	}
	for _, q := range []store.SpendQuery{window, {KeyID: "key_a", Since: day.Add(-time.Hour), Until: day.Add(72 * time.Hour)}, {KeyID: "key_b", Since: day, Until: day.Add(time.Hour)}} {
		fromPG, _ := s.Spend(ctx, q)
		fromMemory, _ := mem.Spend(ctx, q)
		if !equalGroups(fromPG, fromMemory) {
			t.Errorf("%+v: PostgreSQL says %+v, the memory store %+v", q, fromPG, fromMemory)
		}
	}
}

// settledCalls are the calls of a record as the journal settles them: each result's, and the
// arbiter's when it cost anything, opened as the request was received.
func settledCalls(r *messages.Execution) []*messages.Call {
	var calls []*messages.Call
	call := func(id, model, provider string, cost int64) {
		calls = append(calls, &messages.Call{CallId: id, RequestId: r.RequestId, KeyId: r.KeyId, Model: model, Provider: provider,
			NodeId: "node-a", RunId: "run-1", OpenedAt: r.ReceivedAt, Deadline: timestamppb.New(r.ReceivedAt.AsTime().Add(time.Minute)),
			ReservedNanos: cost, State: store.CallSettled, SettledAt: r.CompletedAt, Usage: &messages.Usage{InputTokens: 10, OutputTokens: 2},
			CostNanos: cost})
	}
	for i, w := range r.Results {
		call(fmt.Sprintf("%s/%d", r.RequestId, i), w.Model, w.Provider, w.CostNanos)
	}
	if d := r.GetDecision(); d.GetArbiterCostNanos() > 0 {
		call(r.RequestId+"/arbiter", d.Arbiter, "judge", d.ArbiterCostNanos)
	}
	return calls
}

// equalGroups compares groups exactly: costs are whole nano-dollars.
func equalGroups(a, b []store.SpendGroup) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}
