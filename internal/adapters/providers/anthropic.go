package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/conclave-ai/conclave/internal/core/wire"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// AnthropicVersion is the pinned version of the Messages API.
const AnthropicVersion = "2023-06-01"

// DefaultMaxTokens is the output limit sent when a call sets none, which happens only for a model whose
// max_output the catalog does not know (a call otherwise carries the caller's limit or the model's
// max_output): the Messages API requires one.
const DefaultMaxTokens = 4096

// Anthropic speaks the Messages API (POST {base}/v1/messages) with the key in x-api-key and a pinned
// anthropic-version. A response format travels as a forced tool whose input schema is the schema: the
// tool's input is the answer.
type Anthropic struct {
	Client   *http.Client
	Provider string
	Now      func() time.Time
}

// NewAnthropic returns an adapter for the Messages API.
func NewAnthropic(client *http.Client, provider string) *Anthropic {
	return &Anthropic{Client: client, Provider: provider}
}

// Wire shapes of a Messages request.
type (
	anthropicMessage struct {
		Role    string           `json:"role"`
		Content []anthropicBlock `json:"content"`
	}
	anthropicBlock struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"`
		// An image's source.
		Source *anthropicSource `json:"source,omitempty"`
		// A tool_use block's id, name and input.
		ID    string          `json:"id,omitempty"`
		Name  string          `json:"name,omitempty"`
		Input json.RawMessage `json:"input,omitempty"`
		// A tool_result block's call and content.
		ToolUseID string           `json:"tool_use_id,omitempty"`
		Content   []anthropicBlock `json:"content,omitempty"`
		// CacheControl marks the block as the end of a prefix to cache.
		CacheControl *anthropicCache `json:"cache_control,omitempty"`
	}
	// anthropicCache is a cache_control: ephemeral, for 5 minutes unless its ttl says an hour.
	anthropicCache struct {
		Type string `json:"type"`
		TTL  string `json:"ttl,omitempty"`
	}
	anthropicSource struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type,omitempty"`
		Data      string `json:"data,omitempty"`
		URL       string `json:"url,omitempty"`
	}
	anthropicTool struct {
		Name         string          `json:"name"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"input_schema"`
		Strict       bool            `json:"strict,omitempty"`
		CacheControl *anthropicCache `json:"cache_control,omitempty"`
	}
	anthropicToolChoice struct {
		Type                   string `json:"type"`
		Name                   string `json:"name,omitempty"`
		DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
	}
)

// anthropicImages are the media types the Messages API takes inline.
var anthropicImages = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// MessagesRequest builds the body of a Messages call.
func (a *Anthropic) MessagesRequest(call Call) ([]byte, error) {
	body, _, err := a.messagesRequest(call, false)
	return body, err
}

// messagesRequest builds the body of a Messages call, streamed or not, and returns the name of the
// forced tool that carries a response format ("" when there is none).
func (a *Anthropic) messagesRequest(call Call, stream bool) ([]byte, string, error) {
	body := map[string]any{"model": call.Upstream(), "max_tokens": DefaultMaxTokens}
	if call.MaxTokens > 0 {
		body["max_tokens"] = call.MaxTokens
	}
	if stream {
		body["stream"] = true
	}
	system, turns := splitSystem(call.Messages)
	msgs, err := anthropicMessages(turns)
	if err != nil {
		return nil, "", err
	}
	body["messages"] = msgs
	if s := anthropicSystem(system); s != nil {
		body["system"] = s
	}
	anthropicParams(body, call.Params)
	tools, choice, format := anthropicTools(call)
	if len(tools) > 0 {
		body["tools"] = tools
	}
	if choice != nil {
		if p := call.Params.ParallelToolCalls; p != nil && !*p && choice.Type != "none" {
			disable := true
			choice.DisableParallelToolUse = &disable
		}
		body["tool_choice"] = choice
	}
	raw, err := json.Marshal(body)
	return raw, format, err
}

// splitSystem separates the system messages from the conversation's turns.
func splitSystem(msgs []Message) (system, turns []Message) {
	for _, m := range msgs {
		if m.Role == "system" {
			system = append(system, m)
		} else {
			turns = append(turns, m)
		}
	}
	return system, turns
}

