package providertest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// ask is what a server reads of a call: the model, the prompt its Answerer gets (the last turn's text
// and tool results), whether to stream, and the tool the call forces, if any.
type ask struct {
	model, prompt string
	stream        bool
	// usage is OpenAI's stream_options.include_usage; sse Gemini's alt=sse (else it streams a JSON array).
	usage, sse bool
	forced     string
}

// read reads a call in the server's format, refusing what the provider would refuse.
func (s *Server) read(r *http.Request, body []byte) (ask, error) {
	switch s.Format {
	case Anthropic:
		return readAnthropic(body)
	case Gemini:
		return readGemini(r, body)
	}
	return readOpenAI(body)
}

// refusal is the provider's 400 for a call it cannot read.
func (s *Server) refusal(err error) Response {
	switch s.Format {
	case Anthropic:
		return Response{Status: http.StatusBadRequest, Body: AnthropicError("invalid_request_error", err.Error())}
	case Gemini:
		return Response{Status: http.StatusBadRequest, Body: GeminiError(400, "INVALID_ARGUMENT", err.Error())}
	}
	return Response{Status: http.StatusBadRequest, Body: OpenAIError(err.Error(), "invalid_request_error", nil)}
}

// decode reads JSON strictly enough that a field of the wrong type is refused, as the APIs refuse it.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the body is not a valid request: %w", err)
	}
	return nil
}

// image checks an image URL as every format's server would: https, or a base64 data URI of an image.
func image(url string) error {
	if strings.HasPrefix(url, "https://") {
		return nil
	}
	meta, data, ok := strings.Cut(strings.TrimPrefix(url, "data:"), ",")
	if !strings.HasPrefix(url, "data:image/") || !ok || !strings.HasSuffix(meta, ";base64") {
		return fmt.Errorf("image URL %.40q is neither https nor a base64 data URI of an image", url)
	}
	return base64Data(data)
}

func base64Data(data string) error {
	if _, err := base64.StdEncoding.DecodeString(data); err != nil || data == "" {
		return fmt.Errorf("image data is not base64: %v", err)
	}
	return nil
}

