package httpapi

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
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

// parseEmbeddings decodes and validates an embeddings body, collecting every problem. The status is 0
// when the request is valid, 400 for malformed input and 404 when the model is unknown.
func (s *Server) parseEmbeddings(body []byte) (*embeddingsRequest, int, []*messages.Problem) {
	fields, bad, ok := objectFields(body, embeddingsFields)
	if !ok {
		return nil, http.StatusBadRequest, details(bad.errs)
	}
	var unknown problems.Errors
	out := &embeddingsRequest{req: &messages.EmbedRequest{}}
	if raw, ok := fields["model"]; !ok {
		bad.Add("model", "is required: an embeddings model (GET /v1/models lists them)")
	} else if json.Unmarshal(raw, &out.model) != nil || out.model == "" {
		bad.Add("model", "must be a non-empty string")
	} else if m, known := s.engine.Catalog().Get(out.model); known && !m.Has(catalog.Embeddings) {
		bad.Add("model", fmt.Sprintf("%q has no embeddings: name a model whose catalog entry is tagged %s", problems.Clip(out.model, 128), catalog.Embeddings))
	} else if !known && strings.HasPrefix(out.model, modelPrefix) {
		bad.Add("model", "a panel gives no embeddings: name an embeddings model (GET /v1/models lists them)")
	} else if !known {
		unknown.Add("model", fmt.Sprintf("unknown model %q (GET /v1/models lists them)", problems.Clip(out.model, 128)))
	}
	out.req.Model = out.model
	if raw, ok := given(fields, "input"); !ok {
		bad.Add("input", "is required: a text or a list of texts")
	} else {
		out.req.Inputs = readEmbedInputs(raw, bad)
	}
	r := askReader{fields: fields, bad: bad}
	if d := r.whole("dimensions", 1, maxDimensions); d != nil {
		out.req.Dimensions = int32(*d)
	}
	if raw, ok := given(fields, "encoding_format"); ok {
		var f string
		if json.Unmarshal(raw, &f) != nil || (f != "float" && f != "base64") {
			bad.Add("encoding_format", "must be float or base64")
		}
		out.base64 = f == "base64"
	}
	if raw, ok := given(fields, "user"); ok {
		if json.Unmarshal(raw, &out.req.User) != nil {
			bad.Add("user", "must be a string")
		} else if len(out.req.User) > intake.MaxUserBytes {
			bad.Add("user", fmt.Sprintf("must be at most %d bytes", intake.MaxUserBytes))
		}
	}
	switch {
	case bad.count() > 0:
		return nil, http.StatusBadRequest, details(append(bad.errs, unknown...).Capped())
	case len(unknown) > 0:
		return nil, http.StatusNotFound, details(unknown.Capped())
	}
	return out, 0, nil
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

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	received := time.Now()
	id := uuid.NewString()
	w.Header().Set("X-Request-ID", id)
	body, ok := s.readJSONWith(w, r, writeOpenAIError)
	if !ok {
		return
	}
	er, status, why := s.parseEmbeddings(body)
	if status != 0 {
		s.refuse(w, id, "embeddings", status, why)
		return
	}
	req := er.req
	req.RequestId, req.ReceivedAt = id, timestamppb.New(received)
	if c := r.Header.Get("X-Request-ID"); validClientID(c) {
		req.ClientRequestId = c
	}
	if ce := s.log.Check(zap.DebugLevel, "request received"); ce != nil {
		ce.Write(zap.String("event", "request_received"), zap.String("request_id", id), zap.String("endpoint", "embeddings"),
			zap.String("model", problems.Clip(er.model, 128)), zap.Int("inputs", len(req.Inputs)), zap.String("remote", r.RemoteAddr))
	}
	routing(w)
	res, err := s.engine.Embed(r.Context(), req)
	exec := s.settle(id, res.GetExecution(), err)
	routed(w, exec)
	if exec.StatusCode != http.StatusOK {
		setRetryAfter(w, exec.Error)
		writeOpenAIError(w, int(exec.StatusCode), exec.Error.Code, exec.Error.Message, exec.Error.Details)
		return
	}
	answer := embeddingsAnswer{Object: "list", Data: make([]embedding, len(res.Vectors)), Model: er.model, Conclave: extensionOf(exec),
		Usage: embeddingsUsage{PromptTokens: exec.GetUsage().GetInputTokens(), TotalTokens: exec.GetUsage().GetInputTokens()}}
	for i, v := range res.Vectors {
		answer.Data[i] = embedding{Object: "embedding", Index: i, Embedding: v.Values}
		if er.base64 {
			answer.Data[i].Embedding = float32Base64(v.Values)
		}
	}
	writeJSON(w, http.StatusOK, answer)
}

// float32Base64 writes a vector as OpenAI's base64 encoding format does: little-endian float32s.
func float32Base64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
