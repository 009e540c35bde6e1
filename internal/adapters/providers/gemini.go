package providers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Gemini speaks generateContent (POST {base}/v1beta/models/{model}:generateContent) with the key in the
// x-goog-api-key header, never in the URL: URLs end up in logs.
type Gemini struct {
	Client   *http.Client
	Provider string
	Now      func() time.Time
}

// NewGemini returns an adapter for generateContent.
func NewGemini(client *http.Client, provider string) *Gemini {
	return &Gemini{Client: client, Provider: provider}
}

// Wire shapes of a generateContent request and answer.
type (
	geminiPart struct {
		Text             string                  `json:"text,omitempty"`
		Thought          bool                    `json:"thought,omitempty"`
		InlineData       *geminiBlob             `json:"inlineData,omitempty"`
		FileData         *geminiFile             `json:"fileData,omitempty"`
		FunctionCall     *geminiFunctionCall     `json:"functionCall,omitempty"`
		FunctionResponse *geminiFunctionResponse `json:"functionResponse,omitempty"`
		ThoughtSignature string                  `json:"thoughtSignature,omitempty"`
	}
	geminiBlob struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	}
	geminiFile struct {
		MimeType string `json:"mimeType,omitempty"`
		FileURI  string `json:"fileUri"`
	}
	geminiFunctionCall struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args,omitempty"`
	}
	geminiFunctionResponse struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	}
	geminiContent struct {
		Role  string       `json:"role,omitempty"`
		Parts []geminiPart `json:"parts"`
	}
	geminiFunctionDeclaration struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parametersJsonSchema,omitempty"`
	}
)

// GenerateRequest builds the body of a generateContent call (streamed or not: the body is the same).
// generationConfig carries temperature, topP, maxOutputTokens, stopSequences, seed and both penalties;
// logit_bias, user and parallel_tool_calls have no field and are left out.
func (g *Gemini) GenerateRequest(call Call) ([]byte, error) {
	system, turns := splitSystem(call.Messages)
	contents, err := geminiContents(turns)
	if err != nil {
		return nil, err
	}
	body := map[string]any{"contents": contents}
	if len(system) > 0 {
		parts := make([]geminiPart, len(system))
		for i, m := range system {
			parts[i] = geminiPart{Text: m.Text()}
		}
		body["systemInstruction"] = geminiContent{Parts: parts}
	}
	if len(call.Tools) > 0 {
		body["tools"] = []any{map[string]any{"functionDeclarations": geminiDeclarations(call.Tools)}}
	}
	if cfg := geminiToolConfig(call.ToolChoice); cfg != nil {
		body["toolConfig"] = map[string]any{"functionCallingConfig": cfg}
	}
	if cfg := generationConfig(call); len(cfg) > 0 {
		body["generationConfig"] = cfg
	}
	return json.Marshal(body)
}

