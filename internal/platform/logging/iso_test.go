package logging

import (
	"bytes"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// TestISO8601IsZapsEncoding checks the cached encoder against zap's own across second, day and zone
// changes.
func TestISO8601IsZapsEncoding(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+30*60), time.FixedZone("west", -8*3600)}
	start := time.Date(2026, 12, 31, 23, 59, 58, 0, time.UTC)
	for _, loc := range zones {
		for step := range 3000 {
			at := start.Add(time.Duration(step) * 7 * time.Millisecond).In(loc)
			got, want := encodeTime(ISO8601, at), encodeTime(zapcore.ISO8601TimeEncoder, at)
			if got != want {
				t.Fatalf("%v: %q, zap's encoder gives %q", at, got, want)
			}
		}
	}
}

func encodeTime(enc zapcore.TimeEncoder, t time.Time) string {
	var out stringArray
	enc(t, &out)
	return out.s
}

// stringArray keeps the one string a time encoder appends.
type stringArray struct {
	zapcore.PrimitiveArrayEncoder
	s string
}

func (a *stringArray) AppendString(s string)     { a.s = s }
func (a *stringArray) AppendByteString(b []byte) { a.s = string(b) }

// syncCounter is a file-like writer that counts the times it is forced to disk.
type syncCounter struct {
	bytes.Buffer
	syncs int
}

func (s *syncCounter) Sync() error { s.syncs++; return nil }

// The buffer's flushes write the lines out without forcing the file to disk.
func TestBufferFlushesWithoutSyncingTheFile(t *testing.T) {
	out := &syncCounter{}
	b := Buffer(out)
	if _, err := b.Write([]byte("line\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "line\n" || out.syncs != 0 {
		t.Fatalf("wrote %q with %d syncs, want the line and no sync", out.String(), out.syncs)
	}
}
