package providers

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/resilience"
)

// FuzzParseResponses feeds every adapter's parser any body, status and rate-limit headers: each ends in
// a reply with text or a classified error, never a panic, and never quotes more than a bounded part of
// what it was given.
func FuzzParseResponses(f *testing.F) {
	f.Add(200, `{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, "5", "1s")
	f.Add(200, `{"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`, "", "")
	f.Add(200, `{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3}}`, "", "")
	f.Add(429, `{"error":{"message":"slow down","type":"rate_limit_error"}}`, "0", "30")
	f.Add(200, `{"error":{"message":"generation failed","code":502}}`, "", "")
	f.Add(500, `<html>oops</html>`, "", "")
	f.Add(200, `{"choices":[]}`, "-1", "999999999999")
	f.Fuzz(func(t *testing.T, status int, body, remaining, reset string) {
		h := http.Header{}
		h.Set("x-ratelimit-remaining-requests", remaining)
		h.Set("x-ratelimit-reset-requests", reset)
		h.Set("retry-after", reset)
		h.Set("anthropic-ratelimit-requests-remaining", remaining)
		status = 100 + (status%500+500)%500
		now := func() time.Time { return time.Unix(1_700_000_000, 0) }
		parsers := map[string]func() (Reply, error){
			"openai": func() (Reply, error) {
				return (&OpenAI{Provider: "groq", Profile: ProfileOf("groq"), Now: now}).ParseChat("m", status, h, []byte(body))
			},
			"anthropic": func() (Reply, error) {
				return (&Anthropic{Provider: "anthropic"}).ParseMessage("m", status, h, []byte(body))
			},
			"gemini": func() (Reply, error) {
				return (&Gemini{Provider: "gemini"}).ParseGenerate("m", status, h, []byte(body))
			},
		}
		for name, parse := range parsers {
			reply, err := parse()
			if err != nil {
				var re *resilience.Error
				if !errors.As(err, &re) || re.Kind == "" {
					t.Fatalf("%s: an error without a kind: %v", name, err)
				}
				if len(err.Error()) > 4096 {
					t.Fatalf("%s: an error of %d bytes", name, len(err.Error()))
				}
				continue
			}
			if status >= 300 {
				t.Fatalf("%s: status %d parsed as an answer %+v", name, status, reply)
			}
		}
	})
}