// geminiDeclarations declares the tools as functions.
func geminiDeclarations(tools []Tool) []geminiFunctionDeclaration {
	decls := make([]geminiFunctionDeclaration, len(tools))
	for i, t := range tools {
		decls[i] = geminiFunctionDeclaration{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
	}
	return decls
}

// geminiToolConfig is the functionCallingConfig of a tool choice, or nil when there is none (or of no
// known mode). A function the model must call is the one function it may call, in mode ANY.
func geminiToolConfig(c *ToolChoice) map[string]any {
	if c == nil {
		return nil
	}
	switch c.Mode {
	case ToolChoiceAuto:
		return map[string]any{"mode": "AUTO"}
	case ToolChoiceNone:
		return map[string]any{"mode": "NONE"}
	case ToolChoiceRequired:
		return map[string]any{"mode": "ANY"}
	case ToolChoiceFunction:
		return map[string]any{"mode": "ANY", "allowedFunctionNames": []string{c.Name}}
	}
	return nil
}

// generationConfig carries the output limit, the sampling parameters generationConfig has fields for,
// and the response format.
func generationConfig(call Call) map[string]any {
	cfg := map[string]any{}
	if call.MaxTokens > 0 {
		cfg["maxOutputTokens"] = call.MaxTokens
	}
	p := call.Params
	if p.Temperature != nil {
		cfg["temperature"] = *p.Temperature
	}
	if p.TopP != nil {
		cfg["topP"] = *p.TopP
	}
	if len(p.Stop) > 0 {
		cfg["stopSequences"] = p.Stop
	}
	if p.Seed != nil {
		cfg["seed"] = *p.Seed
	}
	if p.PresencePenalty != nil {
		cfg["presencePenalty"] = *p.PresencePenalty
	}
	if p.FrequencyPenalty != nil {
		cfg["frequencyPenalty"] = *p.FrequencyPenalty
	}
	if f := call.ResponseFormat; f != nil {
		cfg["responseMimeType"] = "application/json"
		if f.Type != FormatJSONObject && len(f.Schema) > 0 {
			// responseJsonSchema takes JSON Schema as callers write it; responseSchema only an OpenAPI subset.
			cfg["responseJsonSchema"] = f.Schema
		}
	}
	return cfg
}

// geminiContents writes the turns as contents: an assistant turn's calls are functionCall parts of a
// model turn, and the tool turns answering them one user turn of functionResponse parts, each named by
// the function it answers (Gemini matches responses to calls by name and order, not by id).
func geminiContents(turns []Message) ([]geminiContent, error) {
	c := geminiConversation{names: map[string]string{}}
	for _, m := range turns {
		for _, call := range m.ToolCalls {
			c.names[call.ID] = call.Name
		}
	}
	for _, m := range turns {
		var err error
		switch m.Role {
		case "tool":
			err = c.addResult(m)
		case "assistant":
			err = c.addModelTurn(m)
		default:
			err = c.addUserTurn(m)
		}
		if err != nil {
			return nil, err
		}
	}
	return c.contents, nil
}

// geminiConversation is the contents written so far, with the function each call's id names.
type geminiConversation struct {
	contents []geminiContent
	names    map[string]string
	// results says the last content holds tool results: a result or a user turn after them joins it.
	results bool
}

// addResult writes a tool turn as a functionResponse part, named by the function its call named (or by
// the turn's name).
func (c *geminiConversation) addResult(m Message) error {
	name := c.names[m.ToolCallID]
	if name == "" {
		name = m.Name
	}
	if name == "" {
		return fmt.Errorf("the tool turn answering %q names no function, and no assistant turn made that call", m.ToolCallID)
	}
	part := geminiPart{FunctionResponse: &geminiFunctionResponse{Name: name, Response: functionResponse(m.Text())}}
	c.addUserParts([]geminiPart{part})
	c.results = true
	return nil
}

// addModelTurn writes an assistant turn as a model turn of its text and images, then its calls. A turn
// without parts is left out: Gemini refuses it, and it says nothing.
func (c *geminiConversation) addModelTurn(m Message) error {
	parts, err := geminiParts(m)
	if err != nil {
		return err
	}
	for i, call := range m.ToolCalls {
		args, err := toolInput(call)
		if err != nil {
			return err
		}
		part := geminiPart{FunctionCall: &geminiFunctionCall{Name: call.Name, Args: args}, ThoughtSignature: thoughtSignature(call.ID)}
		if i == 0 && part.ThoughtSignature == "" {
			// A call Gemini did not make (another model's, or an id from elsewhere) has no signature;
			// Gemini 3 refuses a model turn's first call without one, and documents this value for it.
			part.ThoughtSignature = "skip_thought_signature_validator"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return nil
	}
	c.contents = append(c.contents, geminiContent{Role: "model", Parts: parts})
	c.results = false
	return nil
}

// addUserTurn writes a user turn's text and images; a turn without parts is left out.
func (c *geminiConversation) addUserTurn(m Message) error {
	parts, err := geminiParts(m)
	if err != nil || len(parts) == 0 {
		return err
	}
	c.addUserParts(parts)
	c.results = false
	return nil
}

// addUserParts adds parts to the last content when it holds tool results, else as a user turn.
func (c *geminiConversation) addUserParts(parts []geminiPart) {
	if c.results {
		last := &c.contents[len(c.contents)-1]
		last.Parts = append(last.Parts, parts...)
		return
	}
	c.contents = append(c.contents, geminiContent{Role: "user", Parts: parts})
}

// geminiParts writes a turn's text and images: a data URI as inlineData, a URL as fileData (Gemini
// fetches it).
func geminiParts(m Message) ([]geminiPart, error) {
	if m.Parts == nil {
		if m.Content == "" {
			return nil, nil
		}
		return []geminiPart{{Text: m.Content}}, nil
	}
	var parts []geminiPart
	for _, p := range m.Parts {
		if p.Type != PartImage {
			if p.Text != "" {
				parts = append(parts, geminiPart{Text: p.Text})
			}
			continue
		}
		img, err := imageOf(p.ImageURL)
		if err != nil {
			return nil, err
		}
		if img.URL != "" {
			parts = append(parts, geminiPart{FileData: &geminiFile{MimeType: mediaTypeOf(img.URL), FileURI: img.URL}})
		} else {
			parts = append(parts, geminiPart{InlineData: &geminiBlob{MimeType: img.MediaType, Data: img.Data}})
		}
	}
	return parts, nil
}

// functionResponse is a tool's result as the JSON object Gemini wants: the result itself when it is an
// object, else {"output": result} (as the documentation names it), a JSON value kept as a value.
func functionResponse(text string) json.RawMessage {
	trimmed := strings.TrimSpace(text)
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(trimmed), &obj) == nil && obj != nil {
		return json.RawMessage(trimmed)
	}
	var value json.RawMessage
	if json.Unmarshal([]byte(trimmed), &value) == nil && trimmed != "" {
		raw, _ := json.Marshal(map[string]json.RawMessage{"output": value})
		return raw
	}
	raw, _ := json.Marshal(map[string]string{"output": text})
	return raw
}

// A Gemini tool call's id carries its thought signature, when the answer had one, after this mark:
// Gemini 3 wants the signature back with the call in the next turn, and a caller keeps nothing but the
// id. URL-safe base64 keeps the id within the characters every format takes.
const signatureMark = "_ts_"

// maxSignature bounds a signature carried in an id; a longer one is not carried.
const maxSignature = 16 << 10

// geminiCallID is the id of a call in a Gemini answer: Gemini's own when it gives one, else a synthetic
// one, stable for the answer, with its thought signature.
func geminiCallID(responseID string, index int, fc *geminiFunctionCall, signature string) string {
	id := fc.ID
	if id == "" {
		id = syntheticCallID(responseID, strconv.Itoa(index), fc.Name, string(fc.Args))
	}
	if signature != "" && len(signature) <= maxSignature && !strings.Contains(id, signatureMark) {
		id += signatureMark + base64.RawURLEncoding.EncodeToString([]byte(signature))
	}
	return id
}

// thoughtSignature is the signature a call's id carries, or "".
func thoughtSignature(id string) string {
	_, enc, ok := strings.Cut(id, signatureMark)
	if !ok {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return string(raw)
}

// Complete implements Backend.
func (g *Gemini) Complete(ctx context.Context, call Call) (Reply, error) {
	dropped := Dropped(KindGemini, call.Params)
	reply, err := g.complete(ctx, call)
	reply.Dropped = dropped
	return reply, err
}

func (g *Gemini) complete(ctx context.Context, call Call) (Reply, error) {
	body, err := g.GenerateRequest(call)
	if err != nil {
		return Reply{}, refused(g.Provider, call.Model, err)
	}
	x, err := post(ctx, g.Client, g.url(call, "generateContent"), g.header(call), body, g.Provider, call.Model)
	if err != nil {
		return Reply{}, err
	}
	return withoutKey(call.Key)(g.ParseGenerate(call.Model, x.status, x.header, x.body))
}

func (g *Gemini) url(call Call, method string) string {
	return g.modelURL(call.BaseURL, call.Upstream(), method)
}

// modelURL is the address of a method of a model.
func (g *Gemini) modelURL(baseURL, model, method string) string {
	return strings.TrimRight(baseURL, "/") + "/v1beta/models/" + url.PathEscape(strings.TrimPrefix(model, "models/")) + ":" + method
}

func (g *Gemini) header(call Call) http.Header { return g.keyHeader(call.Key) }

// keyHeader carries the key in x-goog-api-key.
func (g *Gemini) keyHeader(key secret.String) http.Header {
	h := http.Header{}
	if key.Set() {
		h.Set("x-goog-api-key", key.Reveal())
	}
	return h
}

type geminiResponse struct {
	Candidates []struct {
		Content      geminiContent `json:"content"`
		FinishReason string        `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount        int `json:"promptTokenCount"`
		CandidatesTokenCount    int `json:"candidatesTokenCount"`
		CachedContentTokenCount int `json:"cachedContentTokenCount"` // counted in promptTokenCount
	} `json:"usageMetadata"`
	ModelVersion   string `json:"modelVersion"`
	ResponseID     string `json:"responseId"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type       string `json:"@type"`
			Reason     string `json:"reason"`
			RetryDelay string `json:"retryDelay"`
		} `json:"details"`
	} `json:"error"`
}

// ParseGenerate reads a generateContent answer, or the failure it describes: the Google error object
// with a status (RESOURCE_EXHAUSTED, UNAVAILABLE, ...) and details (RetryInfo's retryDelay, ErrorInfo's
// API_KEY_INVALID).
func (g *Gemini) ParseGenerate(model string, status int, header http.Header, raw []byte) (Reply, error) {
	limits := g.limits(header)
	var resp geminiResponse
	decodeErr := json.Unmarshal(raw, &resp)
	if status/100 != 2 || resp.Error != nil {
		return Reply{RateLimit: limits}, g.classify(model, status, &resp, raw, limits)
	}
	if decodeErr != nil {
		return Reply{RateLimit: limits}, failure(g.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeUnknown, nil,
			"the answer is not a generateContent response: "+decodeErr.Error())
	}
	reply := Reply{RateLimit: limits}
	var text strings.Builder
	g.read(&reply, &resp, &text, func(ToolCallDelta) {})
	reply.Text = text.String()
	return reply, nil
}

// read adds one answer (or one chunk of a stream) to a reply: its text to text, its calls to the
// reply's, each reported to onCall; its usage, finish reason and ids replace what an earlier chunk said.
// It returns the chunk's text.
func (g *Gemini) read(reply *Reply, resp *geminiResponse, text *strings.Builder, onCall func(ToolCallDelta)) string {
	readGeminiHead(reply, resp)
	if len(resp.Candidates) == 0 {
		if resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
			reply.FinishReason = resp.PromptFeedback.BlockReason // no answer: an empty one, judged as such
		}
		return ""
	}
	c := &resp.Candidates[0]
	if c.FinishReason != "" {
		reply.FinishReason = c.FinishReason
	}
	var piece strings.Builder
	for i := range c.Content.Parts {
		readGeminiPart(reply, resp.ResponseID, &c.Content.Parts[i], &piece, onCall)
	}
	text.WriteString(piece.String())
	return piece.String()
}

