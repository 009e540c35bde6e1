package consensus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseJSON reads text as exactly one JSON value, numbers kept as written (json.Number) so that no
// precision is lost before they are compared. Surrounding white space is allowed, anything else around
// the value is not: the caller asked for JSON and gets the answer as the model wrote it.
func ParseJSON(text string) (any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not JSON: more text after the value")
	}
	return v, nil
}

// CanonicalJSON writes a parsed JSON value (as ParseJSON returns it) in one form for all the ways of
// writing it: object keys sorted, no white space, numbers by value (1, 1.0 and 1e0 are "1"), strings
// with only the escapes JSON requires. Two answers agree exactly when their canonical forms are equal.
func CanonicalJSON(v any) string {
	var b bytes.Buffer
	writeCanonical(&b, v)
	return b.String()
}

func writeCanonical(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case json.Number:
		b.WriteString(canonicalNumber(string(x)))
	case float64: // a value built in Go rather than parsed
		b.WriteString(canonicalNumber(strconv.FormatFloat(x, 'g', -1, 64)))
	case string:
		writeString(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			writeCanonical(b, x[k])
		}
		b.WriteByte('}')
	default:
		// Not a value ParseJSON makes; written so that it can never equal one that is.
		fmt.Fprintf(b, "%q", fmt.Sprint(x))
	}
}

// writeString writes s as a JSON string, escaping only what JSON requires: the same text always has
// the same form, whichever escapes the model used.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteString("\ufffd") // as the decoder reads an invalid byte
			} else {
				b.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
		i++
	}
	b.WriteByte('"')
}

// canonicalNumber writes a JSON number literal by its exact decimal value, without going through a
// float (which would make two different large integers equal): digits without leading or trailing
// zeros and an exponent, written plainly from 1e-6 to 1e21 and in exponent form outside, as
// JavaScript does. A literal it cannot read is kept as written.
func canonicalNumber(lit string) string {
	neg, digits, exp, ok := decimalParts(lit)
	switch {
	case !ok:
		return lit
	case digits == "":
		return "0" // -0 and 0.000 included
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	writeDecimal(&b, digits, exp)
	return b.String()
}

// decimalParts reads a JSON number literal as its sign and its value, digits × 10^exp, the digits
// without leading or trailing zeros ("" for zero). It is not ok when the exponent is not a number or is
// beyond ±2^20.
func decimalParts(lit string) (neg bool, digits string, exp int, ok bool) {
	s, neg := strings.CutPrefix(lit, "-")
	mant := s
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1<<20 || e < -(1<<20) {
			return false, "", 0, false
		}
		mant, exp = s[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits = strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	return neg, digits, exp, true
}

// writeDecimal writes digits × 10^exp (digits not empty, without leading or trailing zeros): plainly
// from 1e-6 to 1e21 and in exponent form outside.
func writeDecimal(b *strings.Builder, digits string, exp int) {
	// point is where the decimal point falls in digits.
	point := len(digits) + exp
	switch {
	case exp >= 0 && point <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", exp))
	case exp < 0 && point > 0:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	case exp < 0 && point > -6:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
	default:
		b.WriteString(digits[:1])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if point-1 > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(point - 1))
	}
}
