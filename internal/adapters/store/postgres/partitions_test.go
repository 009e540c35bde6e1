package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestWeekOf(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-30T00:00:00Z":      "2026-11-30", // a Monday
		"2026-12-06T23:59:59Z":      "2026-11-30", // the Sunday after
		"2026-12-07T00:00:00Z":      "2026-12-07",
		"2026-12-07T00:30:00+01:00": "2026-11-30", // still Sunday in UTC
	} {
		at, _ := time.Parse(time.RFC3339, in)
		if got := WeekOf(at).Format(time.DateOnly); got != want {
			t.Errorf("%s: the week of %s, want %s", in, got, want)
		}
	}
}

// partitionsOf names the weekly partitions of a table there are, in order.
func partitionsOf(t *testing.T, s *Store, table string) []string {
	t.Helper()
	have, err := weeks(context.Background(), s.pool)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name := range have {
		if len(name) == len(table)+10 && name[:len(table)] == table {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func partitionOf(t *testing.T, s *Store, table, id string) string {
	t.Helper()
	var part string
	if err := s.pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM `+table+` WHERE request_id = $1`, id).Scan(&part); err != nil {
		t.Fatal(err)
	}
	return part
}

// The store makes the weeks ahead at Open and at each upkeep; a record or a call of any time inserts
// (into the DEFAULT partition when its week has none), and moves into its week's partition once
// that is made.
func TestPartitionsAreMadeAheadAndOnDemand(t *testing.T) {
	now := time.Now()
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	for _, p := range allPartitioned {
		have := partitionsOf(t, s, p.table)
		for w := range WeeksAhead + 1 {
			if week := p.of(WeekOf(now).Add(time.Duration(w) * Week)); !slices.Contains(have, week) {
				t.Errorf("%s is not made ahead (%v)", week, have)
			}
		}
	}
	ahead, past := now.AddDate(1, 0, 0), now.AddDate(-5, 0, 0)
	var records []*messages.Execution
	var calls []*messages.Call
	for _, at := range []time.Time{ahead, past} {
		r := record("r-"+at.Format("2006"), "general", at)
		r.KeyId = "key_a"
		records = append(records, r)
		calls = append(calls, settledCalls(r)...)
	}
	if err := s.Write(ctx, store.Batch{Calls: calls, Records: records}); err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if got, err := s.Get(ctx, r.RequestId); err != nil || !proto.Equal(got, r) {
			t.Fatalf("%s read back as %v, %v", r.RequestId, got, err)
		}
		for _, p := range allPartitioned {
			if part := partitionOf(t, s, p.table, r.RequestId); part != p.fallback() {
				t.Errorf("%s's row of %s is in %s", r.RequestId, p.table, part)
			}
		}
	}
	// A year on, upkeep makes that week: the record and its rows move into it.
	up, err := s.Upkeep(ctx, ahead, 0)
	if err != nil || up.Created != 5*(WeeksAhead+1) || len(up.Dropped) != 0 {
		t.Fatalf("upkeep a year on: %+v, %v", up, err)
	}
	for _, p := range allPartitioned {
		if part := partitionOf(t, s, p.table, records[0].RequestId); part != p.of(WeekOf(ahead)) {
			t.Errorf("%s's row of %s is in %s", records[0].RequestId, p.table, part)
		}
	}
	if got, err := s.Get(ctx, records[0].RequestId); err != nil || !proto.Equal(got, records[0]) {
		t.Fatalf("moved, %s reads back as %v, %v", records[0].RequestId, got, err)
	}
	// Upkeep again, or a second store opening, makes nothing more.
	if up, err := s.Upkeep(ctx, ahead, 0); err != nil || up.Created != 0 {
		t.Fatalf("upkeep again: %+v, %v", up, err)
	}
	if count(t, s, "workflow.executions") != 2 || count(t, s, "workflow.worker_results") != 6 || count(t, s, "books.journal") != 6 {
		t.Fatal("rows were lost or doubled by moving them")
	}
}

// Retention drops whole weeks older than it, of records and the journal together, and deletes the
// old rows of the DEFAULT partitions; the week that straddles the cut stays whole, a week of the
// journal that holds an open intent stays until it is settled, and the keys' spend stays.
func TestRetentionDropsWholeOldWeeks(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	now := time.Now()
	// A record a day for ten weeks back from now, and one five years old (in the DEFAULT partitions).
	var records []*messages.Execution
	var calls []*messages.Call
	for i := range 70 {
		r := record(fmt.Sprintf("r%02d", i), "general", now.Add(-time.Duration(i)*24*time.Hour))
		r.KeyId = "key_a"
		records = append(records, r)
		calls = append(calls, settledCalls(r)...)
	}
	old := record("r-old", "general", now.AddDate(-5, 0, 0))
	old.KeyId = "key_a"
	records = append(records, old)
	calls = append(calls, settledCalls(old)...)
	// Every week of the records has its partitions, as the upkeep of a controller running then made them.
	if _, err := s.makeWeeks(ctx, now.Add(-70*24*time.Hour), now); err != nil {
		t.Fatal(err)
	}
	// r65's first call is still open: its week of the journal stays.
	open := proto.Clone(calls[65*3]).(*messages.Call)
	open.State, open.SettledAt, open.CostNanos, open.Usage = store.CallOpen, nil, 0, nil
	calls = slices.Delete(calls, 65*3, 65*3+1)
	if err := s.Write(ctx, store.Batch{Calls: append(calls, open), Records: records}); err != nil {
		t.Fatal(err)
	}
	spend := func() string {
		var periods, daily, requests int64
		err := s.pool.QueryRow(ctx, `SELECT (SELECT sum(spent_nanos) FROM books.key_periods), (SELECT sum(cost_nanos) FROM books.spend_daily),
    (SELECT sum(requests) FROM books.requests_daily)`).Scan(&periods, &daily, &requests)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(periods, daily, requests)
	}
	before := spend()
	up, err := s.Upkeep(ctx, now, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cut := now.Add(-30 * 24 * time.Hour)
	openWeek := journalTable.of(WeekOf(records[65].ReceivedAt.AsTime()))
	if !slices.Equal(up.Kept, []string{openWeek}) {
		t.Errorf("kept %v, want the week of the open intent, %s", up.Kept, openWeek)
	}
	for _, p := range allPartitioned {
		for _, name := range partitionsOf(t, s, p.table) {
			week, _ := time.Parse("20060102", name[len(p.table)+2:])
			if !week.Add(Week).After(cut) && name != openWeek {
				t.Errorf("%s ended before the cut and stays", name)
			}
		}
	}
	// Every record of the weeks that end after the cut stays, the straddling week's older ones too.
	var kept int
	for _, r := range records[:70] {
		if WeekOf(r.ReceivedAt.AsTime()).Add(Week).After(cut) {
			kept++
		}
	}
	if got := count(t, s, "workflow.executions"); got != kept || kept <= 31 {
		t.Errorf("%d records stay, want %d", got, kept)
	}
	if got := count(t, s, "workflow.worker_results"); got != 3*kept {
		t.Errorf("%d calls of records stay, want %d", got, 3*kept)
	}
	if got := count(t, s, "workflow.phases"); got != 9*kept {
		t.Errorf("%d phases stay, want %d", got, 9*kept)
	}
	if _, err := s.Get(ctx, "r-old"); err == nil || up.Deleted != 1+3 {
		t.Errorf("the record five years old: %v; %d old rows deleted from the DEFAULT partitions, want it and its 3 calls", err, up.Deleted)
	}
	if got := spend(); got != before {
		t.Errorf("the keys' spend went from %s to %s", before, got)
	}
	// Settled, the open intent's week goes at the next upkeep.
	settled := proto.Clone(open).(*messages.Call)
	settled.State, settled.SettledAt, settled.CostNanos = store.CallSettled, timestamppb.New(now), 5
	if err := s.Write(ctx, store.Batch{Calls: []*messages.Call{settled}}); err != nil {
		t.Fatal(err)
	}
	if up, err := s.Upkeep(ctx, now, 30*24*time.Hour); err != nil || !slices.Equal(up.Dropped, []string{openWeek}) || len(up.Kept) != 0 {
		t.Fatalf("upkeep once the intent settled: %+v, %v", up, err)
	}
	if up, err := s.Upkeep(ctx, now, 30*24*time.Hour); err != nil || len(up.Dropped)+up.Created+int(up.Deleted) != 0 {
		t.Fatalf("upkeep again: %+v, %v", up, err)
	}
}

// A record and its calls written again, from a spool, add and charge nothing twice; nor does the
// record a recovering controller makes of a request recorded already (received when its late call
// opened), nor a record without a receipt time written twice.
func TestWritingTwiceAddsNothing(t *testing.T) {
	s := open(t, pgtest.New(t, true))
	ctx := context.Background()
	r := record("r1", "general", t0)
	r.KeyId = "key_a"
	calls := settledCalls(r)
	intent := proto.Clone(calls[0]).(*messages.Call)
	intent.State, intent.SettledAt, intent.CostNanos, intent.Usage = store.CallOpen, nil, 0, nil
	// A late call of the request, still open when its controller died.
	late := proto.Clone(intent).(*messages.Call)
	late.CallId, late.OpenedAt, late.ReservedNanos = "r1/late", timestamppb.New(t0.Add(5*time.Second)), 9
	if err := s.Write(ctx, store.Batch{Calls: []*messages.Call{intent, late}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Write(ctx, store.Batch{Calls: calls, Records: []*messages.Execution{r}}); err != nil {
			t.Fatal(err)
		}
	}
	open, err := s.Unsettled(ctx, "run-2", 10)
	if err != nil || len(open) != 1 || open[0].CallId != "r1/late" {
		t.Fatalf("open calls %v, %v", open, err)
	}
	settled, recovered := execution.Interrupted(open, t0.Add(time.Minute))
	if recovered[0].ReceivedAt.AsTime().Equal(t0) {
		t.Fatal("the recovered record is received when the record is: it tests nothing")
	}
	for range 2 {
		if err := s.Write(ctx, store.Batch{Calls: settled, Records: recovered}); err != nil {
			t.Fatal(err)
		}
	}
	bare := record("r2", "general", t0)
	bare.ReceivedAt = nil
	for range 2 {
		if err := s.Insert(ctx, []*messages.Execution{bare}); err != nil {
			t.Fatal(err)
		}
	}
	for table, want := range map[string]int{"workflow.executions": 2, "workflow.worker_results": 6, "workflow.phases": 18, "books.journal": 4,
		"learning.strategy_performance_history": 6} {
		if got := count(t, s, table); got != want {
			t.Errorf("%s: %d rows, want %d", table, got, want)
		}
	}
	if got, err := s.Get(ctx, "r1"); err != nil || !proto.Equal(got, r) {
		t.Errorf("r1 reads back as %v, %v", got, err)
	}
	var spent, calls2, requests int64
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT spent_nanos FROM books.key_periods), (SELECT sum(calls) FROM books.spend_daily),
    (SELECT requests FROM books.requests_daily)`).Scan(&spent, &calls2, &requests); err != nil {
		t.Fatal(err)
	}
	if spent != r.CostNanos+9 || calls2 != 4 || requests != 1 {
		t.Errorf("charged %d in %d calls and %d requests, want %d in 4 calls and 1 request", spent, calls2, requests, r.CostNanos+9)
	}
}