// readGeminiHead reads what an answer says of itself: the served model, the response's id and the
// usage, each when it says it.
func readGeminiHead(reply *Reply, resp *geminiResponse) {
	if resp.ModelVersion != "" {
		reply.ServedModel = resp.ModelVersion
	}
	if resp.ResponseID != "" {
		reply.UpstreamRequestID = resp.ResponseID
	}
	if u := resp.UsageMetadata; u != nil {
		reply.Usage = Usage{InputTokens: u.PromptTokenCount, OutputTokens: u.CandidatesTokenCount, CacheReadTokens: max(u.CachedContentTokenCount, 0)}
	}
}

// readGeminiPart reads one part of a candidate: a function call (up to the bound on calls) is added to
// the reply's calls and reported to onCall, a thought is left out, and text goes to piece.
func readGeminiPart(reply *Reply, responseID string, p *geminiPart, piece *strings.Builder, onCall func(ToolCallDelta)) {
	switch {
	case p.FunctionCall != nil && len(reply.ToolCalls) < maxToolCalls:
		i := len(reply.ToolCalls)
		args := string(p.FunctionCall.Args)
		if args == "" || args == "null" {
			args = "{}"
		}
		call := ToolCall{ID: geminiCallID(responseID, i, p.FunctionCall, p.ThoughtSignature), Name: p.FunctionCall.Name, Arguments: args}
		reply.ToolCalls = append(reply.ToolCalls, call)
		onCall(ToolCallDelta{Index: i, ID: call.ID, Name: call.Name, Arguments: call.Arguments})
	case p.Thought:
		// A summary of the model's thinking, asked for or not, is not its answer.
	default:
		piece.WriteString(p.Text)
	}
}

