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
	Model    string `json:"model"`
	Messages []struct {
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
	} `json:"messages"`
	Stream        bool `json:"stream"`
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
		switch m.Role {
		case "system", "developer", "user":
		case "assistant":
			for _, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || !json.Valid([]byte(c.Function.Arguments)) {
					return ask{}, fmt.Errorf("messages[%d]: a tool call needs an id, type function and JSON arguments", i)
				}
				calls = append(calls, c.ID)
			}
		case "tool":
			at := slices.Index(calls, m.ToolCallID)
			if at < 0 {
				return ask{}, fmt.Errorf("messages[%d]: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (no call %q)", i, m.ToolCallID)
			}
			calls = slices.Delete(calls, at, at+1)
		default:
			return ask{}, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		if m.Role == "tool" && i > 0 && req.Messages[i-1].Role == "tool" {
			// The results of one turn's calls are read together, as the other formats carry them in one turn.
			texts = append([]string{a.prompt}, texts...)
		}
		a.prompt = strings.Join(texts, "\n\n")
	}
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
		a.forced = names[len(names)-1]
	case json.Unmarshal(req.ToolChoice, &choice) == nil && choice.Function.Name != "":
		if !slices.Contains(names, choice.Function.Name) {
			return ask{}, fmt.Errorf("tool_choice names %q, which is not among the tools", choice.Function.Name)
		}
		a.forced = choice.Function.Name
	}
	return a, nil
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

func readAnthropic(body []byte) (ask, error) {
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		ToolChoice *struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tool_choice"`
	}
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
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return ask{}, fmt.Errorf("messages.%d.content: %w", i, err)
		}
		var texts, answered, called []string
		results := true // tool_result blocks must come first in their turn
		for _, b := range blocks {
			if b.Type != "tool_result" {
				results = false
			}
			switch {
			case b.Type == "text":
				if b.Text == "" {
					return ask{}, fmt.Errorf("messages.%d: text content blocks must be non-empty", i)
				}
				texts = append(texts, b.Text)
			case b.Type == "image" && m.Role == "user":
				if err := anthropicImage(b); err != nil {
					return ask{}, fmt.Errorf("messages.%d: %w", i, err)
				}
			case b.Type == "tool_use" && m.Role == "assistant":
				var input map[string]json.RawMessage
				if b.ID == "" || b.Name == "" || json.Unmarshal(b.Input, &input) != nil || input == nil {
					return ask{}, fmt.Errorf("messages.%d: a tool_use block needs an id, a name and an object input", i)
				}
				called = append(called, b.ID)
			case b.Type == "tool_result" && m.Role == "user":
				if !results {
					return ask{}, fmt.Errorf("messages.%d: tool_result blocks must come first in the user turn", i)
				}
				if !slices.Contains(uses, b.ToolUseID) {
					return ask{}, fmt.Errorf("messages.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", i, b.ToolUseID)
				}
				answered = append(answered, b.ToolUseID)
				result, err := anthropicResult(b.Content)
				if err != nil {
					return ask{}, fmt.Errorf("messages.%d: %w", i, err)
				}
				texts = append(texts, result)
				results = true
			default:
				return ask{}, fmt.Errorf("messages.%d: a %s block is not allowed in a %s turn", i, b.Type, m.Role)
			}
		}
		for _, id := range uses {
			if !slices.Contains(answered, id) {
				return ask{}, fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, id)
			}
		}
		if m.Role != "user" && m.Role != "assistant" {
			return ask{}, fmt.Errorf("messages.%d.role: %q is neither user nor assistant", i, m.Role)
		}
		uses = called
		a.prompt = strings.Join(texts, "\n\n")
	}
	names := []string{}
	for _, t := range req.Tools {
		var schema struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(t.InputSchema, &schema) != nil || schema.Type != "object" {
			return ask{}, fmt.Errorf("tools: the input_schema of %q must be of type object", t.Name)
		}
		names = append(names, t.Name)
	}
	if c := req.ToolChoice; c != nil {
		switch c.Type {
		case "tool":
			if !slices.Contains(names, c.Name) {
				return ask{}, fmt.Errorf("tool_choice: tool %q not found in tools", c.Name)
			}
			a.forced = c.Name
		case "any":
			if len(names) == 0 {
				return ask{}, errors.New("tool_choice: any needs tools")
			}
			a.forced = names[len(names)-1]
		}
	}
	return a, nil
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

