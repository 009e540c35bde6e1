package engine

import (
	"slices"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/store"
)

func ids(rs []store.Reward) []int64 {
	out := []int64{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func rewards(ids ...int64) []store.Reward {
	var out []store.Reward
	for _, id := range ids {
		out = append(out, store.Reward{ID: id})
	}
	return out
}

// The cursor folds each reward once, including one numbered below rewards already read that committed
// after them.
func TestPeerCursor(t *testing.T) {
	c := newPeerCursor(10, []int64{8, 10}) // 9 was still committing when the arms were read
	tests := []struct {
		desc string
		read []store.Reward
		want []int64
	}{
		{"what the arms hold is not folded again; the late 9 is", rewards(8, 9, 10, 11), []int64{9, 11}},
		{"a read that finds nothing new folds nothing", rewards(8, 9, 10, 11), []int64{}},
		{"a reward numbered below one already read", rewards(11, 12, 14), []int64{12, 14}},
		{"which commits later", rewards(13, 14), []int64{13}},
	}
	for _, tt := range tests {
		from := c.from()
		if got := ids(c.take(tt.read)); !slices.Equal(got, tt.want) {
			t.Fatalf("%s (after %d): folded %v, want %v", tt.desc, from, got, tt.want)
		}
	}
	if c.high != 14 {
		t.Fatalf("high %d", c.high)
	}
	// Far above the lookback, old ids are forgotten: the set stays bounded.
	c.take(rewards(14 + 2*peerLookback))
	if len(c.seen) != 1 {
		t.Fatalf("%d ids remembered", len(c.seen))
	}
}
