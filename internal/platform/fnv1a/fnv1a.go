// Package fnv1a hashes with 64-bit FNV-1a held in a value: hash/fnv's hashes are written through an
// interface and escape to the heap, which costs more than the hashing of a short string.
package fnv1a

// Hash is a running hash; Offset is the empty one.
type Hash uint64

// Offset is FNV-1a's initial value.
const Offset Hash = 14695981039346656037

const prime = 1099511628211

// AddByte hashes one more byte.
func (h Hash) AddByte(b byte) Hash { return (h ^ Hash(b)) * prime }

// AddString hashes the bytes of s.
func (h Hash) AddString(s string) Hash {
	for i := 0; i < len(s); i++ {
		h = h.AddByte(s[i])
	}
	return h
}

// AddBytes hashes b.
func (h Hash) AddBytes(b []byte) Hash {
	for _, c := range b {
		h = h.AddByte(c)
	}
	return h
}
