package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/conclave-ai/conclave/messages"
)

func TestMemoryKeepsTheMostRecent(t *testing.T) {
	m := NewMemory(3)
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
	m := NewMemory(2)
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
