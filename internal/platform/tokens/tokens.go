// Package tokens counts tokens as providers bill them, wherever Conclave must know a count before or
// without a provider's word: admission, a call's reservation, a key's tokens per minute, and the
// charge of a call cut before its usage came.
//
// OpenAI's models are counted exactly, with their own encodings (o200k_base for GPT-4o, GPT-4.1,
// GPT-4.5, GPT-5, the o-series and gpt-oss; cl100k_base for GPT-4 and GPT-3.5), from the tiktoken
// port github.com/tiktoken-go/tokenizer, whose vocabularies are compiled in: nothing is downloaded
// at run time. Every other model is counted with o200k_base and scaled up by its family's factor
// (Approximation), rounded up: other vendors' tokenizers split the same text into somewhat more
// tokens than o200k_base, and a count used to reserve money should err on the side of too many.
package tokens

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Encoding names a tokenizer's vocabulary.
type Encoding string

// The encodings Conclave counts with.
const (
	O200k  Encoding = "o200k_base"
	Cl100k Encoding = "cl100k_base"
)

// Scheme is how a model's tokens are counted: an encoding, and the factor its count is multiplied by
// (1 for a model that uses the encoding itself).
type Scheme struct {
	Encoding Encoding
	// Factor, in percent: 100 counts exactly.
	Percent int
	// Exact says the model's own tokenizer is the encoding.
	Exact bool
}

// Approximation is the factor, in percent of the o200k_base count, of each family whose tokenizer
// Conclave does not have. The factors lean high on purpose: vocabularies smaller than o200k_base's
// 200,000 tokens (SentencePiece vocabularies of 32,000 to 256,000) split the same text into as many
// tokens or more, and a count that reserves money should err on the side of too many; a call's real
// usage, when its provider reports it, replaces the count. Families not listed count at
// DefaultPercent.
var Approximation = map[string]int{
	"claude":    125,
	"mistral":   120,
	"mixtral":   120,
	"pixtral":   120,
	"codestral": 120,
	"devstral":  120,
	"magistral": 120,
	"gemini":    115,
	"gemma":     115,
	"llama":     110,
	"qwen":      115,
	"deepseek":  115,
}

// DefaultPercent is the factor of a family whose tokenizer is unknown.
const DefaultPercent = 125

// For returns how a model's tokens are counted, from its id and its catalog family.
func For(model, family string) Scheme {
	name := strings.ToLower(model[strings.LastIndexByte(model, '/')+1:])
	switch {
	case family == "o-series" || family == "gpt-oss" || hasAnyPrefix(name, "gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "gpt-oss",
		"text-embedding-3"):
		return Scheme{Encoding: O200k, Percent: 100, Exact: true}
	case hasAnyPrefix(name, "gpt-4", "gpt-3.5", "text-embedding-ada"):
		return Scheme{Encoding: Cl100k, Percent: 100, Exact: true}
	}
	if p, ok := Approximation[family]; ok {
		return Scheme{Encoding: O200k, Percent: p}
	}
	return Scheme{Encoding: O200k, Percent: DefaultPercent}
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Count counts the tokens of text under a scheme.
func (s Scheme) Count(text string) int {
	return s.Scale(Count(s.Encoding, text))
}

// Scale applies the scheme's factor to a count of its encoding, rounding up.
func (s Scheme) Scale(n int) int {
	if s.Percent == 100 || s.Percent <= 0 {
		return n
	}
	return int(math.Ceil(float64(n) * float64(s.Percent) / 100))
}

// Per-message framing, as OpenAI counts a chat prompt: each message costs MessageTokens beyond its
// content, and the reply is primed with ReplyTokens.
const (
	MessageTokens = 3
	ReplyTokens   = 3
	// ImageTokens is what one image is counted as: OpenAI's count of a 1024x1024 image in high detail
	// (765) rounded up to cover larger ones and other vendors' counts. Images are not decoded to be
	// measured: a count that bounds a reservation need not be exact.
	ImageTokens = 1600
)

// codecs are the encodings, built on first use (o200k_base's vocabulary takes about 40 ms).
var codecs = struct {
	o200k, cl100k func() *codec.Codec
}{
	o200k:  sync.OnceValue(codec.NewO200kBase),
	cl100k: sync.OnceValue(codec.NewCl100kBase),
}

// maxCached bounds the counts kept.
const maxCached = 1024

var cache = struct {
	sync.Mutex
	seed  maphash.Seed
	count map[cacheKey]int
	order []cacheKey // oldest first
}{seed: maphash.MakeSeed(), count: map[cacheKey]int{}}

type cacheKey struct {
	enc  Encoding
	hash uint64
	n    int
}

// Count counts the tokens of text in an encoding. Counts are kept (the last maxCached): a request's
// prompt is counted once for each model of its panel, a long prompt costs about a millisecond per few
// kilobytes, and even a short one costs the tokenizer's matcher about 35 allocations, where a kept
// count costs a lookup. Text that is not valid UTF-8 is counted as what its invalid bytes would be
// replaced with.
func Count(enc Encoding, text string) int {
	if text == "" {
		return 0
	}
	k := cacheKey{enc: enc, hash: maphash.String(cache.seed, text), n: len(text)}
	cache.Lock()
	n, ok := cache.count[k]
	cache.Unlock()
	if ok {
		return n
	}
	n = count(enc, text)
	cache.Lock()
	defer cache.Unlock()
	if _, ok := cache.count[k]; !ok {
		if len(cache.order) >= maxCached {
			delete(cache.count, cache.order[0])
			cache.order = cache.order[1:]
		}
		cache.count[k] = n
		cache.order = append(cache.order, k)
	}
	return n
}

func count(enc Encoding, text string) int {
	c := codecs.o200k()
	if enc == Cl100k {
		c = codecs.cl100k()
	}
	n, err := c.Count(strings.ToValidUTF8(text, "\uFFFD"))
	if err != nil {
		// The encodings match any text; should one fail, a byte a token bounds every count.
		return len(text)
	}
	return n
}
