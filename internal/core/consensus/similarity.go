package consensus

import (
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/conclave-ai/conclave/internal/platform/fnv1a"
)

// shortWords is the length (in words, after normalisation) up to which an answer is categorical: two
// such answers agree exactly when their normal forms are equal.
const shortWords = 4

// term is a hashed word with its count in a text.
type term struct {
	hash  uint64
	count float64
}

// keyWords is the length in words up to which an answer's normal form is computed for exact
// comparison; longer answers are compared by their word counts only.
const keyWords = 32

// analysed is a response prepared for comparison.
type analysed struct {
	key   string // Normalize(text) for answers of up to keyWords words, else empty
	short bool
	terms []term // sorted by hash; empty for short answers
	norm  float64
}

// analyse prepares an answer of a kind for comparison: categorical kinds by their key alone, free text
// by its normal form when short and its word counts otherwise.
func analyse(text string, kind Kind) analysed {
	var a analysed
	if kind != Text && kind != "" {
		return analysed{key: keyOf(kind, text), short: true}
	}
	var stack [256]uint64
	hashes := stack[:0]
	if est := len(text)/5 + 1; est > len(stack) {
		hashes = make([]uint64, 0, est)
	}
	hashes = appendWordHashes(hashes, text)
	if len(hashes) <= keyWords {
		a.key = Normalize(text)
		a.short = strings.Count(a.key, " ")+1 <= shortWords
		if a.short {
			return a
		}
	}
	slices.Sort(hashes)
	a.terms = make([]term, 0, len(hashes))
	for _, h := range hashes {
		if n := len(a.terms); n > 0 && a.terms[n-1].hash == h {
			a.terms[n-1].count++
		} else {
			a.terms = append(a.terms, term{hash: h, count: 1})
		}
	}
	for _, t := range a.terms {
		a.norm += t.count * t.count
	}
	a.norm = math.Sqrt(a.norm)
	return a
}

// appendWordHashes appends the hash of every lower-cased word (a run of letters and digits) of text:
// FNV-1a over the word's lower-cased bytes, computed as the text is read, without copying the word.
func appendWordHashes(dst []uint64, text string) []uint64 {
	h, inWord := fnv1a.Offset, false
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			if l := wordByte[c]; l != 0 {
				h, inWord = h.AddByte(l), true
			} else if inWord {
				dst, h, inWord = append(dst, uint64(h)), fnv1a.Offset, false
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			if inWord {
				dst, h, inWord = append(dst, uint64(h)), fnv1a.Offset, false
			}
			continue
		}
		var buf [utf8.UTFMax]byte
		h, inWord = h.AddBytes(buf[:utf8.EncodeRune(buf[:], unicode.ToLower(r))]), true
	}
	if inWord {
		dst = append(dst, uint64(h))
	}
	return dst
}

// wordByte maps an ASCII byte of a word to its lower case, and any other ASCII byte to 0.
var wordByte = func() (t [utf8.RuneSelf]byte) {
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c
	}
	for c := byte('a'); c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = c, c
	}
	return t
}()

// similarity in [0, 1]: exact agreement of normal forms when either answer is categorical, otherwise
// the cosine of the word-count vectors (a bag-of-words overlap that is cheap, deterministic and good
// enough to tell agreeing free-text answers from diverging ones).
func similarity(a, b *analysed) float64 {
	if a.key != "" && a.key == b.key || a.key == "" && b.key == "" && a.norm == 0 && b.norm == 0 {
		return 1
	}
	if a.short || b.short || a.norm == 0 || b.norm == 0 {
		return 0
	}
	dot := 0.0
	i, j := 0, 0
	for i < len(a.terms) && j < len(b.terms) {
		switch {
		case a.terms[i].hash < b.terms[j].hash:
			i++
		case a.terms[i].hash > b.terms[j].hash:
			j++
		default:
			dot += a.terms[i].count * b.terms[j].count
			i++
			j++
		}
	}
	return dot / (a.norm * b.norm)
}

// Similarity compares two free-text answers the way the strategies do.
func Similarity(x, y string) float64 {
	a, b := analyse(x, Text), analyse(y, Text)
	return similarity(&a, &b)
}
