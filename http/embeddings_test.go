package httpapi

import (
	"context"
	"encoding/base64"
	"slices"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// embedModel is the embeddings model of embeddingServer's catalog.
const embedModel = "text-embedding-3-small"

// embeddingServer is a server over the embedded default whose catalog also holds an embeddings model.
func embeddingServer(t *testing.T) *Server {
	t.Helper()
	base, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := base.With(catalog.Model{ID: embedModel, Provider: "openrouter", ContextWindow: 8192, InputPricePerMTok: money.PerMillionDollar / 50, Tier: 3,
		Capabilities: []string{catalog.Embeddings}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Config: config.Default(), Log: zap.NewNop(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return New(e, Options{})
}

func TestEmbeddingsRequests(t *testing.T) {
	s := embeddingServer(t)
	chatModel := s.engine.Catalog().All()[0].ID
	tests := []struct {
		desc   string
		body   string
		want   *messages.EmbedRequest
		base64 bool
		status int
		// fields are the problems' fields, every one of them, in order.
		fields []string
	}{
		{desc: "a text", body: `{"model": "` + embedModel + `", "input": "The cat sat."}`,
			want: &messages.EmbedRequest{Model: embedModel, Inputs: []string{"The cat sat."}}},
		{desc: "texts, shortened, as base64, for an end user",
			body: `{"model": "` + embedModel + `", "input": ["a", "b"], "dimensions": 256, "encoding_format": "base64", "user": "u-1"}`,
			want: &messages.EmbedRequest{Model: embedModel, Inputs: []string{"a", "b"}, Dimensions: 256, User: "u-1"}, base64: true},
		{desc: "floats, as asked", body: `{"model": "` + embedModel + `", "input": ["a"], "encoding_format": "float", "dimensions": null}`,
			want: &messages.EmbedRequest{Model: embedModel, Inputs: []string{"a"}}},
		{desc: "token arrays", body: `{"model": "` + embedModel + `", "input": [[1, 2], [3]]}`, status: 400, fields: []string{"input"}},
		{desc: "empty texts and no list", body: `{"model": "` + embedModel + `", "input": ["a", "", true]}`, status: 400, fields: []string{"input[1]", "input[2]"}},
		{desc: "no input, no model", body: `{"dimensions": 0}`, status: 400, fields: []string{"model", "input", "dimensions"}},
		{desc: "a chat model", body: `{"model": "` + chatModel + `", "input": "x"}`, status: 400, fields: []string{"model"}},
		{desc: "a panel", body: `{"model": "conclave/auto", "input": "x"}`, status: 400, fields: []string{"model"}},
		{desc: "an unknown model", body: `{"model": "text-embedding-9", "input": "x"}`, status: 404, fields: []string{"model"}},
		{desc: "an unknown format and member", body: `{"model": "` + embedModel + `", "input": "x", "encoding_format": "int8", "truncate": true}`,
			status: 400, fields: []string{"truncate", "encoding_format"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			er, status, ps := s.parseEmbeddings([]byte(tt.body))
			var fields []string
			for _, p := range ps {
				fields = append(fields, p.Field)
			}
			if status != tt.status || !slices.Equal(fields, tt.fields) {
				t.Fatalf("status %d, problems %v; want %d with %v", status, ps, tt.status, tt.fields)
			}
			if tt.want != nil && (!proto.Equal(er.req, tt.want) || er.base64 != tt.base64) {
				t.Fatalf("request %v base64 %v", er.req, er.base64)
			}
		})
	}
}

// An embeddings model answers no chat: every door that asks models to answer refuses it by name, and
// no panel selects it.
func TestAnEmbeddingsModelAnswersNoChat(t *testing.T) {
	s := embeddingServer(t)
	tests := []struct {
		desc  string
		parse func() (int, []*messages.Problem)
		field string
	}{
		{"chat completions", func() (int, []*messages.Problem) {
			_, st, ps := s.parseChat([]byte(chatBody(embedModel)))
			return st, ps
		}, "model"},
		{"a fallback", func() (int, []*messages.Problem) {
			_, st, ps := s.parseChat([]byte(chatBody(s.engine.Catalog().All()[0].ID, `"fallbacks": ["`+embedModel+`"]`)))
			return st, ps
		}, "fallbacks[0]"},
		{"responses", func() (int, []*messages.Problem) {
			_, st, ps := s.parseResponses([]byte(responsesBody(embedModel, `"hi"`)))
			return st, ps
		}, "model"},
		{"route-thompson", func() (int, []*messages.Problem) {
			_, st, ps := s.parseRoute([]byte(`{"task": "hi", "models": ["` + embedModel + `"]}`))
			return st, ps
		}, "models[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			status, ps := tt.parse()
			if status != 400 || len(ps) != 1 || ps[0].Field != tt.field {
				t.Fatalf("status %d, problems %v", status, ps)
			}
		})
	}
	for _, m := range s.engine.Arms().(interface{ Models() []catalog.Model }).Models() {
		if m.ID == embedModel {
			t.Fatal("the embeddings model has arms: a panel could select it")
		}
	}
}

// base64 is OpenAI's: little-endian float32s.
func TestFloat32Base64(t *testing.T) {
	got := float32Base64([]float32{1, -0.5})
	raw, _ := base64.StdEncoding.DecodeString(got)
	if want := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xbf}; !slices.Equal(raw, want) {
		t.Fatalf("%s is %v, want %v", got, raw, want)
	}
}