// openAIRequest is a chat completion request as the server reads it.
type openAIRequest struct {
	Model         string          `json:"model"`
	Messages      []openAIMessage `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// openAIMessage is a message of a chat completion request. It is an alias of an unnamed struct type, so
// that an error decoding a request describes the field's shape rather than naming a type of the server's.
type openAIMessage = struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func readOpenAI(body []byte) (ask, error) {
	var req openAIRequest
	if err := decode(body, &req); err != nil {
		return ask{}, err
	}
	if len(req.Messages) == 0 {
		return ask{}, errors.New("messages: at least one message is required")
	}
	a := ask{model: req.Model, stream: req.Stream, usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	var calls []string // the calls of the last assistant turn still waiting for their tool turn
	for i, m := range req.Messages {
		if m.Role != "tool" && len(calls) > 0 {
			return ask{}, fmt.Errorf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (%s)", i, strings.Join(calls, ", "))
		}
		texts, err := openAIContent(m.Content, m.Role)
		if err != nil {
			return ask{}, fmt.Errorf("messages[%d]: %w", i, err)
		}
		if calls, err = openAICalls(i, m, calls); err != nil {
			return ask{}, err
		}
		if m.Role == "tool" && i > 0 && req.Messages[i-1].Role == "tool" {
			// The results of one turn's calls are read together, as the other formats carry them in one turn.
			texts = append([]string{a.prompt}, texts...)
		}
		a.prompt = strings.Join(texts, "\n\n")
	}
	forced, err := openAIForced(&req)
	if err != nil {
		return ask{}, err
	}
	a.forced = forced
	return a, nil
}

// openAICalls checks message i by its role against the calls still waiting for their tool turns, and
// returns those still waiting after it: an assistant's calls wait, a tool turn answers one.
func openAICalls(i int, m openAIMessage, calls []string) ([]string, error) {
	switch m.Role {
	case "system", "developer", "user":
	case "assistant":
		for _, c := range m.ToolCalls {
			if c.ID == "" || c.Type != "function" || !json.Valid([]byte(c.Function.Arguments)) {
				return nil, fmt.Errorf("messages[%d]: a tool call needs an id, type function and JSON arguments", i)
			}
			calls = append(calls, c.ID)
		}
	case "tool":
		at := slices.Index(calls, m.ToolCallID)
		if at < 0 {
			return nil, fmt.Errorf("messages[%d]: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (no call %q)", i, m.ToolCallID)
		}
		calls = slices.Delete(calls, at, at+1)
	default:
		return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
	}
	return calls, nil
}

// openAIForced is the tool a chat completion request forces: the last tool when any is required, or the
// function the tool choice names, which must be among the tools.
func openAIForced(req *openAIRequest) (string, error) {
	var names []string
	for _, t := range req.Tools {
		names = append(names, t.Function.Name)
	}
	var choice struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch {
	case string(req.ToolChoice) == `"required"` && len(names) > 0:
		return names[len(names)-1], nil
	case json.Unmarshal(req.ToolChoice, &choice) == nil && choice.Function.Name != "":
		if !slices.Contains(names, choice.Function.Name) {
			return "", fmt.Errorf("tool_choice names %q, which is not among the tools", choice.Function.Name)
		}
		return choice.Function.Name, nil
	}
	return "", nil
}

// openAIContent reads a message's content: a string, parts of text and images, or null for an
// assistant's turn of tool calls.
func openAIContent(raw json.RawMessage, role string) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		if role == "assistant" {
			return nil, nil
		}
		return nil, errors.New("content is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []string{text}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) == 0 {
		return nil, errors.New("content is neither a string nor a list of parts")
	}
	var texts []string
	for _, p := range parts {
		switch {
		case p.Type == "text":
			texts = append(texts, p.Text)
		case p.Type == "image_url" && p.ImageURL != nil && role == "user":
			if err := image(p.ImageURL.URL); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("a content part of type %q is not allowed in a %s message", p.Type, role)
		}
	}
	return texts, nil
}

// anthropicBlock is a content block as the server reads it.
type anthropicBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// anthropicRequest is a Messages request as the server reads it. It and its parts are aliases of
// unnamed struct types, so that an error decoding a request describes the field's shape rather than
// naming a type of the server's.
type anthropicRequest = struct {
	Model      string           `json:"model"`
	MaxTokens  int              `json:"max_tokens"`
	Stream     bool             `json:"stream"`
	Messages   []anthropicTurn  `json:"messages"`
	Tools      []anthropicTool  `json:"tools"`
	ToolChoice *anthropicChoice `json:"tool_choice"`
}

type (
	anthropicTurn = struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	anthropicTool = struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	anthropicChoice = struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
)

func readAnthropic(body []byte) (ask, error) {
	var req anthropicRequest
	if err := decode(body, &req); err != nil {
		return ask{}, err
	}
	if req.MaxTokens <= 0 {
		return ask{}, errors.New("max_tokens: Field required")
	}
	if len(req.Messages) == 0 {
		return ask{}, errors.New("messages: at least one message is required")
	}
	a := ask{model: req.Model, stream: req.Stream}
	var uses []string // the tool_use ids of the assistant turn before
	for i, m := range req.Messages {
		t, err := readAnthropicTurn(i, m, uses)
		if err != nil {
			return ask{}, err
		}
		uses, a.prompt = t.called, strings.Join(t.texts, "\n\n")
	}
	forced, err := anthropicForced(req.Tools, req.ToolChoice)
	if err != nil {
		return ask{}, err
	}
	a.forced = forced
	return a, nil
}

// anthropicTurnReading is what the server reads of turn i: its texts (and tool results' texts), the
// tool_use ids it calls, and those whose results it gives, which must be the calls of the turn before.
type anthropicTurnReading struct {
	i                       int
	role                    string
	uses                    []string
	texts, answered, called []string
	// results says every block so far is a tool_result: they must come first in their turn.
	results bool
}

// readAnthropicTurn reads turn i, whose tool results must answer every call in uses.
func readAnthropicTurn(i int, m anthropicTurn, uses []string) (*anthropicTurnReading, error) {
	blocks, err := anthropicBlocks(m.Content)
	if err != nil {
		return nil, fmt.Errorf("messages.%d.content: %w", i, err)
	}
	t := &anthropicTurnReading{i: i, role: m.Role, uses: uses, results: true}
	for _, b := range blocks {
		if err := t.block(b); err != nil {
			return nil, err
		}
	}
	for _, id := range uses {
		if !slices.Contains(t.answered, id) {
			return nil, fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, id)
		}
	}
	if m.Role != "user" && m.Role != "assistant" {
		return nil, fmt.Errorf("messages.%d.role: %q is neither user nor assistant", i, m.Role)
	}
	return t, nil
}

// block reads one block of the turn, refusing one its role may not hold.
func (t *anthropicTurnReading) block(b anthropicBlock) error {
	if b.Type != "tool_result" {
		t.results = false
	}
	switch {
	case b.Type == "text":
		if b.Text == "" {
			return fmt.Errorf("messages.%d: text content blocks must be non-empty", t.i)
		}
		t.texts = append(t.texts, b.Text)
	case b.Type == "image" && t.role == "user":
		if err := anthropicImage(b); err != nil {
			return fmt.Errorf("messages.%d: %w", t.i, err)
		}
	case b.Type == "tool_use" && t.role == "assistant":
		var input map[string]json.RawMessage
		if b.ID == "" || b.Name == "" || json.Unmarshal(b.Input, &input) != nil || input == nil {
			return fmt.Errorf("messages.%d: a tool_use block needs an id, a name and an object input", t.i)
		}
		t.called = append(t.called, b.ID)
	case b.Type == "tool_result" && t.role == "user":
		return t.toolResult(b)
	default:
		return fmt.Errorf("messages.%d: a %s block is not allowed in a %s turn", t.i, b.Type, t.role)
	}
	return nil
}

// toolResult reads a tool_result block: it comes before any other block of its turn, and answers a
// call of the turn before.
func (t *anthropicTurnReading) toolResult(b anthropicBlock) error {
	if !t.results {
		return fmt.Errorf("messages.%d: tool_result blocks must come first in the user turn", t.i)
	}
	if !slices.Contains(t.uses, b.ToolUseID) {
		return fmt.Errorf("messages.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", t.i, b.ToolUseID)
	}
	t.answered = append(t.answered, b.ToolUseID)
	result, err := anthropicResult(b.Content)
	if err != nil {
		return fmt.Errorf("messages.%d: %w", t.i, err)
	}
	t.texts = append(t.texts, result)
	return nil
}

// anthropicForced is the tool a Messages request forces: the tool its choice names, which must be among
// the tools, or the last tool when any must be called. Every tool's input_schema must be an object.
func anthropicForced(tools []anthropicTool, c *anthropicChoice) (string, error) {
	names := []string{}
	for _, t := range tools {
		var schema struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(t.InputSchema, &schema) != nil || schema.Type != "object" {
			return "", fmt.Errorf("tools: the input_schema of %q must be of type object", t.Name)
		}
		names = append(names, t.Name)
	}
	if c == nil {
		return "", nil
	}
	switch c.Type {
	case "tool":
		if !slices.Contains(names, c.Name) {
			return "", fmt.Errorf("tool_choice: tool %q not found in tools", c.Name)
		}
		return c.Name, nil
	case "any":
		if len(names) == 0 {
			return "", errors.New("tool_choice: any needs tools")
		}
		return names[len(names)-1], nil
	}
	return "", nil
}

func anthropicBlocks(raw json.RawMessage) ([]anthropicBlock, error) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, errors.New("text content must be non-empty")
		}
		return []anthropicBlock{{Type: "text", Text: text}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil || len(blocks) == 0 {
		return nil, errors.New("content is neither a string nor a list of blocks")
	}
	return blocks, nil
}

func anthropicImage(b anthropicBlock) error {
	src := b.Source
	switch {
	case src == nil:
		return errors.New("an image block needs a source")
	case src.Type == "url":
		return image(src.URL)
	case src.Type == "base64":
		if !slices.Contains([]string{"image/jpeg", "image/png", "image/gif", "image/webp"}, src.MediaType) {
			return fmt.Errorf("image media_type %q is not supported", src.MediaType)
		}
		return base64Data(src.Data)
	}
	return fmt.Errorf("image source type %q is not supported", src.Type)
}

// anthropicResult reads a tool_result's content: a string, or text (and image) blocks.
func anthropicResult(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("a tool_result's content is neither a string nor a list of blocks")
	}
	var texts []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "image":
			if err := anthropicImage(b); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("a %s block is not allowed in a tool_result", b.Type)
		}
	}
	return strings.Join(texts, "\n\n"), nil
}

// geminiPart is a part as the server reads it: exactly one of its data fields is set.
type geminiPart struct {
	Text       *string `json:"text"`
	InlineData *struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	} `json:"inlineData"`
	FileData *struct {
		FileURI string `json:"fileUri"`
	} `json:"fileData"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
	ThoughtSignature string `json:"thoughtSignature"`
}

