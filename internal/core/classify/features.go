package classify

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/conclave-ai/conclave/internal/platform/fnv1a"
)

// The model reads a task as a set of hashed features, each a bucket of a fixed-size table:
//   - stemmed words and pairs of adjacent words, stop words left out;
//   - character 3- and 4-grams of every word with its boundaries ("<sql", "sql>"), which carry
//     inflections, identifiers, misspellings and languages whose words share roots with the training
//     data's;
//   - in Chinese, Japanese and Korean, each character is a word, so that pairs of them are bigrams;
//   - the punctuation a task uses ("{", ";", "=", "`"), which tells pasted code, logs and prose apart;
//   - the task's length, as a bucket of its word count;
//   - for each category, whether one of its keywords occurs: the model weighs the keyword signals
//     instead of a fixed bonus;
//   - for a word of another language that asks what an English word asks (glosses), that English
//     word, so that what the model learned of it carries over.
//
// Hashes are FNV-1a, stable across processes and machines: the weights are trained ahead of time.

// featuresVersion numbers the way tasks are read into features; a change to it must bump it, so that
// weights trained the old way are refused (TestShippedWeightsAreCurrent) until make classifier runs.
const featuresVersion = 3

// Feature hashing bounds.
const (
	// maxWords bounds the words read from a task: past them a long paste adds little but time.
	maxWords = 600
	// maxGramRunes bounds the runes of a word whose character n-grams are taken.
	maxGramRunes = 24
	// headWords and tailWords are how many words of a task's start and end also count as the ask's: a
	// long task states its context in the middle and what it wants first or last.
	headWords, tailWords = 12, 16
	// tailBytes is how much of a task's end is read for its last words, however long the task.
	tailBytes = 400
)

// Feature kinds, mixed into each hash so that a word and a character n-gram never share a bucket by
// construction.
const (
	kindWord byte = iota + 1
	kindPair
	kindGram
	kindPunct
	kindLength
	kindKeyword
	kindHead
	kindTail
)

func featureHash(kind byte, b []byte) uint64 {
	return uint64(fnv1a.Offset.AddByte(kind).AddBytes(b))
}

// extractor is the scratch space of one feature extraction.
type extractor struct {
	word   []byte   // the current word, lower-cased
	stem   []byte   // its stem
	pair   []byte   // the previous stem, a separator, this stem
	gram   []byte   // "<" + word + ">"
	bounds []int    // rune starts in gram
	hashes []uint64 // word and pair hashes: keywords are looked up among them
	at     []int32  // per hash, the index of the significant word it ends at: where a gloss stood
	feats  []uint32 // the buckets
	// seen[b] == round marks bucket b as taken in this extraction: deduplication without a sort.
	seen  []uint32
	round uint32
}

func newExtractor() *extractor {
	return &extractor{word: make([]byte, 0, 32), stem: make([]byte, 0, 32), pair: make([]byte, 0, 64),
		gram: make([]byte, 0, 64), bounds: make([]int, 0, 64), hashes: make([]uint64, 0, 512), at: make([]int32, 0, 512), feats: make([]uint32, 0, 2048)}
}

// features returns the distinct buckets of text's features, in a slice owned by x.
func (x *extractor) features(text string, lex lexicon, dim uint32) []uint32 {
	x.feats, x.hashes, x.at, x.pair = x.feats[:0], x.hashes[:0], x.at[:0], x.pair[:0]
	if len(x.seen) != int(dim) {
		x.seen, x.round = make([]uint32, dim), 0
	}
	x.round++
	if x.round == 0 { // wrapped: old marks could pass for this round's
		clear(x.seen)
		x.round = 1
	}
	add := func(h uint64) {
		if b := uint32(h % uint64(dim)); x.seen[b] != x.round {
			x.seen[b] = x.round
			x.feats = append(x.feats, b)
		}
	}
	words, significant := 0, 0 // every word read; those not stop words
	var punct [128]bool
	flush := func() {
		if len(x.word) == 0 {
			return
		}
		words++
		x.grams(add)
		if !stopWords[string(x.word)] {
			x.stem = append(x.stem[:0], x.word...)
			x.stem = stem(x.stem)
			h := featureHash(kindWord, x.stem)
			add(h)
			if significant < headWords {
				add(featureHash(kindHead, x.stem))
			}
			x.hashes, x.at = append(x.hashes, h), append(x.at, int32(significant))
			if len(x.pair) > 0 {
				x.pair = append(append(x.pair, ' '), x.stem...)
				p := featureHash(kindPair, x.pair)
				add(p)
				x.hashes, x.at = append(x.hashes, p), append(x.at, int32(significant))
			}
			significant++
			x.pair = append(x.pair[:0], x.stem...)
		}
		x.word = x.word[:0]
	}
	x.eachWord(text, func() bool { flush(); return words < maxWords }, func(c byte) { punct[c] = true })
	x.tail(text, add)
	for c, seen := range punct {
		if seen {
			add(featureHash(kindPunct, []byte{byte(c)}))
		}
	}
	add(featureHash(kindLength, []byte{lengthBucket(words)}))
	x.keywords(lex, words, significant, add)
	return x.feats
}

