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

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
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
