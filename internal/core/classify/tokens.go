package classify

import (
	"hash/maphash"
	"unicode"
	"unicode/utf8"
)

// Tokens are hashed, so classification allocates no strings; a bigram hashes its two unigram hashes.
var seed = maphash.MakeSeed()

var stopWords = map[string]bool{}

func init() {
	for _, w := range []string{
		"a", "an", "the", "to", "of", "and", "or", "in", "on", "at", "is", "are", "was", "be", "it", "its",
		"for", "with", "this", "that", "these", "those", "i", "we", "you", "my", "our", "me", "us", "your",
		"please", "can", "could", "would", "will", "do", "does", "so", "as", "by", "from", "if", "but",
		"have", "has", "there", "what", "which", "how", "about", "into", "just", "some", "any", "all",
	} {
		stopWords[w] = true
	}
}

// stem strips the commonest English suffixes so that "vulnerabilities", "vulnerability" and
// "summarizing", "summarize" meet. It is deliberately crude: it only has to be consistent.
func stem(w []byte) []byte {
	n := len(w)
	switch {
	case n > 5 && string(w[n-3:]) == "ies":
		w = append(w[:n-3], 'y')
	case n > 5 && string(w[n-3:]) == "ing":
		w = w[:n-3]
	case n > 4 && string(w[n-2:]) == "ed":
		w = w[:n-2]
	case n > 4 && string(w[n-2:]) == "es":
		w = w[:n-2]
	case n > 3 && w[n-1] == 's' && w[n-2] != 's':
		w = w[:n-1]
	}
	if n := len(w); n > 3 && w[n-1] == 'e' {
		w = w[:n-1] // "summarize" meets "summarizing" and "summarized"
	}
	return w
}

// appendTokens appends the unigram and bigram hashes of text to dst: lower-cased words of letters and
// digits, stop words dropped, stemmed. buf is scratch space; both grown slices are returned for reuse.
func appendTokens(dst []uint64, text string, buf []byte) ([]uint64, []byte) {
	var prev uint64
	havePrev := false
	flush := func() {
		if len(buf) > 0 && !stopWords[string(buf)] {
			h := maphash.Bytes(seed, stem(buf))
			dst = append(dst, h)
			if havePrev {
				dst = append(dst, bigram(prev, h))
			}
			prev, havePrev = h, true
		}
		buf = buf[:0]
	}
	for i := 0; i < len(text); {
		if c := text[i]; c < utf8.RuneSelf { // ASCII, most of any task: no rune to decode
			i++
			switch {
			case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
				buf = append(buf, c)
			case 'A' <= c && c <= 'Z':
				buf = append(buf, c+'a'-'A')
			default:
				flush()
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			buf = utf8.AppendRune(buf, unicode.ToLower(r))
			continue
		}
		flush()
	}
	flush()
	return dst, buf
}

func bigram(a, b uint64) uint64 { return (a*0x9E3779B97F4A7C15 ^ b) * 0xBF58476D1CE4E5B9 }

// phraseHash hashes a keyword phrase of one or two words the way appendTokens does.
func phraseHash(phrase string) (uint64, bool) {
	hs, _ := appendTokens(nil, phrase, nil)
	switch len(hs) {
	case 1:
		return hs[0], true
	case 3: // two unigrams and their bigram
		return hs[2], true
	}
	return 0, false
}
