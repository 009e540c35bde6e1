package answercache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/redistest"
)

// stores are the two stores with a bound of 100 bytes, the Redis one against a real Redis.
func stores(t *testing.T) map[string]Store {
	c, prefix := redistest.New(t)
	return map[string]Store{"memory": NewMemory(100, nil), "redis": NewRedis(c, prefix, 100)}
}

// TestTheLeastRecentlyReadAnswerGoesFirst fills a store past its bound: the answer read least
// recently goes, the one read since stays, and one larger than the whole bound is not kept.
func TestTheLeastRecentlyReadAnswerGoesFirst(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			forty := func(c string) []byte { return []byte(strings.Repeat(c, 40)) }
			for _, k := range []string{"a", "b"} {
				if err := s.Put(ctx, k, forty(k), time.Hour); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond) // Redis orders reads by the millisecond
			}
			if v, ok, err := s.Get(ctx, "a"); err != nil || !ok || string(v) != string(forty("a")) {
				t.Fatalf("a: %q %v %v", v, ok, err)
			}
			time.Sleep(2 * time.Millisecond)
			if err := s.Put(ctx, "c", forty("c"), time.Hour); err != nil { // 120 bytes: b goes
				t.Fatal(err)
			}
			for k, want := range map[string]bool{"a": true, "b": false, "c": true} {
				if _, ok, err := s.Get(ctx, k); err != nil || ok != want {
					t.Errorf("%s kept %v, want %v (%v)", k, ok, want, err)
				}
			}
			if err := s.Put(ctx, "huge", []byte(strings.Repeat("x", 101)), time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := s.Get(ctx, "huge"); ok {
				t.Error("an answer larger than the bound was kept")
			}
			if _, ok, _ := s.Get(ctx, "a"); !ok {
				t.Error("an answer too large for the bound made others go")
			}
		})
	}
}

// TestAnAnswerExpires: past its time to live an answer is gone, and its bytes with it.
func TestAnAnswerExpires(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	m := NewMemory(100, func() time.Time { return now })
	if err := m.Put(ctx, "a", []byte("four"), time.Minute); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, ok, _ := m.Get(ctx, "a"); ok || m.Used() != 0 {
		t.Fatalf("an expired answer: found %v, %d bytes held", ok, m.Used())
	}
	c, prefix := redistest.New(t)
	r := NewRedis(c, prefix, 100)
	if err := r.Put(ctx, "a", []byte("four"), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok, err := r.Get(ctx, "a"); err != nil || !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an answer outlived its time to live")
		}
	}
	if n, err := c.Get(ctx, prefix+":answers:bytes").Int(); err != nil || n != 0 {
		t.Fatalf("the expired answer's bytes are still counted: %d %v", n, err)
	}
}

// TestControllersShareTheRedisStore: what one controller keeps, another reads, and the bound holds
// under writers at once.
func TestControllersShareTheRedisStore(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.New(t)
	a, b := NewRedis(c, prefix, 1000), NewRedis(c, prefix, 1000)
	if err := a.Put(ctx, "k", []byte("answer"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := b.Get(ctx, "k"); err != nil || !ok || string(v) != "answer" {
		t.Fatalf("the other controller read %q %v %v", v, ok, err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				_ = []*Redis{a, b}[i%2].Put(ctx, fmt.Sprintf("%d-%d", i, j), []byte(strings.Repeat("x", 37)), time.Hour)
			}
		})
	}
	wg.Wait()
	n, err := c.Get(ctx, prefix+":answers:bytes").Int64()
	if err != nil || n > 1000 {
		t.Fatalf("%d bytes kept under a bound of 1000 (%v)", n, err)
	}
	sizes, err := c.HVals(ctx, prefix+":answers:sizes").Result()
	if err != nil || int64(len(sizes))*37 != n {
		t.Fatalf("%d answers of 37 bytes counted as %d bytes", len(sizes), n)
	}
}