// anthropicSystem is the system prompt: its texts joined, or, when a part of it is marked for the
// prompt cache, its text blocks with their marks; nil when there is none.
func anthropicSystem(system []Message) any {
	var blocks []anthropicBlock
	marked := false
	for _, m := range system {
		content, err := anthropicContent(m) // text only: the door takes no image in a system prompt
		if err != nil {
			continue
		}
		for _, b := range content {
			marked = marked || b.CacheControl != nil
		}
		blocks = append(blocks, content...)
	}
	if len(blocks) == 0 {
		return nil
	}
	if marked {
		return blocks
	}
	texts := make([]string, len(system))
	for i, m := range system {
		texts[i] = m.Text()
	}
	return strings.Join(texts, "\n\n")
}

// cacheOf is a cache mark as a cache_control, or nil when there is none.
func cacheOf(ttl string) *anthropicCache {
	switch ttl {
	case "":
		return nil
	case "1h":
		return &anthropicCache{Type: "ephemeral", TTL: ttl}
	}
	return &anthropicCache{Type: "ephemeral"}
}

// markLast marks a turn's last block with the turn's cache mark, unless it has one.
func markLast(blocks []anthropicBlock, ttl string) {
	if n := len(blocks); n > 0 && ttl != "" && blocks[n-1].CacheControl == nil {
		blocks[n-1].CacheControl = cacheOf(ttl)
	}
}

// anthropicParams sets the sampling parameters the Messages API has fields for.
func anthropicParams(body map[string]any, p Params) {
	if p.Temperature != nil {
		body["temperature"] = *p.Temperature
	}
	if p.TopP != nil {
		body["top_p"] = *p.TopP
	}
	if len(p.Stop) > 0 {
		body["stop_sequences"] = p.Stop
	}
	if p.User != "" {
		body["metadata"] = map[string]any{"user_id": p.User}
	}
}

// anthropicTools returns the tools, the tool choice and the name of the response format's forced
// tool. The format's tool is forced unless the caller's tools may be called: then the model must call
// one of them or answer through the format's tool (tool_choice any), as OpenAI's model either calls a
// tool or answers in the format.
func anthropicTools(call Call) ([]anthropicTool, *anthropicToolChoice, string) {
	tools := anthropicToolList(call.Tools)
	choice := anthropicChoice(call.ToolChoice)
	if p := call.Params.ParallelToolCalls; choice == nil && len(tools) > 0 && p != nil && !*p {
		choice = &anthropicToolChoice{Type: "auto"} // disable_parallel_tool_use lives in the tool choice
	}
	f := call.ResponseFormat
	if f == nil || choice != nil && (choice.Type == "any" || choice.Type == "tool") {
		return tools, choice, "" // a tool must be called: the format does not apply to this turn
	}
	name := formatToolName(f.Name, call.Tools)
	schema := f.Schema
	if f.Type == FormatJSONObject || len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	tools = append(tools, anthropicTool{Name: name, Description: "Give your answer as this tool's input: the JSON the reply must be.", InputSchema: schema})
	if len(call.Tools) > 0 && (choice == nil || choice.Type == "auto") {
		return tools, &anthropicToolChoice{Type: "any"}, name
	}
	return tools, &anthropicToolChoice{Type: "tool", Name: name}, name
}

// anthropicToolList writes the caller's tools; a tool without parameters takes an empty object.
func anthropicToolList(in []Tool) []anthropicTool {
	var tools []anthropicTool
	for _, t := range in {
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		tools = append(tools, anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schema, Strict: t.Strict, CacheControl: cacheOf(t.CacheControl)})
	}
	return tools
}

// anthropicChoiceTypes are the Messages API's tool choice types, by mode.
var anthropicChoiceTypes = map[string]string{
	ToolChoiceAuto: "auto", ToolChoiceRequired: "any", ToolChoiceNone: "none", ToolChoiceFunction: "tool",
}

// anthropicChoice writes the caller's tool choice, or nil when there is none (or of no known mode).
func anthropicChoice(c *ToolChoice) *anthropicToolChoice {
	if c == nil {
		return nil
	}
	typ, ok := anthropicChoiceTypes[c.Mode]
	if !ok {
		return nil
	}
	choice := &anthropicToolChoice{Type: typ}
	if c.Mode == ToolChoiceFunction {
		choice.Name = c.Name
	}
	return choice
}

