package tokens

import (
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer/codec"
)

func TestCountsAsOpenAICounts(t *testing.T) {
	for _, c := range []struct {
		desc string
		enc  Encoding
		text string
		want int
	}{
		// OpenAI's cookbook: "tiktoken is great!" is 6 tokens in cl100k_base.
		{"the cookbook's example", Cl100k, "tiktoken is great!", 6},
		{"the same in o200k_base", O200k, "tiktoken is great!", 6},
		{"two words", O200k, "hello world", 2},
		{"Japanese, denser in o200k_base", O200k, "日本語のテキスト", 6},
		{"Japanese in cl100k_base", Cl100k, "日本語のテキスト", 8},
		{"nothing", O200k, "", 0},
	} {
		if got := Count(c.enc, c.text); got != c.want {
			t.Errorf("%s: %d tokens, want %d", c.desc, got, c.want)
		}
	}
}

func TestSchemes(t *testing.T) {
	for _, c := range []struct {
		desc, model, family string
		want                Scheme
	}{
		{"GPT-4o", "openai/gpt-4o-mini", "gpt", Scheme{O200k, 100, true}},
		{"GPT-5 without a vendor", "gpt-5", "gpt", Scheme{O200k, 100, true}},
		{"an o-series model", "openai/o3-mini", "o-series", Scheme{O200k, 100, true}},
		{"gpt-oss", "gpt-oss-120b", "gpt-oss", Scheme{O200k, 100, true}},
		{"GPT-4", "openai/gpt-4", "gpt", Scheme{Cl100k, 100, true}},
		{"GPT-3.5", "openai/gpt-3.5-turbo", "gpt", Scheme{Cl100k, 100, true}},
		{"an old embedding model", "text-embedding-ada-002", "", Scheme{Cl100k, 100, true}},
		{"Claude", "anthropic/claude-sonnet-4.5", "claude", Scheme{O200k, 125, false}},
		{"Llama", "meta-llama/llama-3.3-70b-instruct", "llama", Scheme{O200k, 110, false}},
		{"an unknown family", "local/my-model", "my-model", Scheme{O200k, DefaultPercent, false}},
	} {
		if got := For(c.model, c.family); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.desc, got, c.want)
		}
	}
}

func TestApproximationScalesUp(t *testing.T) {
	text := "Review this Python function for bugs: def average(xs): return sum(xs) / len(xs) + 1"
	base := Count(O200k, text) // 22
	for family, percent := range Approximation {
		s := For("vendor/model", family)
		got := s.Count(text)
		if want := (base*percent + 99) / 100; got != want || got < base {
			t.Errorf("%s: %d tokens, want ceil(%d x %d %%) = %d", family, got, base, percent, want)
		}
	}
	if got := (Scheme{Encoding: O200k, Percent: 125}).Scale(1); got != 2 {
		t.Errorf("one token at 125 %% is %d, want 2 (rounded up)", got)
	}
}

func TestCountsAgreeWithTheEncoder(t *testing.T) {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200) // cached: past cacheFrom
	ids, _, err := codec.NewO200kBase().Encode(long)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // counted, then read from the cache
		if got := Count(O200k, long); got != len(ids) {
			t.Fatalf("%d tokens, the encoder gives %d", got, len(ids))
		}
	}
	if Count(Cl100k, long) == 0 {
		t.Fatal("the cache mixed encodings up")
	}
}

func TestHostileTextIsBounded(t *testing.T) {
	for _, c := range []struct {
		desc string
		text string
	}{
		{"a megabyte of one letter", strings.Repeat("a", 1<<20)},
		{"a megabyte of spaces", strings.Repeat(" ", 1<<20)},
		{"a megabyte of digits", strings.Repeat("7", 1<<20)},
		{"invalid UTF-8", strings.Repeat("\xff\xfe", 1<<16)},
	} {
		n := Count(O200k, c.text)
		if n <= 0 || n > len(c.text) {
			t.Errorf("%s: %d tokens for %d bytes", c.desc, n, len(c.text))
		}
	}
}

func BenchmarkCount(b *testing.B) {
	text := "Review this Python function for bugs: def average(xs): return sum(xs) / len(xs) + 1"
	Count(O200k, text)
	b.ReportAllocs()
	for b.Loop() {
		Count(O200k, text)
	}
}
