package providers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// benchWords is how many text pieces each benchmarked stream carries.
const benchWords = 200

// openAIBenchStream is a chat completion stream of text pieces, a tool call in pieces, the finish and
// the usage.
func openAIBenchStream() string {
	var b strings.Builder
	b.WriteString("data: {\"id\":\"chatcmpl-1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for i := range benchWords {
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	b.WriteString("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n")
	for range 10 {
		b.WriteString("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n")
	}
	b.WriteString("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n")
	b.WriteString("data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":210}}\n\ndata: [DONE]\n\n")
	return b.String()
}

// anthropicBenchStream is a Messages stream of a text block in pieces and a tool_use block in pieces.
func anthropicBenchStream() string {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	b.WriteString("event: ping\ndata: {\"type\": \"ping\"}\n\n")
	for i := range benchWords {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word%d \"}}\n\n", i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}\n\n")
	for range 10 {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":210}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.String()
}

// geminiBenchStream is a streamGenerateContent stream of text chunks, a function call and the last
// chunk with the finish reason.
func geminiBenchStream() string {
	var b strings.Builder
	for i := range benchWords {
		fmt.Fprintf(&b, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"word%d \"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":%d},\"modelVersion\":\"m\",\"responseId\":\"resp-1\"}\r\n\r\n", i, i+1)
	}
	b.WriteString("data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":1}}}],\"role\":\"model\"},\"index\":0}],\"modelVersion\":\"m\",\"responseId\":\"resp-1\"}\r\n\r\n")
	b.WriteString("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":210},\"modelVersion\":\"m\",\"responseId\":\"resp-1\"}\r\n\r\n")
	return b.String()
}

// benchmarkStream reads one stream per iteration and reports the allocations per event.
func benchmarkStream(b *testing.B, stream string, read func(body *strings.Reader) (Reply, error)) {
	events := strings.Count(stream, "data:")
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	body := strings.NewReader(stream)
	for b.Loop() {
		body.Reset(stream)
		if _, err := read(body); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// One more read, counted, for the allocations of one event.
	allocs := testing.AllocsPerRun(3, func() {
		body.Reset(stream)
		read(body)
	})
	b.ReportMetric(allocs/float64(events), "allocs/event")
}

func BenchmarkReadChatStream(b *testing.B) {
	o := &OpenAI{Provider: "openrouter", Profile: ProfileOf("openrouter")}
	ctx, h := context.Background(), http.Header{}
	benchmarkStream(b, openAIBenchStream(), func(body *strings.Reader) (Reply, error) {
		return o.ReadChatStream(ctx, "m", http.StatusOK, h, body, func(Delta) {})
	})
}

func BenchmarkReadMessageStream(b *testing.B) {
	a := &Anthropic{Provider: "anthropic"}
	ctx, h := context.Background(), http.Header{}
	benchmarkStream(b, anthropicBenchStream(), func(body *strings.Reader) (Reply, error) {
		return a.ReadMessageStream(ctx, "m", "", http.StatusOK, h, body, func(Delta) {})
	})
}

func BenchmarkReadGenerateStream(b *testing.B) {
	g := &Gemini{Provider: "gemini"}
	ctx, h := context.Background(), http.Header{}
	benchmarkStream(b, geminiBenchStream(), func(body *strings.Reader) (Reply, error) {
		return g.ReadGenerateStream(ctx, "m", http.StatusOK, h, body, func(Delta) {})
	})
}
