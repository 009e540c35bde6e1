package consensus

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// SynthesisStream reads an arbiter's verdict as the arbiter writes it and gives back, piece by piece,
// the text of its "answer": the synthesis a rotating arbiter writes, which a caller can read before
// the verdict is whole. It skips whatever precedes the verdict's object (models put prose or a fence
// before it), follows the object's nesting so that only its own "answer" key counts, and decodes the
// string's escapes across pieces. The zero value is ready.
type SynthesisStream struct {
	started, done  bool
	depth          int
	inString       bool
	isKey, isValue bool // the string being read is a key at depth 1, or the answer's value
	key            strings.Builder
	lastKey        string
	afterColon     bool
	pending        string // an escape cut by the end of a piece
	high           rune   // a high surrogate waiting for its pair
}

// Feed reads the next piece of the verdict and returns the answer's text it completes.
func (s *SynthesisStream) Feed(piece string) string {
	if s.done {
		return ""
	}
	var out strings.Builder
	text := s.pending + piece
	s.pending = ""
	for i := 0; i < len(text); {
		n, stop := s.step(&out, text[i:])
		if stop {
			break
		}
		i += n
	}
	return out.String()
}

// step reads what starts text (a byte before the verdict's object, a character of a string, or a byte
// of the object's structure) and returns how many bytes it took. It stops when the verdict's object
// or its answer is whole, or when the rest of text must wait for the next piece (kept in pending).
func (s *SynthesisStream) step(out *strings.Builder, text string) (n int, stop bool) {
	switch {
	case !s.started:
		if text[0] == '{' {
			s.started, s.depth = true, 1
		}
		return 1, false
	case s.inString:
		return s.stringStep(out, text)
	}
	return 1, s.structure(text[0])
}

// stringStep reads the character, or the escape, that starts text inside a string, and the quote that
// ends the string.
func (s *SynthesisStream) stringStep(out *strings.Builder, text string) (n int, stop bool) {
	switch text[0] {
	case '\\':
		r, size, ok := unescape(text)
		if !ok {
			s.pending = text // the rest of the escape comes with the next piece
			return 0, true
		}
		s.write(out, r)
		return size, false
	case '"':
		s.endString()
		return 1, s.done
	}
	r, size := utf8.DecodeRuneInString(text)
	if r == utf8.RuneError && size == 1 && !utf8.FullRuneInString(text) {
		s.pending = text // a character cut by the end of a piece
		return 0, true
	}
	s.write(out, r)
	return size, false
}

// structure reads a byte outside strings: it follows the nesting and whether a string at depth 1 is a
// key or the answer's value, and reports whether the byte closed the verdict's object.
func (s *SynthesisStream) structure(c byte) (closed bool) {
	switch c {
	case '"':
		s.inString = true
		s.isKey = s.depth == 1 && !s.afterColon
		s.isValue = s.depth == 1 && s.afterColon && s.lastKey == "answer"
		s.key.Reset()
	case ':':
		s.afterColon = s.depth == 1
	case ',':
		if s.depth == 1 {
			s.afterColon = false
		}
	case '{', '[':
		s.depth++
	case '}', ']':
		s.depth--
		if s.depth == 0 {
			s.done = true
			return true
		}
	}
	return false
}

// write adds a character of the string being read: to the key, or to the answer's text.
func (s *SynthesisStream) write(out *strings.Builder, r rune) {
	if s.high != 0 {
		if utf16.IsSurrogate(r) {
			r = utf16.DecodeRune(s.high, r)
		} else {
			s.emit(out, utf8.RuneError)
		}
		s.high = 0
	} else if r >= 0xD800 && r < 0xDC00 {
		s.high = r
		return
	}
	s.emit(out, r)
}

func (s *SynthesisStream) emit(out *strings.Builder, r rune) {
	switch {
	case s.isKey:
		s.key.WriteRune(r)
	case s.isValue:
		out.WriteRune(r)
	}
}

func (s *SynthesisStream) endString() {
	s.inString = false
	switch {
	case s.isKey:
		s.lastKey = s.key.String()
	case s.isValue:
		s.done = true // the answer is whole: nothing after it is the synthesis
	}
	s.isKey, s.isValue = false, false
}

// unescape decodes the JSON escape that starts text, returning its rune and length, or ok false when
// text holds only part of it.
func unescape(text string) (r rune, n int, ok bool) {
	if len(text) < 2 {
		return 0, 0, false
	}
	switch text[1] {
	case 'n':
		return '\n', 2, true
	case 't':
		return '\t', 2, true
	case 'r':
		return '\r', 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'u':
		if len(text) < 6 {
			return 0, 0, false
		}
		v, err := strconv.ParseUint(text[2:6], 16, 16)
		if err != nil {
			return utf8.RuneError, 6, true
		}
		return rune(v), 6, true
	}
	return rune(text[1]), 2, true // \" \\ \/ and anything else as itself
}