// formatToolName names the response format's tool: the format's name when it is a valid tool name,
// else "json_answer", never one of the caller's tools.
func formatToolName(name string, tools []Tool) string {
	valid := name != "" && len(name) <= 64 && strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) < 0
	if !valid {
		name = "json_answer"
	}
	for taken := true; taken; {
		taken = false
		for _, t := range tools {
			if t.Name == name {
				name, taken = name+"_", true
			}
		}
	}
	return name
}

// anthropicMessages writes the turns as Messages turns: a tool turn becomes a tool_result block of a
// user turn, consecutive tool results share one user turn (the API wants every result of an assistant
// turn's calls in the next turn, first), and a user turn right after them joins it.
func anthropicMessages(turns []Message) ([]anthropicMessage, error) {
	var out []anthropicMessage
	results := false // the last turn written holds tool results
	for _, m := range turns {
		switch m.Role {
		case "tool":
			block := anthropicBlock{Type: "tool_result", ToolUseID: wire.ToolUseID(m.ToolCallID), CacheControl: cacheOf(m.CacheControl)}
			content, err := anthropicContent(Message{Role: m.Role, Content: m.Content, Parts: m.Parts})
			if err != nil {
				return nil, err
			}
			block.Content = content
			if results {
				last := &out[len(out)-1]
				last.Content = append(last.Content, block)
			} else {
				out = append(out, anthropicMessage{Role: "user", Content: []anthropicBlock{block}})
			}
			results = true
			continue
		case "assistant":
			content, err := anthropicContent(m)
			if err != nil {
				return nil, err
			}
			for _, c := range m.ToolCalls {
				input, err := toolInput(c)
				if err != nil {
					return nil, err
				}
				content = append(content, anthropicBlock{Type: "tool_use", ID: wire.ToolUseID(c.ID), Name: c.Name, Input: input})
			}
			markLast(content, m.CacheControl)
			out = append(out, anthropicMessage{Role: "assistant", Content: content})
		default:
			content, err := anthropicContent(m)
			if err != nil {
				return nil, err
			}
			if results {
				last := &out[len(out)-1]
				last.Content = append(last.Content, content...)
			} else {
				out = append(out, anthropicMessage{Role: "user", Content: content})
			}
		}
		results = false
	}
	return out, nil
}

// anthropicContent writes a turn's text and images as blocks. Empty text blocks are left out: the API
// refuses them.
func anthropicContent(m Message) ([]anthropicBlock, error) {
	blocks, err := anthropicParts(m)
	markLast(blocks, m.CacheControl)
	return blocks, err
}

// anthropicParts writes a turn's text and images as blocks, each part's cache mark with it.
func anthropicParts(m Message) ([]anthropicBlock, error) {
	if m.Parts == nil {
		if m.Content == "" {
			return []anthropicBlock{}, nil
		}
		return []anthropicBlock{{Type: "text", Text: m.Content}}, nil
	}
	blocks := []anthropicBlock{}
	for _, p := range m.Parts {
		if p.Type != PartImage {
			if p.Text != "" {
				blocks = append(blocks, anthropicBlock{Type: "text", Text: p.Text, CacheControl: cacheOf(p.CacheControl)})
			}
			continue
		}
		img, err := imageOf(p.ImageURL)
		if err != nil {
			return nil, err
		}
		if img.URL != "" {
			blocks = append(blocks, anthropicBlock{Type: "image", Source: &anthropicSource{Type: "url", URL: img.URL}, CacheControl: cacheOf(p.CacheControl)})
			continue
		}
		if !anthropicImages[img.MediaType] {
			return nil, fmt.Errorf("an image of type %s: the Messages API takes jpeg, png, gif and webp", img.MediaType)
		}
		blocks = append(blocks, anthropicBlock{Type: "image", Source: &anthropicSource{Type: "base64", MediaType: img.MediaType, Data: img.Data},
			CacheControl: cacheOf(p.CacheControl)})
	}
	return blocks, nil
}

