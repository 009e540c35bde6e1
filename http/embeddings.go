package httpapi

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// POST /v1/embeddings: OpenAI's embeddings in front of a catalog model that has them (its entry tagged
// embeddings, its provider OpenAI-compatible or Gemini). It is a plain gateway call (Engine.Embed): no
// panel embeds, so conclave/auto and the blueprints are refused.

// embeddingsFields are the members of an embeddings request; there are no others.
var embeddingsFields = map[string]bool{"model": true, "input": true, "dimensions": true, "encoding_format": true, "user": true}

// Bounds of an embeddings request, beyond the body's size.
const (
	maxEmbedInputs = 2048    // OpenAI's bound
	maxDimensions  = 1 << 16 // far above any model's vectors
)

// embeddingsRequest is a parsed embeddings request; base64 asks for the vectors as base64 of
// little-endian float32s, as OpenAI writes them.
type embeddingsRequest struct {
	req    *messages.EmbedRequest
	model  string
	base64 bool
}

// parseEmbeddings is the embeddings door's decoder: it decodes and validates a body, collecting every
// problem. The status is 0 when the request is valid, 400 for malformed input and 404 when the model is
// unknown.
func (s *Server) parseEmbeddings(body []byte) (*embeddingsRequest, int, []*messages.Problem) {
	fields, bad, ok := objectFields(body, embeddingsFields)
	if !ok {
		return nil, http.StatusBadRequest, details(bad.errs)
	}
	out := &embeddingsRequest{req: &messages.EmbedRequest{}}
	model, unknown := s.readEmbedModel(fields, bad)
	out.model, out.req.Model = model, model
	if raw, ok := given(fields, "input"); !ok {
		bad.Add("input", "is required: a text or a list of texts")
	} else {
		out.req.Inputs = readEmbedInputs(raw, bad)
	}
	if d := (askReader{fields: fields, bad: bad}).whole("dimensions", 1, maxDimensions); d != nil {
		out.req.Dimensions = int32(*d)
	}
	out.base64 = readEncoding(fields, bad)
	out.req.User = readEmbedUser(fields, bad)
	switch {
	case bad.count() > 0:
		return nil, http.StatusBadRequest, details(append(bad.errs, unknown...).Capped())
	case len(unknown) > 0:
		return nil, http.StatusNotFound, details(unknown.Capped())
	}
	return out, 0, nil
}

// readEmbedModel reads the model, a catalog model that has embeddings: no panel embeds. A model the
// catalog does not hold is returned apart, as unknown: a 404 when nothing else is wrong.
func (s *Server) readEmbedModel(fields map[string]json.RawMessage, bad *report) (string, problems.Errors) {
	var model string
	raw, ok := fields["model"]
	if !ok {
		bad.Add("model", "is required: an embeddings model (GET /v1/models lists them)")
		return model, nil
	}
	if json.Unmarshal(raw, &model) != nil || model == "" {
		bad.Add("model", "must be a non-empty string")
		return model, nil
	}
	var unknown problems.Errors
	m, known := s.engine.Catalog().Get(model)
	switch {
	case known && !m.Has(catalog.Embeddings):
		bad.Add("model", fmt.Sprintf("%q has no embeddings: name a model whose catalog entry is tagged %s", problems.Clip(model, 128), catalog.Embeddings))
	case !known && strings.HasPrefix(model, modelPrefix):
		bad.Add("model", "a panel gives no embeddings: name an embeddings model (GET /v1/models lists them)")
	case !known:
		unknown.Add("model", fmt.Sprintf("unknown model %q (GET /v1/models lists them)", problems.Clip(model, 128)))
	}
	return model, unknown
}

// readEncoding reads whether the caller asks for the vectors in base64 rather than as numbers.
func readEncoding(fields map[string]json.RawMessage, bad *report) bool {
	raw, ok := given(fields, "encoding_format")
	if !ok {
		return false
	}
	var f string
	if json.Unmarshal(raw, &f) != nil || (f != "float" && f != "base64") {
		bad.Add("encoding_format", "must be float or base64")
	}
	return f == "base64"
}

