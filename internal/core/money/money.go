// Package money owns amounts of money and the one rule that turns tokens into them. Amounts are whole
// nano-dollars (USD), prices are nano-dollars per million tokens (Price), both int64, so that every sum
// is exact; they are read and written as decimal text, never through a float.
//
// The rounding rule, the only one: a call's cost is its input tokens times the input price plus its
// output tokens times the output price, divided by a million, rounded up to the next whole nano-dollar
// (Rates.Cost). Everything else (a request's cost, a key's spend, a day's total) is a sum of those
// whole amounts, and exact.
package money

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// USD is an amount of US dollars in nano-dollars (1e-9 dollars).
type USD int64

// Units of USD.
const (
	NanoDollar USD = 1
	Dollar     USD = 1_000_000_000
	// Max is the largest amount: about 9.2 billion dollars.
	Max USD = math.MaxInt64
)

// decimals is how many digits after the point an amount or a price keeps.
const decimals = 9

// ErrPrecision is returned for a decimal with more digits after the point than a nano-dollar holds.
var ErrPrecision = errors.New("more than 9 digits after the decimal point")

// ErrRange is returned for a decimal too large for an int64 of nano-dollars.
var ErrRange = errors.New("out of range")

// Dollars returns whole dollars as an amount.
func Dollars(n int64) USD { return USD(n) * Dollar }

// String writes the amount as an exact decimal of dollars with no trailing zeros: 0.075, 12, -0.000000001.
func (a USD) String() string { return format(int64(a)) }

// MarshalJSON writes the amount as an exact decimal JSON number of dollars.
func (a USD) MarshalJSON() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalJSON reads dollars from a JSON number or a decimal string, exactly.
func (a *USD) UnmarshalJSON(raw []byte) error {
	n, err := parseJSON(raw)
	*a = USD(n)
	return err
}

// Parse reads an exact decimal of dollars ("0.075", "12", "1e-3" is refused: no exponents).
func Parse(s string) (USD, error) {
	n, err := parse(s)
	return USD(n), err
}

// Price is a price in nano-dollars per million tokens: a price of 0.15 dollars per million tokens is
// Price(150_000_000).
type Price int64

// PerMillionDollar is a price of one dollar per million tokens.
const PerMillionDollar = Price(Dollar)

// String writes the price as an exact decimal of dollars per million tokens.
func (p Price) String() string { return format(int64(p)) }

// MarshalJSON writes the price as an exact decimal JSON number of dollars per million tokens.
func (p Price) MarshalJSON() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalJSON reads dollars per million tokens from a JSON number or a decimal string, exactly.
func (p *Price) UnmarshalJSON(raw []byte) error {
	n, err := parseJSON(raw)
	*p = Price(n)
	return err
}

// ParsePrice reads an exact decimal of dollars per million tokens.
func ParsePrice(s string) (Price, error) {
	n, err := parse(s)
	return Price(n), err
}

// ParsePerToken reads an exact decimal of dollars per token, as providers' model listings give prices.
func ParsePerToken(s string) (Price, error) {
	n, err := parseScaled(s, decimals+6)
	return Price(n), err
}

// PerToken writes the price as an exact decimal of dollars per token (a millionth of the price).
func (p Price) PerToken() string { return formatScaled(int64(p), decimals+6) }

// Rates are a model's prices for input and output tokens, and for the input tokens a provider read
// from or wrote to its prompt cache where the model prices them apart (HasCacheRead, HasCacheWrite);
// without such a price those tokens pay In.
type Rates struct {
	In, Out                     Price
	CacheRead, CacheWrite       Price
	HasCacheRead, HasCacheWrite bool
}

// Free reports whether both prices are zero.
func (r Rates) Free() bool { return r.In == 0 && r.Out == 0 }

// Tokens are a call's usage as it is priced: In counts every input token, CacheRead and CacheWrite
// those among them the provider read from or wrote to its prompt cache.
type Tokens struct {
	In, CacheRead, CacheWrite, Out int64
}

// Cost is the cost of a call of in input and out output tokens: (in*In + out*Out) / 1e6, rounded up to
// the next nano-dollar, and Max when it would not fit. Negative counts count as zero.
func (r Rates) Cost(in, out int64) USD { return r.Charge(Tokens{In: in, Out: out}) }