// toolInput is a tool call's arguments as the JSON object a tool_use block holds.
func toolInput(c ToolCall) (json.RawMessage, error) {
	args := strings.TrimSpace(c.Arguments)
	if args == "" {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("the arguments of tool call %q (%s) are not a JSON object", c.ID, c.Name)
	}
	return json.RawMessage(args), nil
}

// Complete implements Backend.
func (a *Anthropic) Complete(ctx context.Context, call Call) (Reply, error) {
	dropped := Dropped(KindAnthropic, call.Params)
	reply, err := a.complete(ctx, call)
	reply.Dropped = dropped
	return reply, err
}

func (a *Anthropic) complete(ctx context.Context, call Call) (Reply, error) {
	body, format, err := a.messagesRequest(call, false)
	if err != nil {
		return Reply{}, refused(a.Provider, call.Model, err)
	}
	x, err := post(ctx, a.Client, a.url(call), a.header(call), body, a.Provider, call.Model)
	if err != nil {
		return Reply{}, err
	}
	return withoutKey(call.Key)(a.parseMessage(call.Model, x.status, x.header, x.body, format))
}

func (a *Anthropic) url(call Call) string {
	return strings.TrimRight(call.BaseURL, "/") + "/v1/messages"
}

func (a *Anthropic) header(call Call) http.Header {
	h := http.Header{}
	h.Set("anthropic-version", AnthropicVersion)
	if call.Key.Set() {
		h.Set("x-api-key", call.Key.Reveal())
	}
	return h
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicUsage is a Messages usage: input_tokens leaves out the tokens read from and written to
// the prompt cache, which are counted apart.
type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             int  `json:"output_tokens"`
	CacheReadInputTokens     int  `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
}

// input sets u's input tokens on a usage, the cached ones counted among them, where u says them.
func (u *anthropicUsage) input(to *Usage) {
	read, written := max(u.CacheReadInputTokens, 0), max(u.CacheCreationInputTokens, 0)
	if u.InputTokens != nil && *u.InputTokens+read+written > 0 {
		to.InputTokens = *u.InputTokens + read + written
		to.CacheReadTokens, to.CacheWriteTokens = read, written
	}
}

type anthropicResponse struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Model   string `json:"model"`
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason string          `json:"stop_reason"`
	Usage      anthropicUsage  `json:"usage"`
	Error      *anthropicError `json:"error"`
}

// anthropicStatus is the HTTP status each error type of the Messages API comes with: what an error
// event in a stream, or an error body behind a 200, is classified by.
var anthropicStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest, "authentication_error": http.StatusUnauthorized, "billing_error": http.StatusPaymentRequired,
	"permission_error": http.StatusForbidden, "not_found_error": http.StatusNotFound, "request_too_large": http.StatusRequestEntityTooLarge,
	"rate_limit_error": http.StatusTooManyRequests, "api_error": http.StatusInternalServerError, "timeout_error": http.StatusGatewayTimeout,
	"overloaded_error": 529,
}

// ParseMessage reads a Messages answer, or the failure it describes: {"type": "error", "error": {"type",
// "message"}}, 529 overloaded_error among them.
func (a *Anthropic) ParseMessage(model string, status int, header http.Header, raw []byte) (Reply, error) {
	return a.parseMessage(model, status, header, raw, "")
}

// parseMessage reads a Messages answer; the input of the format's tool (when named) is the reply's text.
func (a *Anthropic) parseMessage(model string, status int, header http.Header, raw []byte, format string) (Reply, error) {
	limits := a.limits(header)
	var resp anthropicResponse
	decodeErr := json.Unmarshal(raw, &resp)
	if status/100 != 2 || resp.Type == "error" {
		return Reply{RateLimit: limits}, a.classify(model, status, resp.Error, string(raw), limits)
	}
	if decodeErr != nil {
		return Reply{RateLimit: limits}, failure(a.Provider, model, status, resilience.ProviderUnavailable, resilience.ScopeProvider, nil,
			"the answer is not a message: "+decodeErr.Error())
	}
	reply := Reply{ServedModel: resp.Model, FinishReason: resp.StopReason, UpstreamRequestID: header.Get("request-id"), RateLimit: limits,
		Usage: Usage{OutputTokens: resp.Usage.OutputTokens}}
	resp.Usage.input(&reply.Usage)
	if reply.UpstreamRequestID == "" {
		reply.UpstreamRequestID = resp.ID
	}
	var answer json.RawMessage
	reply.Text, reply.ToolCalls, answer = readContent(&resp, format)
	if answer != nil {
		reply.Text = string(answer)
		reply.FinishReason = formatFinish(reply.FinishReason, reply.ToolCalls)
	}
	return reply, nil
}

// readContent reads a message's content blocks: the text of its text blocks, its tool calls (up to the
// bound, each with an id and at least an empty object for arguments) and the input of the format's
// tool, when format names one and it was called.
func readContent(resp *anthropicResponse, format string) (string, []ToolCall, json.RawMessage) {
	var text strings.Builder
	var calls []ToolCall
	var answer json.RawMessage
	for _, c := range resp.Content {
		switch {
		case c.Type == "text":
			text.WriteString(c.Text)
		case c.Type == "tool_use" && format != "" && c.Name == format:
			answer = c.Input
		case c.Type == "tool_use" && len(calls) < maxToolCalls:
			id := c.ID
			if id == "" {
				id = syntheticCallID(resp.ID, strconv.Itoa(len(calls)))
			}
			args := string(c.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			calls = append(calls, ToolCall{ID: id, Name: c.Name, Arguments: args})
		}
	}
	return text.String(), calls, answer
}

// formatFinish is the finish reason of an answer given through the format's tool: the model called
// that tool only because the request's format made it, so unless it called another, its turn ended.
func formatFinish(reason string, calls []ToolCall) string {
	if reason == "tool_use" && len(calls) == 0 {
		return "end_turn"
	}
	return reason
}

func (a *Anthropic) limits(header http.Header) *ratelimit.Upstream {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	return limitHeaders(header, now())
}

// classify maps a failed call onto the error table; an error without an HTTP status of its own (in a
// 200, or an event of a stream) takes the status its type comes with.
func (a *Anthropic) classify(model string, status int, e *anthropicError, raw string, limits *ratelimit.Upstream) error {
	msg, kind := raw, ""
	if e != nil {
		msg, kind = e.Message, e.Type
	}
	if status/100 == 2 {
		status = http.StatusBadGateway
		if s, ok := anthropicStatus[kind]; ok {
			status = s
		}
	}
	return classifyStatus(a.Provider, model, status, msg+" "+kind, msg, ProfileOf(a.Provider), limits)
}

// Stream implements Streamer: the Messages call with stream: true, read as its events come
// (message_start, content_block_start / delta / stop, message_delta with the usage, message_stop; ping
// and events of later versions are skipped).
func (a *Anthropic) Stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	dropped := Dropped(KindAnthropic, call.Params)
	reply, err := a.stream(ctx, call, strikeKey(call.Key, onDelta))
	reply.Dropped = dropped
	return withoutKey(call.Key)(reply, err)
}

func (a *Anthropic) stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error) {
	body, format, err := a.messagesRequest(call, true)
	if err != nil {
		return Reply{}, refused(a.Provider, call.Model, err)
	}
	return streamed(ctx, a.Client, a.url(call), a.header(call), body, a.Provider, call.Model,
		func(status int, header http.Header, b []byte) (Reply, error) {
			return a.parseMessage(call.Model, status, header, b, format)
		},
		func(status int, header http.Header, r io.Reader) (Reply, error) {
			return a.ReadMessageStream(ctx, call.Model, format, status, header, r, onDelta)
		}, onDelta)
}

// anthropicEvent is one event of a Messages stream.
type anthropicEvent struct {
	Type    string             `json:"type"`
	Message *anthropicResponse `json:"message"`
	Index   int                `json:"index"`
	Block   *struct {
		Type string `json:"type"`
		Text string `json:"text"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *anthropicError `json:"error"`
	// raw is the event's data as it came: an error event that is not of the format is quoted whole.
	raw []byte
}