// keywords adds the keyword features of the words and pairs read (x.hashes) and, for those the
// lexicon glosses, the English word's own features. A gloss is appended to the hashes, so that the
// loop reads its English word's keywords in turn; it is also a first or last word where it stood
// among them (of words read, significant not stop words).
func (x *extractor) keywords(lex lexicon, words, significant int, add func(uint64)) {
	for i := 0; i < len(x.hashes); i++ {
		l := lex[x.hashes[i]]
		for _, hit := range l.hits {
			add(featureHash(kindKeyword, []byte{byte(hit.category)}))
		}
		for _, g := range l.glosses {
			add(g.word)
			for _, h := range g.grams {
				add(h)
			}
			at := int(x.at[i])
			if at < headWords {
				add(g.head)
			}
			if at >= significant-tailWords && words < maxWords { // the end read is the task's
				add(g.tail)
			}
			x.hashes, x.at = append(x.hashes, g.word), append(x.at, x.at[i])
		}
	}
}

// eachWord calls word after each word of text has been read into x.word (lower-cased) until it
// returns false, and punct for each ASCII punctuation character.
func (x *extractor) eachWord(text string, word func() bool, punct func(byte)) {
	x.word = x.word[:0]
	for i := 0; i < len(text); {
		c := text[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(text[i:])
			i += size
			if !x.readRune(r, word) {
				return
			}
			continue
		}
		i++
		switch {
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
			x.word = append(x.word, c)
		case 'A' <= c && c <= 'Z':
			x.word = append(x.word, c+'a'-'A')
		default:
			if len(x.word) > 0 && !word() {
				return
			}
			if c > ' ' {
				punct(c)
			}
		}
	}
	if len(x.word) > 0 {
		word()
	}
}

// readRune reads a character beyond ASCII into x.word: one read as a word by itself ends the word
// before it and is a word of its own; one that belongs to a word is added lower-cased; any other ends
// the word. It calls word at each word's end, and returns false once word does.
func (x *extractor) readRune(r rune, word func() bool) bool {
	switch {
	case charWord(r):
		if len(x.word) > 0 && !word() {
			return false
		}
		x.word = utf8.AppendRune(x.word, r)
		return word()
	case inWord(r):
		x.word = utf8.AppendRune(x.word, unicode.ToLower(r))
		return true
	}
	return len(x.word) == 0 || word()
}

// inWord reports whether r belongs to a word: letters, digits, and the marks that Devanagari, Thai
// and other scripts write their vowels with (a word split at each would be read as its fragments).
func inWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) }