// readEmbedUser reads the end user's id, bounded as intake bounds it on every other door.
func readEmbedUser(fields map[string]json.RawMessage, bad *report) string {
	var user string
	raw, ok := given(fields, "user")
	switch {
	case !ok:
	case json.Unmarshal(raw, &user) != nil:
		bad.Add("user", "must be a string")
	default:
		if problem := intake.User(user); problem != "" {
			bad.Add("user", problem)
		}
	}
	return user
}

// readEmbedInputs reads a text or a list of texts, none empty (OpenAI refuses empty ones too). Token
// arrays are refused by name: the providers behind Conclave take text, and token ids are one
// tokenizer's.
func readEmbedInputs(raw json.RawMessage, bad *report) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			bad.Add("input", "must not be empty")
			return nil
		}
		return []string{one}
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("input", "must be a text or a list of texts")
		return nil
	}
	if len(items) == 0 || len(items) > maxEmbedInputs {
		bad.Add("input", fmt.Sprintf("must hold between 1 and %d texts", maxEmbedInputs))
		return nil
	}
	inputs := make([]string, 0, len(items))
	for i, item := range items {
		field := fmt.Sprintf("input[%d]", i)
		var text string
		switch {
		case json.Unmarshal(item, &text) == nil && text != "":
			inputs = append(inputs, text)
		case json.Unmarshal(item, &text) == nil:
			bad.Add(field, "must not be empty")
		case json.Unmarshal(item, new(float64)) == nil || json.Unmarshal(item, new([]float64)) == nil:
			bad.Add("input", "token arrays are not supported: send text")
			return nil
		default:
			bad.Add(field, "must be a text")
		}
	}
	return inputs
}

// embeddingsAnswer is OpenAI's list of embeddings, with Conclave's extension.
type embeddingsAnswer struct {
	Object   string            `json:"object"`
	Data     []embedding       `json:"data"`
	Model    string            `json:"model"`
	Usage    embeddingsUsage   `json:"usage"`
	Conclave conclaveExtension `json:"conclave"`
}

// embedding is one vector: numbers, or base64 of little-endian float32s when asked.
type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingsUsage struct {
	PromptTokens int32 `json:"prompt_tokens"`
	TotalTokens  int32 `json:"total_tokens"`
}

// embed asks the engine for the embeddings of a request and writes them, or its failure.
func (s *Server) embed(w http.ResponseWriter, r *http.Request, x exchange, er *embeddingsRequest) {
	req := er.req
	req.RequestId, req.ReceivedAt, req.ClientRequestId = x.id, timestamppb.New(x.received), clientID(r)
	if ce := s.log.Check(zap.DebugLevel, "request received"); ce != nil {
		ce.Write(zap.String("event", "request_received"), zap.String("request_id", x.id), zap.String("endpoint", x.endpoint),
			zap.String("model", problems.Clip(er.model, 128)), zap.Int("inputs", len(req.Inputs)), zap.String("remote", r.RemoteAddr))
	}
	routing(w, x.id)
	res, err := s.engine.Embed(r.Context(), req)
	exec := s.settle(x.id, res.GetExecution(), err)
	routed(w, exec)
	if exec.StatusCode != http.StatusOK {
		x.fail(w, exec)
		return
	}
	writeJSON(w, http.StatusOK, er.render(exec, res.Vectors))
}

// render is the embeddings door's encoder: the vectors in OpenAI's list, as numbers or in base64.
func (er *embeddingsRequest) render(exec *messages.Execution, vectors []*messages.Vector) embeddingsAnswer {
	answer := embeddingsAnswer{Object: "list", Data: make([]embedding, len(vectors)), Model: er.model, Conclave: extensionOf(exec),
		Usage: embeddingsUsage{PromptTokens: exec.GetUsage().GetInputTokens(), TotalTokens: exec.GetUsage().GetInputTokens()}}
	for i, v := range vectors {
		answer.Data[i] = embedding{Object: "embedding", Index: i, Embedding: v.Values}
		if er.base64 {
			answer.Data[i].Embedding = float32Base64(v.Values)
		}
	}
	return answer
}

// float32Base64 writes a vector as OpenAI's base64 encoding format does: little-endian float32s.
func float32Base64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