// ReadMessageStream reads a streamed Messages answer: text_delta pieces are text, a tool_use block's
// input_json_delta pieces are its arguments (the format's tool's are text), an error event is classified
// by its type, and a stream that ends before message_stop was cut off. format names the response
// format's tool, or is empty.
func (a *Anthropic) ReadMessageStream(ctx context.Context, model, format string, status int, header http.Header, body io.Reader, onDelta func(Delta)) (Reply, error) {
	s := &messageStream{a: a, model: model, format: format, status: status, onDelta: onDelta,
		reply:  Reply{UpstreamRequestID: header.Get("request-id"), RateLimit: a.limits(header)},
		blocks: map[int]int{}, hasInput: map[int]bool{}}
	err := readStream(ctx, body, s, a.Provider, model, status)
	return s.reply, err
}

// What a content block of a Messages stream is, when it is not a tool call (whose index among the
// reply's calls it is then): text, the format's tool, or a thinking block or another.
const (
	textBlock   = -1
	formatBlock = -2
	otherBlock  = -3
)

// messageStream is what a streamed Messages answer has said so far. The reply's text and tool calls
// are set at message_stop.
type messageStream struct {
	a       *Anthropic
	model   string
	format  string
	status  int
	onDelta func(Delta)
	reply   Reply
	// text is the text blocks' text; answer the input of the format's tool, answered says it was called.
	text, answer strings.Builder
	answered     bool
	calls        toolCalls
	// blocks say what each content block is; hasInput which have streamed some input (or stopped).
	blocks   map[int]int
	hasInput map[int]bool
	stopped  bool
}

