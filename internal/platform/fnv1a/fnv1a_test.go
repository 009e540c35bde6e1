package fnv1a

import (
	"hash/fnv"
	"testing"
)

// The value hash is hash/fnv's 64-bit FNV-1a, byte for byte.
func TestIsFNV1a(t *testing.T) {
	for _, s := range []string{"", "a", "conclave", "The answer is (B).", "é\x00\xff"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := uint64(Offset.AddString(s)), h.Sum64(); got != want {
			t.Errorf("%q: %x, hash/fnv gives %x", s, got, want)
		}
		if got := Offset.AddBytes([]byte(s)); got != Offset.AddString(s) {
			t.Errorf("%q: bytes and string differ", s)
		}
	}
}
