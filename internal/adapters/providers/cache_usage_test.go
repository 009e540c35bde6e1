package providers

import (
	"context"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
)

// TestCachedInputIsReadInEveryWireFormat: a provider's report of the input tokens it read from (and,
// in Anthropic's format, wrote to) its prompt cache is read from the format's own fields, answered
// whole or streamed: OpenAI's prompt_tokens_details.cached_tokens and Gemini's cachedContentTokenCount
// are counted in their prompt tokens, Anthropic's cache_read_input_tokens and
// cache_creation_input_tokens beside its input_tokens. The usage counts every input token, the cached
// ones among them.
func TestCachedInputIsReadInEveryWireFormat(t *testing.T) {
	for _, a := range adapters() {
		want := Usage{InputTokens: 3500, CacheReadTokens: 2000, OutputTokens: 100}
		if a.format == providertest.Anthropic {
			want.CacheWriteTokens = 1000
		}
		for _, streamed := range []bool{false, true} {
			name := a.provider
			if streamed {
				name += ", streamed"
			}
			t.Run(name, func(t *testing.T) {
				s := providertest.New(a.format, func(string, string) string { return "Nitrogen." })
				defer s.Close()
				s.Queue(providertest.Response{InputTokens: 3500, CacheRead: 2000, CacheWrite: 1000, OutputTokens: 100})
				var reply Reply
				var err error
				if streamed {
					reply, _, err = streamOf(t, a.backend, call(s, a.provider))
				} else {
					reply, err = a.backend.Complete(context.Background(), call(s, a.provider))
				}
				if err != nil || reply.Usage != want {
					t.Fatalf("usage %+v, %v; want %+v", reply.Usage, err, want)
				}
			})
		}
	}
}