// messageHandlers are the handlers of the events of a Messages stream, by type. Events of other
// types (ping, which says nothing, and those of later versions) are skipped.
var messageHandlers = map[string]func(*messageStream, *anthropicEvent) (Delta, error){
	"message_start":       (*messageStream).messageStart,
	"content_block_start": (*messageStream).blockStart,
	"content_block_delta": (*messageStream).blockDelta,
	"content_block_stop":  (*messageStream).blockStop,
	"message_delta":       (*messageStream).messageDelta,
	"message_stop":        (*messageStream).messageStop,
	"error":               (*messageStream).streamError,
}

// whole reports false: the stream ends with message_stop, never with the connection.
func (s *messageStream) whole() bool { return false }

// event reads one event with its type's handler and passes on what it says.
func (s *messageStream) event(ev sseEvent) (bool, error) {
	e := anthropicEvent{raw: ev.data}
	if err := json.Unmarshal(ev.data, &e); err != nil {
		return false, s.malformed("an event of the stream is not JSON: " + err.Error())
	}
	handle, ok := messageHandlers[e.Type]
	if !ok {
		return false, nil
	}
	d, err := handle(s, &e)
	if err != nil {
		return false, err
	}
	relay(d, s.onDelta)
	return s.stopped, nil
}

// messageStart reads the served model, the message's id and the usage so far.
func (s *messageStream) messageStart(e *anthropicEvent) (Delta, error) {
	m := e.Message
	if m == nil {
		return Delta{}, nil
	}
	s.reply.ServedModel = m.Model
	if s.reply.UpstreamRequestID == "" {
		s.reply.UpstreamRequestID = m.ID
	}
	m.Usage.input(&s.reply.Usage)
	s.reply.Usage.OutputTokens = m.Usage.OutputTokens
	return Delta{}, nil
}

// blockStart opens a content block: a text block with its first text, a tool_use block as a tool call
// (or as the answer, when it is the format's tool), any other as one to skip. A block opened again,
// or beyond the bound on blocks, is ignored.
func (s *messageStream) blockStart(e *anthropicEvent) (Delta, error) {
	if _, seen := s.blocks[e.Index]; seen || len(s.blocks) >= 4*maxToolCalls || e.Block == nil {
		return Delta{}, nil
	}
	switch b := e.Block; {
	case b.Type == "text":
		s.blocks[e.Index] = textBlock
		s.text.WriteString(b.Text)
		return Delta{Text: b.Text}, nil
	case b.Type == "tool_use" && s.format != "" && b.Name == s.format:
		s.blocks[e.Index], s.answered = formatBlock, true
	case b.Type == "tool_use":
		return s.openToolCall(e.Index, b.ID, b.Name)
	default:
		s.blocks[e.Index] = otherBlock
	}
	return Delta{}, nil
}