func (g *Gemini) limits(header http.Header) *ratelimit.Upstream {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	return limitHeaders(header, now())
}

// classify maps a failure onto the error table; an error object without an HTTP status of its own (in
// a 200, or a chunk of a stream) takes its code.
func (g *Gemini) classify(model string, status int, resp *geminiResponse, raw []byte, limits *ratelimit.Upstream) error {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	msg, text := string(raw), ""
	if e := resp.Error; e != nil {
		msg, text = e.Message, e.Status
		if status/100 == 2 {
			status = http.StatusBadGateway
			if e.Code >= 400 && e.Code < 600 {
				status = e.Code
			}
		}
		for _, d := range e.Details {
			text += " " + d.Reason
			if d.Reason == "API_KEY_INVALID" {
				status = http.StatusUnauthorized
			}
			if d.RetryDelay != "" {
				if wait, ok := parseReset(d.RetryDelay, now()); ok {
					if limits == nil {
						limits = &ratelimit.Upstream{RemainingRequests: -1, RemainingTokens: -1}
					}
					limits.RetryAfter = max(limits.RetryAfter, wait)
				}
			}
		}
	}
	return classifyStatus(g.Provider, model, status, msg+" "+text, msg, ProfileOf(g.Provider), limits)
}

// Stream implements Streamer: streamGenerateContent?alt=sse, whose every event is a whole
// GenerateContentResponse holding the next piece; the last one's usageMetadata counts the whole answer.
// Gemini sends a function call whole, in one piece.
func (g *Gemini) Stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	dropped := Dropped(KindGemini, call.Params)
	reply, err := g.stream(ctx, call, strikeKey(call.Key, onDelta))
	reply.Dropped = dropped
	return withoutKey(call.Key)(reply, err)
}