// charWord reports whether r is read as a word by itself: Chinese and Japanese are written without
// spaces, and a Korean word is a stem and its particles run together, so a run of them would be one
// long word that no other task shares. One character a word, their pairs are the scripts' bigrams,
// which is how their words are spelt.
func charWord(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// tail adds the last tailWords words of text (stop words left out) as features of their own kind.
func (x *extractor) tail(text string, add func(uint64)) {
	start := max(len(text)-tailBytes, 0)
	for start > 0 && !utf8.RuneStart(text[start]) {
		start++
	}
	if start > 0 { // a word cut at the window's edge is not a word
		if i := strings.IndexFunc(text[start:], func(r rune) bool { return !inWord(r) }); i >= 0 {
			start += i
		}
	}
	var ring [tailWords]uint64
	n := 0
	x.eachWord(text[start:], func() bool {
		if !stopWords[string(x.word)] {
			x.stem = stem(append(x.stem[:0], x.word...))
			ring[n%tailWords] = featureHash(kindTail, x.stem)
			n++
		}
		x.word = x.word[:0]
		return true
	}, func(byte) {})
	for _, h := range ring[:min(n, tailWords)] {
		add(h)
	}
}

// grams adds the character 3- and 4-grams of the current word with its boundaries.
func (x *extractor) grams(add func(uint64)) {
	x.gram = append(append(append(x.gram[:0], '<'), x.word...), '>')
	x.bounds = x.bounds[:0]
	for i := 0; i < len(x.gram) && len(x.bounds) < maxGramRunes+2; {
		x.bounds = append(x.bounds, i)
		_, size := utf8.DecodeRune(x.gram[i:])
		i += size
	}
	end := len(x.gram)
	if len(x.bounds) == maxGramRunes+2 {
		end = x.bounds[len(x.bounds)-1]
	}
	x.bounds = append(x.bounds, end)
	runes := len(x.bounds) - 1
	for n := 3; n <= 4; n++ {
		for s := 0; s+n <= runes; s++ {
			add(featureHash(kindGram, x.gram[x.bounds[s]:x.bounds[s+n]]))
		}
	}
}

// lengthBucket is a task's length class: 1–3, 4–7, 8–15 … words, doubling.
func lengthBucket(words int) byte {
	b := byte(0)
	for words > 3 && b < 10 {
		words >>= 1
		b++
	}
	return b
}

// lexeme is what a word or pair of words signals: the categories it is a keyword of, and the English
// words it is a gloss of, read as if the task had said them too.
type lexeme struct {
	hits    []keywordHit
	glosses []gloss
}

// gloss is an English word as a word of the task (kindWord) with its character n-grams, as one of its
// first words (kindHead) and as one of its last (kindTail).
type gloss struct {
	word, head, tail uint64
	grams            []uint64
}

// lexicon maps the hash of every keyword and gloss, as the extractor hashes a word or a pair, to what
// it signals.
type lexicon map[uint64]lexeme

// newLexicon builds the lexicon of the keywords and glosses.
func newLexicon() (lexicon, error) {
	lex := lexicon{}
	x := newExtractor()
	for ci, cat := range Categories {
		for _, phrase := range keywords[cat] {
			h, err := x.phraseHash(phrase)
			if err != nil {
				return nil, fmt.Errorf("keyword of %s: %w", cat, err)
			}
			l := lex[h]
			l.hits = append(l.hits, keywordHit{category: ci, phrase: phrase})
			lex[h] = l
		}
	}
	// In a fixed order, so that training on the same examples gives the same weights.
	words := slices.Sorted(maps.Keys(glosses))
	english := make(map[uint64]string, len(words))
	targets := make([]gloss, len(words))
	for i, word := range words {
		h, err := x.phraseHash(word)
		st := stem([]byte(word))
		// The head and tail hashes are the extractor's recipe for this stem; the word's own hash,
		// taken both ways, shows the stem is the one the extractor reads.
		if err != nil || len(x.hashes) != 1 || featureHash(kindWord, st) != h {
			return nil, fmt.Errorf("glossed word %q is not one significant word as the extractor reads it", word)
		}
		english[h] = word
		targets[i] = gloss{word: h, head: featureHash(kindHead, st), tail: featureHash(kindTail, st)}
		x.word = append(x.word[:0], word...)
		x.grams(func(g uint64) { targets[i].grams = append(targets[i].grams, g) })
	}
	for i, word := range words {
		for _, phrase := range glosses[word] {
			h, err := x.phraseHash(phrase)
			if err != nil {
				return nil, fmt.Errorf("gloss of %q: %w", word, err)
			}
			if w, ok := english[h]; ok { // it would be read as a gloss of itself, over and over
				return nil, fmt.Errorf("gloss %q of %q reads as the glossed word %q", phrase, word, w)
			}
			l := lex[h]
			l.glosses = append(l.glosses, targets[i])
			lex[h] = l
		}
	}
	return lex, nil
}

// phraseHash is the hash the extractor gives a phrase of one significant word, or of two (their pair).
func (x *extractor) phraseHash(phrase string) (uint64, error) {
	x.features(phrase, nil, 1)
	switch len(x.hashes) {
	case 1:
		return x.hashes[0], nil
	case 3: // two words and their pair
		return x.hashes[2], nil
	}
	return 0, fmt.Errorf("%q has no significant word or more than two", phrase)
}
