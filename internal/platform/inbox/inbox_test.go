package inbox

import (
	"sync"
	"testing"
)

// TestInboxKeepsEachSendersOrderAndLosesNothing has several senders put numbered messages at once
// while the reader takes them: every message arrives once, each sender's in the order it sent them.
func TestInboxKeepsEachSendersOrderAndLosesNothing(t *testing.T) {
	const senders, each = 4, 2000
	b := New()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if !b.Put([2]int{s, i}) {
					t.Error("an open inbox refused a message")
				}
			}
		}()
	}
	next := make([]int, senders)
	var got []any
	for n := 0; n < senders*each; {
		<-b.Ready()
		got = b.Take(got[:0])
		for _, m := range got {
			p := m.([2]int)
			if p[1] != next[p[0]] {
				t.Fatalf("sender %d: message %d came where %d was due", p[0], p[1], next[p[0]])
			}
			next[p[0]]++
			n++
		}
	}
	wg.Wait()
	if extra := b.Take(nil); len(extra) != 0 {
		t.Fatalf("%d messages more than were sent", len(extra))
	}
}

// TestAClosedInboxDropsWhatComes: a late sender's message is refused and not kept.
func TestAClosedInboxDropsWhatComes(t *testing.T) {
	b := New()
	b.Put("before")
	b.Close()
	if b.Put("after") {
		t.Fatal("a closed inbox took a message")
	}
	if got := b.Take(nil); len(got) != 0 {
		t.Fatalf("a closed inbox kept %v", got)
	}
}