func (g *Gemini) stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	body, err := g.GenerateRequest(call)
	if err != nil {
		return Reply{}, refused(g.Provider, call.Model, err)
	}
	return streamed(ctx, g.Client, g.url(call, "streamGenerateContent")+"?alt=sse", g.header(call), body, g.Provider, call.Model,
		func(status int, header http.Header, b []byte) (Reply, error) {
			return g.ParseGenerate(call.Model, status, header, b)
		},
		func(status int, header http.Header, r io.Reader) (Reply, error) {
			return g.ReadGenerateStream(ctx, call.Model, status, header, r, onDelta)
		}, onDelta)
}

// ReadGenerateStream reads a streamed generateContent answer. Gemini's stream has no closing event: it
// ends with the connection, its last chunk carrying the finish reason; a stream cut off (a reset, a
// chunked body that stops short) or an error object in a chunk fails as ParseGenerate would.
func (g *Gemini) ReadGenerateStream(ctx context.Context, model string, status int, header http.Header, body io.Reader, onDelta func(Delta)) (Reply, error) {
	s := &generateStream{g: g, model: model, status: status, onDelta: onDelta, reply: Reply{RateLimit: g.limits(header)}}
	if err := readStream(ctx, body, s, g.Provider, model, status); err != nil {
		return s.reply, err
	}
	s.reply.Text = s.text.String()
	return s.reply, nil
}

// generateStream is what a streamed generateContent answer has said so far: the reply, its tool calls
// among it; the reply's text is set once the stream is whole.
type generateStream struct {
	g       *Gemini
	model   string
	status  int
	onDelta func(Delta)
	reply   Reply
	text    strings.Builder
}

// whole reports whether a chunk has given the finish reason: the stream ends with the connection then.
func (s *generateStream) whole() bool { return s.reply.FinishReason != "" }

// event reads one chunk, a whole GenerateContentResponse: an error object fails the stream; any other
// chunk adds to the reply as an answer does, and its text and calls are passed on.
func (s *generateStream) event(ev sseEvent) (bool, error) {
	var chunk geminiResponse
	if err := json.Unmarshal(ev.data, &chunk); err != nil {
		return false, failure(s.g.Provider, s.model, s.status, resilience.ProviderUnavailable, resilience.ScopeUnknown, nil,
			"a chunk of the stream is not JSON: "+err.Error())
	}
	if chunk.Error != nil {
		return false, s.g.classify(s.model, http.StatusOK, &chunk, ev.data, s.reply.RateLimit)
	}
	var d Delta
	d.Text = s.g.read(&s.reply, &chunk, &s.text, func(c ToolCallDelta) { d.ToolCalls = append(d.ToolCalls, c) })
	relay(d, s.onDelta)
	return false, nil
}
