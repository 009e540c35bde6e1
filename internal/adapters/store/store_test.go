package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMemoryKeepsTheMostRecent(t *testing.T) {
	m := NewMemory(3, 0)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := m.Insert(ctx, []*messages.Execution{{RequestId: fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 3 {
		t.Fatalf("holds %d records, want 3", m.Len())
	}
	for i := 0; i < 5; i++ {
		_, err := m.Get(ctx, fmt.Sprint(i))
		if evicted := i < 2; evicted != errors.Is(err, ErrNotFound) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

func TestMemoryInsertsAnIDOnce(t *testing.T) {
	m := NewMemory(2, 0)
	ctx := context.Background()
	m.Insert(ctx, []*messages.Execution{{RequestId: "a", Answer: "1"}, {RequestId: "a", Answer: "2"}, {RequestId: "b"}})
	r, err := m.Get(ctx, "a")
	if err != nil || r.Answer != "1" || m.Len() != 2 {
		t.Fatalf("a is %v (%v), %d held", r, err, m.Len())
	}
}

func TestMemoryTakesFeedbackOnceAndLeavesTheRecord(t *testing.T) {
	m := NewMemory(0, 0)
	ctx := context.Background()
	rec := &messages.Execution{RequestId: "a"}
	m.Insert(ctx, []*messages.Execution{rec})
	fb := Feedback{Updates: []*messages.BanditUpdate{{Model: "m", Reward: 1}}, At: time.Unix(100, 0)}
	var wg sync.WaitGroup
	var applied atomic.Int32
	for range 8 {
		wg.Go(func() {
			if ok, err := m.SetFeedback(ctx, "a", fb); err != nil {
				t.Error(err)
			} else if ok {
				applied.Add(1)
			}
		})
	}
	wg.Wait()
	got, _ := m.Get(ctx, "a")
	if applied.Load() != 1 || len(got.Feedback) != 1 || len(rec.Feedback) != 0 {
		t.Fatalf("applied %d times; read back %v; the stored record changed: %v", applied.Load(), got.Feedback, rec.Feedback)
	}
	if _, err := m.SetFeedback(ctx, "b", fb); !errors.Is(err, ErrNotFound) {
		t.Fatalf("feedback on an unknown id: %v", err)
	}
}

func TestMemoryIsBoundedByBytes(t *testing.T) {
	m := NewMemory(1000, 4<<20)
	ctx := context.Background()
	task := strings.Repeat("x", 1<<20)
	for i := 0; i < 20; i++ {
		if err := m.Insert(ctx, []*messages.Execution{{RequestId: fmt.Sprint(i), Task: task}}); err != nil {
			t.Fatal(err)
		}
	}
	if m.Bytes() > 4<<20 || m.Len() != 3 {
		t.Fatalf("holds %d records in %d bytes, want the 3 newest within 4 MiB", m.Len(), m.Bytes())
	}
	if _, err := m.Get(ctx, "19"); err != nil {
		t.Fatal(err)
	}
	// A record above the whole budget is still kept: the newest record is never dropped.
	huge := strings.Repeat("y", 5<<20)
	m.Insert(ctx, []*messages.Execution{{RequestId: "huge", Task: huge}})
	if _, err := m.Get(ctx, "huge"); err != nil || m.Len() != 1 {
		t.Fatalf("huge record: %v, %d held", err, m.Len())
	}
}

// A record comes back as it went in, whole, and neither the inserted record nor the one read is the
// stored one: changing either leaves the store's as it was.
func TestMemoryHoldsRecordsByValue(t *testing.T) {
	m := NewMemory(0, 0)
	ctx := context.Background()
	in := &messages.Execution{RequestId: "a", Answer: "B", Classification: &messages.Classification{Category: "general"},
		Results: []*messages.WorkerResult{{Model: "m1", Text: "The answer is (B)."}, {Model: "m2", ErrorKind: "host_timeout"}}}
	want := proto.Clone(in)
	if err := m.Insert(ctx, []*messages.Execution{in}); err != nil {
		t.Fatal(err)
	}
	in.Answer, in.Results[0].Text = "changed", "changed"
	got, err := m.Get(ctx, "a")
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("read %v (%v), want %v", got, err, want)
	}
	got.Results[1].Model = "changed"
	if again, _ := m.Get(ctx, "a"); !proto.Equal(again, want) {
		t.Fatalf("a change to a read record reached the store: %v", again)
	}
	page, err := m.List(ctx, Filter{Model: "m2"})
	if err != nil || len(page.Records) != 1 || page.Records[0].Category != "general" || len(page.Records[0].Models) != 2 {
		t.Fatalf("listing by model: %+v (%v)", page, err)
	}
}

// keyed is a record of a key's request received at a minute past t0, with a task.
func keyed(id, key string, minute int, task string) *messages.Execution {
	return &messages.Execution{RequestId: id, KeyId: key, Task: task, StatusCode: 200,
		ReceivedAt:     timestamppb.New(time.Date(2026, 11, 30, 12, minute, 0, 0, time.UTC)),
		Classification: &messages.Classification{Category: "general"}}
}

// pages lists a filter's pages from the newest on, then back from the oldest page by Prev: the ids of
// each page, pages split by |.
func pages(t *testing.T, s Store, f Filter) (forth, back string) {
	t.Helper()
	ctx := context.Background()
	var ps []string
	var last Page
	for {
		p, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		ps, last = append(ps, ids(p)), p
		if p.Next == "" {
			break
		}
		f.After = p.Next
	}
	forth = strings.Join(ps, "|")
	ps = []string{ids(last)}
	f.After = ""
	for last.Prev != "" {
		f.Before = last.Prev
		p, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		ps, last = append([]string{ids(p)}, ps...), p
	}
	return forth, strings.Join(ps, "|")
}

func ids(p Page) string {
	var out []string
	for _, r := range p.Records {
		out = append(out, r.RequestID)
	}
	return strings.Join(out, ",")
}

func TestMemoryListsAKeysRecordsBothWays(t *testing.T) {
	m := NewMemory(0, 0)
	var recs []*messages.Execution
	for i := range 9 {
		key := "key_a"
		if i%3 == 2 {
			key = ""
		}
		recs = append(recs, keyed(fmt.Sprintf("r%d", i), key, i, "task"))
	}
	recs = append(recs, keyed("r9", "key_b", 9, "task"))
	if err := m.Insert(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	forth, back := pages(t, m, Filter{KeyID: "key_a", Limit: 4})
	if want := "r7,r6,r4,r3|r1,r0"; forth != want || back != want {
		t.Fatalf("key_a's pages: %s, and back %s; want %s", forth, back, want)
	}
	forth, back = pages(t, m, Filter{Limit: 3})
	if want := "r9,r8,r7|r6,r5,r4|r3,r2,r1|r0"; forth != want || back != want {
		t.Fatalf("every record's pages: %s, and back %s; want %s", forth, back, want)
	}
	page, err := m.List(context.Background(), Filter{KeyID: "key_b"})
	if err != nil || ids(page) != "r9" || page.Records[0].KeyID != "key_b" || page.Next != "" || page.Prev != "" {
		t.Fatalf("key_b's page: %+v (%v)", page, err)
	}
	if _, err := m.List(context.Background(), Filter{After: page.Next + "x", Before: "y"}); !errors.Is(err, ErrTwoCursors) {
		t.Fatalf("two cursors: %v", err)
	}
}

// A summary shows a task's first 200 characters, counted as characters: a task of two-byte and
// four-byte characters is cut between two of them, never inside one.
func TestASummaryClipsItsTaskByCharacters(t *testing.T) {
	tests := []struct {
		task, want string
		clipped    bool
	}{
		{strings.Repeat("é", 200), strings.Repeat("é", 200), false},
		{strings.Repeat("é", 201), strings.Repeat("é", 200), true},
		{strings.Repeat("a", 199) + "😀😀", strings.Repeat("a", 199) + "😀", true},
		{"short", "short", false},
		{"a\x00b\xff\xfec", "ab\uFFFDc", false}, // as PostgreSQL keeps it
	}
	for _, tt := range tests {
		s := Summarize(&messages.Execution{Task: tt.task}, false)
		if s.Task != tt.want || s.TaskClipped != tt.clipped || !utf8.ValidString(s.Task) {
			t.Errorf("%q: summary %q (clipped %v), want %q (%v)", tt.task, s.Task, s.TaskClipped, tt.want, tt.clipped)
		}
	}
}