// geminiRequest is a generateContent request as the server reads it. It and its parts are aliases of
// unnamed struct types, so that an error decoding a request describes the field's shape rather than
// naming a type of the server's.
type geminiRequest = struct {
	Contents   []geminiContent   `json:"contents"`
	Tools      []geminiTools     `json:"tools"`
	ToolConfig *geminiToolConfig `json:"toolConfig"`
}

type (
	geminiContent = struct {
		Role  string       `json:"role"`
		Parts []geminiPart `json:"parts"`
	}
	geminiTools = struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	}
	geminiToolConfig = struct {
		FunctionCallingConfig struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	}
)

func readGemini(r *http.Request, body []byte) (ask, error) {
	model, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	if method != "generateContent" && method != "streamGenerateContent" {
		return ask{}, fmt.Errorf("unknown method %q", method)
	}
	var req geminiRequest
	if err := decode(body, &req); err != nil {
		return ask{}, err
	}
	if len(req.Contents) == 0 {
		return ask{}, errors.New("* GenerateContentRequest.contents: contents is not specified")
	}
	a := ask{model: model, stream: method == "streamGenerateContent", sse: r.URL.Query().Get("alt") == "sse"}
	var called []string // the functions the model turn before called
	for i, c := range req.Contents {
		t, err := readGeminiContent(i, c, called)
		if err != nil {
			return ask{}, err
		}
		called, a.prompt = t.calls, strings.Join(t.texts, "\n\n")
	}
	forced, err := geminiForced(&req)
	if err != nil {
		return ask{}, err
	}
	a.forced = forced
	return a, nil
}