func readGemini(r *http.Request, body []byte) (ask, error) {
	model, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	if method != "generateContent" && method != "streamGenerateContent" {
		return ask{}, fmt.Errorf("unknown method %q", method)
	}
	var req struct {
		Contents []struct {
			Role  string       `json:"role"`
			Parts []geminiPart `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
		ToolConfig *struct {
			FunctionCallingConfig struct {
				Mode                 string   `json:"mode"`
				AllowedFunctionNames []string `json:"allowedFunctionNames"`
			} `json:"functionCallingConfig"`
		} `json:"toolConfig"`
	}
	if err := decode(body, &req); err != nil {
		return ask{}, err
	}
	if len(req.Contents) == 0 {
		return ask{}, errors.New("* GenerateContentRequest.contents: contents is not specified")
	}
	a := ask{model: model, stream: method == "streamGenerateContent", sse: r.URL.Query().Get("alt") == "sse"}
	var called []string // the functions the model turn before called
	for i, c := range req.Contents {
		if c.Role != "user" && c.Role != "model" {
			return ask{}, fmt.Errorf("contents[%d].role: %q is neither user nor model", i, c.Role)
		}
		if len(c.Parts) == 0 {
			return ask{}, fmt.Errorf("contents[%d].parts: must not be empty", i)
		}
		var texts, calls, answers []string
		for j, p := range c.Parts {
			set := 0
			for _, on := range []bool{p.Text != nil, p.InlineData != nil, p.FileData != nil, p.FunctionCall != nil, p.FunctionResponse != nil} {
				if on {
					set++
				}
			}
			if set != 1 {
				return ask{}, fmt.Errorf("contents[%d].parts[%d]: exactly one data field must be set", i, j)
			}
			switch {
			case p.Text != nil:
				texts = append(texts, *p.Text)
			case p.InlineData != nil:
				if p.InlineData.MimeType == "" {
					return ask{}, fmt.Errorf("contents[%d].parts[%d].inlineData: mimeType is required", i, j)
				}
				if err := base64Data(p.InlineData.Data); err != nil {
					return ask{}, fmt.Errorf("contents[%d].parts[%d].inlineData: %w", i, j, err)
				}
			case p.FileData != nil:
				if p.FileData.FileURI == "" {
					return ask{}, fmt.Errorf("contents[%d].parts[%d].fileData: fileUri is required", i, j)
				}
			case p.FunctionCall != nil:
				if c.Role != "model" || p.FunctionCall.Name == "" {
					return ask{}, fmt.Errorf("contents[%d].parts[%d]: a functionCall belongs to a model turn and needs a name", i, j)
				}
				calls = append(calls, p.FunctionCall.Name)
			case p.FunctionResponse != nil:
				var obj map[string]json.RawMessage
				if json.Unmarshal(p.FunctionResponse.Response, &obj) != nil || obj == nil {
					return ask{}, fmt.Errorf("contents[%d].parts[%d].functionResponse: response must be an object", i, j)
				}
				answers = append(answers, p.FunctionResponse.Name)
				texts = append(texts, string(bytes.TrimSpace(p.FunctionResponse.Response)))
			}
		}
		if len(called) > 0 || len(answers) > 0 {
			// Gemini matches responses to calls by name: as many responses as calls, of the same functions.
			slices.Sort(called)
			slices.Sort(answers)
			if !slices.Equal(called, answers) {
				return ask{}, fmt.Errorf("contents[%d]: please ensure that the number of function response parts is equal to the number of function call parts of the function call turn (calls %v, responses %v)", i, called, answers)
			}
		}
		called = calls
		a.prompt = strings.Join(texts, "\n\n")
	}
	var names []string
	for _, t := range req.Tools {
		for _, d := range t.FunctionDeclarations {
			names = append(names, d.Name)
		}
	}
	if tc := req.ToolConfig; tc != nil && tc.FunctionCallingConfig.Mode == "ANY" {
		allowed := tc.FunctionCallingConfig.AllowedFunctionNames
		if len(allowed) == 0 {
			allowed = names
		}
		if len(allowed) == 0 {
			return ask{}, errors.New("toolConfig: mode ANY needs function declarations")
		}
		a.forced = allowed[len(allowed)-1]
	}
	return a, nil
}