// openToolCall opens the next tool call for a block, with the block's id or a synthetic one.
func (s *messageStream) openToolCall(block int, id, name string) (Delta, error) {
	i := len(s.calls.calls)
	piece := ToolCallDelta{Index: i, ID: id, Name: name}
	if piece.ID == "" {
		piece.ID = syntheticCallID(s.reply.UpstreamRequestID, strconv.Itoa(i))
	}
	if err := s.calls.add(piece); err != nil {
		return Delta{}, s.malformed(err.Error())
	}
	s.blocks[block] = i
	return Delta{ToolCalls: []ToolCallDelta{piece}}, nil
}

// blockDelta reads a piece of an open block by its delta type: text_delta is text, input_json_delta a
// piece of a tool's input. Other pieces (thinking, signatures) and pieces of the wrong type for their
// block are skipped.
func (s *messageStream) blockDelta(e *anthropicEvent) (Delta, error) {
	b, ok := s.blocks[e.Index]
	if !ok || e.Delta == nil {
		return Delta{}, nil
	}
	switch {
	case e.Delta.Type == "text_delta" && b == textBlock:
		s.text.WriteString(e.Delta.Text)
		return Delta{Text: e.Delta.Text}, nil
	case e.Delta.Type == "input_json_delta":
		return s.inputDelta(e.Index, b, e.Delta.PartialJSON), nil
	}
	return Delta{}, nil
}

// inputDelta reads a piece of a tool's input: the answer's text for the format's tool, a piece of the
// arguments for a tool call.
func (s *messageStream) inputDelta(index, block int, input string) Delta {
	switch {
	case block == formatBlock:
		s.answer.WriteString(input)
		s.hasInput[index] = s.hasInput[index] || input != ""
		return Delta{Text: input}
	case block >= 0:
		piece := ToolCallDelta{Index: block, Arguments: input}
		s.calls.add(piece)
		s.hasInput[index] = s.hasInput[index] || input != ""
		return Delta{ToolCalls: []ToolCallDelta{piece}}
	}
	return Delta{}
}

// blockStop closes a block. A tool called without arguments streams no input: its input is the empty
// object.
func (s *messageStream) blockStop(e *anthropicEvent) (Delta, error) {
	var d Delta
	switch b, ok := s.blocks[e.Index]; {
	case ok && b == formatBlock && !s.hasInput[e.Index]:
		d.Text = "{}"
		s.answer.WriteString(d.Text)
	case ok && b >= 0 && !s.hasInput[e.Index]:
		piece := ToolCallDelta{Index: b, Arguments: "{}"}
		s.calls.add(piece)
		d.ToolCalls = []ToolCallDelta{piece}
	}
	s.hasInput[e.Index] = true
	return d, nil
}

// messageDelta reads the stop reason and the usage, which counts the whole answer so far.
func (s *messageStream) messageDelta(e *anthropicEvent) (Delta, error) {
	if e.Delta != nil && e.Delta.StopReason != "" {
		s.reply.FinishReason = e.Delta.StopReason
	}
	if u := e.Usage; u != nil {
		s.reply.Usage.OutputTokens = u.OutputTokens
		u.input(&s.reply.Usage)
	}
	return Delta{}, nil
}

// messageStop ends the stream: the reply gets its text and tool calls, or, when the format's tool was
// called, its input as the text, as ParseMessage reads it.
func (s *messageStream) messageStop(*anthropicEvent) (Delta, error) {
	s.stopped = true
	s.reply.Text, s.reply.ToolCalls = s.text.String(), s.calls.done()
	if s.answered {
		s.reply.Text, s.reply.FinishReason = s.answer.String(), formatFinish(s.reply.FinishReason, s.reply.ToolCalls)
	}
	return Delta{}, nil
}

// streamError fails the stream with the error event, classified by its type.
func (s *messageStream) streamError(e *anthropicEvent) (Delta, error) {
	return Delta{}, s.a.classify(s.model, http.StatusOK, e.Error, string(e.raw), s.reply.RateLimit)
}

// malformed is the failure of a stream that breaks the format.
func (s *messageStream) malformed(msg string) error {
	return failure(s.a.Provider, s.model, s.status, resilience.ProviderUnavailable, resilience.ScopeProvider, nil, msg)
}
