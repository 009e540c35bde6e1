package providertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
)

// Embeddings calls: OpenAI's POST /embeddings and Gemini's :embedContent and :batchEmbedContents.
// Anthropic has no embeddings API, so its server answers them 404 as Anthropic does. A composed answer
// gives each input the vector Vector makes of it, so a test can tell which input became which vector.

// DefaultDimensions is the length of a composed vector when the call asks for none.
const DefaultDimensions = 8

// Vector is the vector a server answers for a text: deterministic, of n dimensions, each in [-1, 1).
func Vector(text string, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		h := fnv.New32a()
		fmt.Fprintf(h, "%d:%s", i, text)
		v[i] = float32(h.Sum32()%2000)/1000 - 1
	}
	return v
}

// EmbeddingTokens is the usage an OpenAI-format server reports for inputs: a token for every started
// four bytes.
func EmbeddingTokens(inputs []string) int {
	n := 0
	for _, in := range inputs {
		n += (len(in) + 3) / 4
	}
	return n
}

// isEmbeddings reports whether a call asks for embeddings.
func isEmbeddings(path string) bool {
	return strings.HasSuffix(path, "/embeddings") || strings.HasSuffix(path, ":embedContent") || strings.HasSuffix(path, ":batchEmbedContents")
}

// embeddings composes the answer to an embeddings call in the server's format, or the refusal the
// provider would give.
func (s *Server) embeddings(r *http.Request, body []byte) Response {
	switch s.Format {
	case Anthropic:
		return Response{Status: http.StatusNotFound, Body: AnthropicError("not_found_error", "Not Found")}
	case Gemini:
		return geminiEmbeddings(r, body)
	}
	return openAIEmbeddings(body)
}

func openAIEmbeddings(body []byte) Response {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
		User           string          `json:"user"`
	}
	refuse := func(msg string) Response {
		return Response{Status: http.StatusBadRequest, Body: OpenAIError(msg, "invalid_request_error", nil)}
	}
	if err := decode(body, &req); err != nil {
		return refuse(err.Error())
	}
	var inputs []string
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		inputs = []string{one}
	} else if json.Unmarshal(req.Input, &inputs) != nil || len(inputs) == 0 {
		return refuse("'input' must be a string or a non-empty list of strings")
	}
	for i, in := range inputs {
		if in == "" {
			return refuse(fmt.Sprintf("'input[%d]' must not be empty", i))
		}
	}
	if req.Model == "" {
		return refuse("you must provide a model parameter")
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		return refuse("'encoding_format' must be float or base64")
	}
	n := DefaultDimensions
	if req.Dimensions != nil {
		if *req.Dimensions < 1 {
			return refuse("'dimensions' must be at least 1")
		}
		n = *req.Dimensions
	}
	data := make([]string, len(inputs))
	for i, in := range inputs {
		raw, _ := json.Marshal(Vector(in, n))
		data[i] = fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":%s}`, i, raw)
	}
	tokens := EmbeddingTokens(inputs)
	return Response{Header: map[string]string{"x-request-id": "req_emb"},
		Body: fmt.Sprintf(`{"object":"list","data":[%s],"model":%s,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`,
			strings.Join(data, ","), quote(req.Model), tokens, tokens)}
}

// geminiEmbedContent is one embedContent request, alone or in a batch.
type geminiEmbedContent struct {
	Model   string `json:"model"`
	Content struct {
		Parts []struct {
			Text *string `json:"text"`
		} `json:"parts"`
	} `json:"content"`
	OutputDimensionality *int `json:"outputDimensionality"`
}

// vector is the values of one request, or why Gemini would refuse it.
func (c geminiEmbedContent) vector() ([]float32, error) {
	var texts []string
	for _, p := range c.Content.Parts {
		if p.Text == nil {
			return nil, errors.New("content.parts: only text parts are embedded here")
		}
		texts = append(texts, *p.Text)
	}
	if len(texts) == 0 {
		return nil, errors.New("content.parts: must not be empty")
	}
	n := DefaultDimensions
	if c.OutputDimensionality != nil {
		if *c.OutputDimensionality < 1 {
			return nil, errors.New("outputDimensionality: must be positive")
		}
		n = *c.OutputDimensionality
	}
	return Vector(strings.Join(texts, " "), n), nil
}

func geminiEmbeddings(r *http.Request, body []byte) Response {
	model, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	refuse := func(msg string) Response {
		return Response{Status: http.StatusBadRequest, Body: GeminiError(400, "INVALID_ARGUMENT", msg)}
	}
	values := func(v []float32) string {
		raw, _ := json.Marshal(v)
		return fmt.Sprintf(`{"values":%s}`, raw)
	}
	if method == "embedContent" {
		var req geminiEmbedContent
		if err := decode(body, &req); err != nil {
			return refuse(err.Error())
		}
		v, err := req.vector()
		if err != nil {
			return refuse(err.Error())
		}
		return Response{Body: fmt.Sprintf(`{"embedding":%s}`, values(v))}
	}
	var batch struct {
		Requests []geminiEmbedContent `json:"requests"`
	}
	if err := decode(body, &batch); err != nil {
		return refuse(err.Error())
	}
	if len(batch.Requests) == 0 {
		return refuse("* BatchEmbedContentsRequest.requests: requests is not specified")
	}
	out := make([]string, len(batch.Requests))
	for i, req := range batch.Requests {
		// Each request names the model of the call, as Gemini requires.
		if req.Model != "models/"+model {
			return refuse(fmt.Sprintf("requests[%d].model: %q is not the model of the call (models/%s)", i, req.Model, model))
		}
		v, err := req.vector()
		if err != nil {
			return refuse(fmt.Sprintf("requests[%d].%v", i, err))
		}
		out[i] = values(v)
	}
	return Response{Body: fmt.Sprintf(`{"embeddings":[%s]}`, strings.Join(out, ","))}
}