// Charge is the cost of a call's tokens: its uncached input at In, its cache reads and writes at
// their prices (In without one), its output at Out, over 1e6, rounded up to the next nano-dollar once,
// and Max when it would not fit. Negative counts count as zero; cached tokens beyond the input leave
// no plain input (each is charged as cached).
func (r Rates) Charge(t Tokens) USD {
	read, write := max(t.CacheRead, 0), max(t.CacheWrite, 0)
	plain := max(t.In, 0) - read - write
	if plain < 0 {
		plain = 0
	}
	readRate, writeRate := r.In, r.In
	if r.HasCacheRead {
		readRate = r.CacheRead
	}
	if r.HasCacheWrite {
		writeRate = r.CacheWrite
	}
	var hi, lo uint64
	for _, term := range [4][2]int64{{plain, int64(r.In)}, {read, int64(readRate)}, {write, int64(writeRate)}, {max(t.Out, 0), int64(r.Out)}} {
		h, l := mul(term[0], term[1])
		var carry, overflow uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi, overflow = bits.Add64(hi, h, carry)
		if overflow != 0 {
			return Max
		}
	}
	if hi >= 1_000_000 { // the quotient would not fit in 64 bits
		return Max
	}
	q, rem := bits.Div64(hi, lo, 1_000_000)
	if rem != 0 {
		q++
	}
	if q > uint64(Max) {
		return Max
	}
	return USD(q)
}

// MaxInput is the highest price an input token may pay: In, or a cache write's when it is higher.
func (r Rates) MaxInput() Price {
	p := r.In
	if r.HasCacheWrite {
		p = max(p, r.CacheWrite)
	}
	if r.HasCacheRead {
		p = max(p, r.CacheRead)
	}
	return p
}

// mul multiplies two non-negative int64s into 128 bits; a negative price counts as zero.
func mul(a, b int64) (hi, lo uint64) {
	if a <= 0 || b <= 0 {
		return 0, 0
	}
	return bits.Mul64(uint64(a), uint64(b))
}

// Add returns a+b, saturating at Max (and at -Max the other way): a sum of amounts never wraps.
func Add(a, b USD) USD {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return Max
	case a < 0 && b < 0 && s >= 0:
		return -Max
	}
	return s
}

// format writes n/1e9 as an exact decimal with no trailing zeros.
func format(n int64) string { return formatScaled(n, decimals) }

// formatScaled writes n/10^scale as an exact decimal with no trailing zeros.
func formatScaled(n int64, scale int) string {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = -u
	}
	digits := strconv.FormatUint(u, 10)
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-scale], strings.TrimRight(digits[len(digits)-scale:], "0")
	out := whole
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

// parseJSON reads a JSON number or a JSON string holding a decimal.
func parseJSON(raw []byte) (int64, error) {
	s := strings.TrimSpace(string(raw))
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	return parse(s)
}

// parse reads an exact decimal into units of 1e-9: an optional minus sign, digits with at most one
// decimal point, and an optional exponent (1e-7, as JSON encoders write small numbers). The value
// must be a whole number of units: what it reads is what was meant, never a rounding of it.
func parse(s string) (int64, error) { return parseScaled(s, decimals) }

// parseScaled reads an exact decimal into units of 10^-scale.
func parseScaled(s string, scale int) (int64, error) {
	t, neg := strings.CutPrefix(s, "-")
	n, err := parseUnits(t, scale)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal amount: %w", clip(s), err)
	}
	if neg {
		return -int64(n), nil
	}
	return int64(n), nil
}

// parseUnits reads an exact decimal without a sign into units of 10^-scale, at most math.MaxInt64.
func parseUnits(t string, scale int) (uint64, error) {
	mant, exp, err := cutExponent(t)
	if err != nil {
		return 0, err
	}
	whole, frac, _ := strings.Cut(mant, ".")
	if whole == "" && frac == "" || !digitsOnly(whole) || !digitsOnly(frac) {
		return 0, errors.New("want digits, with at most one decimal point")
	}
	digits, err := movePoint(whole, frac, exp+scale)
	if err != nil {
		return 0, err
	}
	if digits == "" {
		return 0, nil
	}
	if len(digits) > 19 {
		return 0, ErrRange
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > math.MaxInt64 {
		return 0, ErrRange
	}
	return n, nil
}

// cutExponent cuts a decimal's exponent off: "1.5e3" is "1.5" and 3.
func cutExponent(t string) (mant string, exp int, err error) {
	i := strings.IndexAny(t, "eE")
	if i < 0 {
		return t, 0, nil
	}
	exp, err = strconv.Atoi(strings.TrimPrefix(t[i+1:], "+"))
	if err != nil || exp < -40 || exp > 40 {
		return "", 0, errors.New("its exponent must be a whole number from -40 to 40")
	}
	return t[:i], exp, nil
}

// movePoint moves the decimal point of whole.frac by places to the right, and returns the digits of
// the whole number it makes, without leading zeros ("" for zero). Digits other than zeros left after
// the point are ErrPrecision; a number far beyond 19 digits is ErrRange.
func movePoint(whole, frac string, places int) (string, error) {
	digits := strings.TrimLeft(whole+frac, "0")
	point := len(whole) + places - (len(whole+frac) - len(digits))
	if point < len(digits) {
		if strings.TrimRight(digits[max(point, 0):], "0") != "" {
			return "", ErrPrecision
		}
		return digits[:max(point, 0)], nil
	}
	if point-len(digits) > 19 {
		return "", ErrRange
	}
	return digits + strings.Repeat("0", point-len(digits)), nil
}

func digitsOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
