package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/messages"
)

func TestMemoryKeepsTheMostRecent(t *testing.T) {
	m := NewMemory(3, 0)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := m.Save(ctx, []*messages.Execution{{RequestId: fmt.Sprint(i)}}); err != nil {
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

func TestMemoryOverwriteOfSameID(t *testing.T) {
	m := NewMemory(2, 0)
	ctx := context.Background()
	m.Save(ctx, []*messages.Execution{{RequestId: "a", Answer: "1"}, {RequestId: "a", Answer: "2"}, {RequestId: "b"}})
	// Evicting the superseded first "a" must not forget the newer one.
	r, err := m.Get(ctx, "a")
	if err != nil || r.Answer != "2" {
		t.Fatalf("latest a lost: %v, %v", r, err)
	}
	if _, err := m.Get(ctx, "b"); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryIsBoundedByBytes(t *testing.T) {
	m := NewMemory(1000, 4<<20)
	ctx := context.Background()
	task := strings.Repeat("x", 1<<20)
	for i := 0; i < 20; i++ {
		if err := m.Save(ctx, []*messages.Execution{{RequestId: fmt.Sprint(i), Task: task}}); err != nil {
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
	m.Save(ctx, []*messages.Execution{{RequestId: "huge", Task: huge}})
	if _, err := m.Get(ctx, "huge"); err != nil || m.Len() != 1 {
		t.Fatalf("huge record: %v, %d held", err, m.Len())
	}
}