// geminiContentReading is what the server reads of content i: its texts (and function responses), the
// functions it calls, and those it answers.
type geminiContentReading struct {
	i                     int
	role                  string
	texts, calls, answers []string
}

// readGeminiContent reads content i, whose function responses must answer the calls the content before
// made: Gemini matches them by name, as many responses as calls, of the same functions.
func readGeminiContent(i int, c geminiContent, called []string) (*geminiContentReading, error) {
	if c.Role != "user" && c.Role != "model" {
		return nil, fmt.Errorf("contents[%d].role: %q is neither user nor model", i, c.Role)
	}
	if len(c.Parts) == 0 {
		return nil, fmt.Errorf("contents[%d].parts: must not be empty", i)
	}
	t := &geminiContentReading{i: i, role: c.Role}
	for j, p := range c.Parts {
		if err := t.part(j, p); err != nil {
			return nil, err
		}
	}
	if len(called) > 0 || len(t.answers) > 0 {
		slices.Sort(called)
		slices.Sort(t.answers)
		if !slices.Equal(called, t.answers) {
			return nil, fmt.Errorf("contents[%d]: please ensure that the number of function response parts is equal to the number of function call parts of the function call turn (calls %v, responses %v)", i, called, t.answers)
		}
	}
	return t, nil
}

// part reads part j, which must set exactly one of its data fields.
func (t *geminiContentReading) part(j int, p geminiPart) error {
	if dataFields(p) != 1 {
		return fmt.Errorf("contents[%d].parts[%d]: exactly one data field must be set", t.i, j)
	}
	switch {
	case p.Text != nil:
		t.texts = append(t.texts, *p.Text)
	case p.InlineData != nil:
		if p.InlineData.MimeType == "" {
			return fmt.Errorf("contents[%d].parts[%d].inlineData: mimeType is required", t.i, j)
		}
		if err := base64Data(p.InlineData.Data); err != nil {
			return fmt.Errorf("contents[%d].parts[%d].inlineData: %w", t.i, j, err)
		}
	case p.FileData != nil:
		if p.FileData.FileURI == "" {
			return fmt.Errorf("contents[%d].parts[%d].fileData: fileUri is required", t.i, j)
		}
	case p.FunctionCall != nil:
		if t.role != "model" || p.FunctionCall.Name == "" {
			return fmt.Errorf("contents[%d].parts[%d]: a functionCall belongs to a model turn and needs a name", t.i, j)
		}
		t.calls = append(t.calls, p.FunctionCall.Name)
	case p.FunctionResponse != nil:
		var obj map[string]json.RawMessage
		if json.Unmarshal(p.FunctionResponse.Response, &obj) != nil || obj == nil {
			return fmt.Errorf("contents[%d].parts[%d].functionResponse: response must be an object", t.i, j)
		}
		t.answers = append(t.answers, p.FunctionResponse.Name)
		t.texts = append(t.texts, string(bytes.TrimSpace(p.FunctionResponse.Response)))
	}
	return nil
}

// dataFields counts the data fields a part sets.
func dataFields(p geminiPart) int {
	set := 0
	for _, on := range []bool{p.Text != nil, p.InlineData != nil, p.FileData != nil, p.FunctionCall != nil, p.FunctionResponse != nil} {
		if on {
			set++
		}
	}
	return set
}

// geminiForced is the function a request forces: in mode ANY, the last of the allowed functions, or of
// all the declared ones when it allows none by name.
func geminiForced(req *geminiRequest) (string, error) {
	tc := req.ToolConfig
	if tc == nil || tc.FunctionCallingConfig.Mode != "ANY" {
		return "", nil
	}
	allowed := tc.FunctionCallingConfig.AllowedFunctionNames
	if len(allowed) == 0 {
		for _, t := range req.Tools {
			for _, d := range t.FunctionDeclarations {
				allowed = append(allowed, d.Name)
			}
		}
	}
	if len(allowed) == 0 {
		return "", errors.New("toolConfig: mode ANY needs function declarations")
	}
	return allowed[len(allowed)-1], nil
}
