package money

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestParseAndFormat(t *testing.T) {
	for _, c := range []struct {
		desc, in string
		want     USD
		out      string
	}{
		{"a whole amount", "12", 12 * Dollar, "12"},
		{"cents", "0.075", 75_000_000, "0.075"},
		{"a nano-dollar", "0.000000001", 1, "0.000000001"},
		{"trailing zeros past nine places", "0.0750000000000", 75_000_000, "0.075"},
		{"an exponent as JSON encoders write it", "1e-7", 100, "0.0000001"},
		{"an exponent with a point", "2.5E+2", 250 * Dollar, "250"},
		{"negative", "-1.5", -1_500_000_000, "-1.5"},
		{"zero", "0", 0, "0"},
		{"leading zeros", "007.10", 7_100_000_000, "7.1"},
		{"the largest whole dollars", "9223372036.854775807", Max, "9223372036.854775807"},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("%s: Parse(%q) = %d, %v; want %d", c.desc, c.in, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.out {
			t.Errorf("%s: String() = %q, want %q", c.desc, s, c.out)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		desc, in string
		want     error
	}{
		{"a tenth of a nano-dollar", "0.0000000001", ErrPrecision},
		{"an exponent below a nano-dollar", "1e-10", ErrPrecision},
		{"too large", "9223372037", ErrRange},
		{"far too large", "1e30", ErrRange},
		{"empty", "", nil},
		{"a point alone", ".", nil},
		{"letters", "1.2x", nil},
		{"two points", "1.2.3", nil},
		{"a plus sign", "+1", nil},
		{"spaces", " 1", nil},
		{"an absurd exponent", "1e999", nil},
		{"NaN", "NaN", nil},
	} {
		_, err := Parse(c.in)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Parse(%q) = %v, want an error %v", c.desc, c.in, err, c.want)
		}
	}
}

func TestJSON(t *testing.T) {
	var v struct {
		A USD   `json:"a"`
		B USD   `json:"b"`
		P Price `json:"p"`
	}
	if err := json.Unmarshal([]byte(`{"a": 0.1, "b": "0.2", "p": 0.15}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A+v.B != 300_000_000 || v.P != 150_000_000 {
		t.Fatalf("read %d + %d, price %d", v.A, v.B, v.P)
	}
	v.A += v.B
	raw, _ := json.Marshal(v)
	// 0.1 + 0.2 as floats is 0.30000000000000004: amounts add as integers.
	if string(raw) != `{"a":0.3,"b":0.2,"p":0.15}` {
		t.Fatalf("wrote %s", raw)
	}
	if err := json.Unmarshal([]byte(`{"a": 0.00000000001}`), &v); !errors.Is(err, ErrPrecision) {
		t.Fatalf("a sub-nano amount was read: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"a": true}`), &v); err == nil {
		t.Fatal("a boolean was read as an amount")
	}
}

func TestCost(t *testing.T) {
	for _, c := range []struct {
		desc    string
		rates   Rates
		in, out int64
		want    USD
	}{
		{"nothing used", Rates{In: 150_000_000, Out: 600_000_000}, 0, 0, 0},
		{"exact: a million tokens at $0.15", Rates{In: 150_000_000}, 1_000_000, 0, 150_000_000},
		{"one token at $0.15 per million is 150 nano-dollars", Rates{In: 150_000_000}, 1, 0, 150},
		{"a fraction rounds up once per call", Rates{In: 1, Out: 1}, 1, 1, 1},
		{"in and out add before rounding", Rates{In: 500_000, Out: 500_000}, 1, 1, 1},
		{"free", Rates{}, 1000, 1000, 0},
		{"negative counts count as nothing", Rates{In: 1_000_000}, -5, 0, 0},
		{"too large saturates", Rates{In: math.MaxInt64, Out: math.MaxInt64}, math.MaxInt64, math.MaxInt64, Max},
		{"large but exact", Rates{In: 100_000 * 1_000_000_000}, 1_000_000_000, 0, 100_000_000 * Dollar},
	} {
		if got := c.rates.Cost(c.in, c.out); got != c.want {
			t.Errorf("%s: Cost(%d, %d) = %d, want %d", c.desc, c.in, c.out, got, c.want)
		}
	}
}

// TestCharge prices cached input apart: Anthropic's prices for claude-3-5-haiku ($0.80 in, $0.08 a
// cache read, $1.00 a cache write, $4 out per million) on a call that read 2,000 tokens from the cache
// and wrote 1,000 of its 3,500 input tokens.
func TestCharge(t *testing.T) {
	haiku := Rates{In: 800_000_000, Out: 4_000_000_000, CacheRead: 80_000_000, CacheWrite: 1_000_000_000, HasCacheRead: true, HasCacheWrite: true}
	for _, c := range []struct {
		desc   string
		rates  Rates
		tokens Tokens
		want   USD
	}{
		// 500 plain at 0.8 (400,000) + 2,000 read at 0.08 (160,000) + 1,000 written at 1.00 (1,000,000) + 100 out at 4 (400,000)
		{"plain, read, written and output each at its price", haiku, Tokens{In: 3500, CacheRead: 2000, CacheWrite: 1000, Out: 100}, 1_960_000},
		{"no cached tokens is Cost", haiku, Tokens{In: 3500, Out: 100}, haiku.Cost(3500, 100)},
		{"without cache prices, cached tokens pay In", Rates{In: 800_000_000, Out: 4_000_000_000}, Tokens{In: 3500, CacheRead: 2000, CacheWrite: 1000, Out: 100},
			Rates{In: 800_000_000, Out: 4_000_000_000}.Cost(3500, 100)},
		{"a free cache read is free", Rates{In: 1_000_000_000, HasCacheRead: true}, Tokens{In: 10, CacheRead: 10}, 0},
		{"cached tokens beyond the input leave no plain input", haiku, Tokens{In: 10, CacheRead: 20}, 1600},
		{"the sum rounds up once", Rates{In: 1, CacheRead: 1, HasCacheRead: true}, Tokens{In: 2, CacheRead: 1}, 1},
		{"too large saturates", Rates{In: math.MaxInt64, CacheWrite: math.MaxInt64, HasCacheWrite: true}, Tokens{In: math.MaxInt64, CacheWrite: math.MaxInt64 / 2}, Max},
	} {
		if got := c.rates.Charge(c.tokens); got != c.want {
			t.Errorf("%s: Charge(%+v) = %d, want %d", c.desc, c.tokens, got, c.want)
		}
	}
	if haiku.MaxInput() != 1_000_000_000 || (Rates{In: 5}).MaxInput() != 5 {
		t.Error("the most an input token may pay is a cache write's price where it is higher than In")
	}
}

func TestPerToken(t *testing.T) {
	if got := Price(150_000_000).PerToken(); got != "0.00000015" {
		t.Fatalf("$0.15 per million tokens is %s per token", got)
	}
	if p, err := ParsePerToken("0.000003"); err != nil || p != 3_000_000_000 {
		t.Fatalf("$0.000003 per token read as %d (%v), want $3 per million", p, err)
	}
	if got := Price(0).PerToken(); got != "0" {
		t.Fatalf("free is %s per token", got)
	}
}

func TestAddSaturates(t *testing.T) {
	if Add(Max, 1) != Max || Add(-Max, -2) != -Max || Add(2, 3) != 5 {
		t.Fatal("Add wraps")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0.075", "1e-7", "12", "-3.5", "9223372036.854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err != nil {
			return
		}
		// What is read writes back to the same amount.
		b, err := Parse(a.String())
		if err != nil || a != b {
			t.Fatalf("%q read as %d, written %q, read back %d (%v)", s, a, a.String(), b, err)
		}
	})
}
