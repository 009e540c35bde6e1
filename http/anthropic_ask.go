package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// The translation of Anthropic's Messages request into the ask the OpenAI door builds: the system
// prompt becomes a system turn; a user turn's tool_result blocks become tool turns (before the rest of
// that turn, as the API orders them); an assistant's tool_use blocks become its tool calls; images
// become image parts. Each provider's adapter then writes the ask in its own wire format, Anthropic's
// among them. Every problem is collected under the field it concerns, as in the OpenAI door.

// noCaching is why cache_control is refused wherever it appears.
const noCaching = "is not supported: Conclave carries no prompt-caching hints; send the request without it"

// toolUseID is the Messages API's rule for a tool_use id.
var toolUseID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// anthropicBlock is a content block of a request: text, image, tool_use or tool_result.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Source    json.RawMessage `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Caller    json.RawMessage `json:"caller"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	Citations json.RawMessage `json:"citations"`
}

// blockFields are the keys each type of block may have; cache_control is refused by name apart.
var blockFields = map[string]map[string]bool{
	"text":        {"type": true, "text": true, "citations": true},
	"image":       {"type": true, "source": true},
	"tool_use":    {"type": true, "id": true, "name": true, "input": true, "caller": true},
	"tool_result": {"type": true, "tool_use_id": true, "content": true, "is_error": true},
}

// readBlocks reads content that is a string (one text block) or a list of blocks, each checked for
// the keys its type allows. It returns nil when the content is not usable at all.
func readBlocks(raw json.RawMessage, field string, bad *report) []anthropicBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: &s}}
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, "must be a string or a list of content blocks")
		return nil
	}
	if len(items) == 0 || len(items) > intake.MaxParts {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d blocks", intake.MaxParts))
		return nil
	}
	blocks := make([]anthropicBlock, 0, len(items))
	for i, item := range items {
		bf := fmt.Sprintf("%s[%d]", field, i)
		var b anthropicBlock
		var keys map[string]json.RawMessage
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &b) != nil || keys == nil {
			bad.Add(bf, "must be a content block: an object with a type and the fields of that type")
			b = anthropicBlock{Type: unreadable} // kept, so later blocks keep their index
		}
		if allowed, ok := blockFields[b.Type]; ok {
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				switch {
				case allowed[k]:
				case k == "cache_control":
					if _, set := given(keys, k); set {
						bad.Add(bf+"."+k, noCaching)
					}
				default:
					bad.Add(bf+"."+k, "unknown field")
				}
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// unreadable is the type of a block that is no object of the block's shape, already refused.
const unreadable = "\x00unreadable"

// unsupportedBlock says why a block of a type Conclave does not carry is refused.
func unsupportedBlock(b anthropicBlock, bf string, bad *report) {
	switch b.Type {
	case unreadable:
	case "":
		bad.Add(bf+".type", "is required: text, image, tool_use or tool_result")
	case "thinking", "redacted_thinking", "document", "search_result", "server_tool_use", "web_search_tool_result",
		"web_fetch_tool_result", "code_execution_tool_result", "container_upload", "mcp_tool_use", "mcp_tool_result":
		bad.Add(bf+".type", fmt.Sprintf("blocks of type %s are not supported: Conclave carries text, image, tool_use and tool_result", b.Type))
	default:
		bad.Add(bf+".type", fmt.Sprintf("unknown block type %q (want text, image, tool_use or tool_result)", problems.Clip(b.Type, 32)))
	}
}

// blockText reads a text block: non-empty, as the API requires, and without citations.
func blockText(b anthropicBlock, bf string, bad *report) (*messages.ContentPart, bool) {
	if b.Text == nil {
		bad.Add(bf+".text", "is required: a string")
		return nil, false
	}
	if *b.Text == "" {
		bad.Add(bf+".text", "must not be empty, as the Messages API requires")
		return nil, false
	}
	if c := bytes.TrimSpace(b.Citations); len(c) > 0 && string(c) != "null" && string(c) != "[]" {
		bad.Add(bf+".citations", "is not supported: Conclave carries no documents to cite")
		return nil, false
	}
	return &messages.ContentPart{Type: "text", Text: *b.Text}, true
}

// blockImage reads an image block's source as the part at: base64 data of a PNG, JPEG, GIF or WebP
// image, which travels as a data URI, or an https URL; intake judges either as every door's image.
func blockImage(b anthropicBlock, bf, at string, bad *report) *messages.ContentPart {
	var src struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(b.Source, &keys) != nil || json.Unmarshal(b.Source, &src) != nil || keys == nil {
		bad.Add(bf+".source", "is required: {type: base64, media_type, data} or {type: url, url}")
		return nil
	}
	allowed := map[string]bool{"type": true, "media_type": src.Type == "base64", "data": src.Type == "base64", "url": src.Type == "url"}
	bad.unknown(bf+".source", keys, has(allowed))
	switch src.Type {
	case "base64":
		if !intake.ImageTypes[src.MediaType] {
			bad.Add(bf+".source.media_type", "must be image/jpeg, image/png, image/gif or image/webp")
			return nil
		}
		uri := "data:" + src.MediaType + ";base64," + src.Data
		return imagePart(&uri, nil, bf+".source.data", bf+".source", at, bad)
	case "url":
		return imagePart(&src.URL, nil, bf+".source.url", bf+".source", at, bad)
	}
	bad.Add(bf+".source.type", fmt.Sprintf("image sources of type %q are not supported (base64 and url are)", problems.Clip(src.Type, 32)))
	return nil
}

// readSystem reads the system prompt: a string or a list of text blocks.
func readSystem(raw json.RawMessage, bad *report) ([]*messages.ContentPart, string) {
	blocks := readBlocks(raw, "system", bad)
	var parts []*messages.ContentPart
	var texts []string
	for i, b := range blocks {
		bf := fmt.Sprintf("system[%d]", i)
		if b.Type != "text" {
			bad.Add(bf+".type", "a system prompt holds text blocks only")
			continue
		}
		if p, ok := blockText(b, bf, bad); ok {
			parts, texts = append(parts, p), append(texts, p.Text)
		}
	}
	return parts, strings.Join(texts, "\n")
}

// into puts a conversation into a request, as the chat door does: its turns into the ask, for the
// models, and its transcript as the task, which classification reads.
func (c *conversation) into(route *messages.RouteRequest, ask *messages.Ask) {
	ask.Messages = c.turns
	route.Task = renderTask(c.roles, c.texts)
}

// readAnthropicConversation reads the system prompt and the messages into a conversation. A tool_result
// must answer a tool_use of the assistant turn just before, and every tool_use must be answered in the
// next turn, as the Messages API requires (and as OpenAI's format requires of tool calls).
func readAnthropicConversation(fields map[string]json.RawMessage, bad *report) *conversation {
	c := &conversation{}
	if raw, ok := given(fields, "system"); ok {
		if parts, text := readSystem(raw, bad); len(parts) > 0 {
			bad.name(turnField(0), "system")
			c.add(&messages.ChatMessage{Role: "system", Content: parts}, "system", text)
		}
	}
	bad.visit("messages")
	raw, ok := fields["messages"]
	if !ok {
		bad.Add("messages", "is required")
		return nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("messages", "must be a list of messages with role and content")
		return nil
	}
	if len(items) == 0 || len(items) > maxChatMessages {
		bad.Add("messages", fmt.Sprintf("must hold between 1 and %d messages", maxChatMessages))
		return nil
	}
	var pending []string // the tool_use ids of the assistant turn just before
	for i, item := range items {
		field := fmt.Sprintf("messages[%d]", i)
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &m) != nil || keys == nil {
			bad.Add(field, "must be an object with role and content")
			pending = nil
			continue
		}
		bad.unknown(field, keys, only("role", "content"))
		if m.Role != "user" && m.Role != "assistant" {
			bad.Add(field+".role", fmt.Sprintf("unknown role %q (want user or assistant; the system prompt is the top-level system)", problems.Clip(m.Role, 32)))
			pending = nil
			continue
		}
		if len(m.Content) == 0 || string(m.Content) == "null" {
			bad.Add(field+".content", "is required")
			pending = nil
			continue
		}
		blocks := readBlocks(m.Content, field+".content", bad)
		if m.Role == "assistant" {
			if len(pending) > 0 {
				bad.Add(field, fmt.Sprintf("the tool_use blocks of the assistant turn before need their tool_result in a user turn first (%s)", problems.Clip(strings.Join(pending, ", "), 128)))
			}
			pending = readAssistantTurn(c, blocks, field, bad)
			continue
		}
		readUserTurn(c, blocks, field, pending, bad)
		pending = nil
	}
	if len(pending) > 0 {
		bad.Add("messages", "the last assistant turn's tool_use blocks need their tool_result in a user turn after it")
	}
	return c
}

// readAssistantTurn reads an assistant's turn, message field, its text and its tool calls, and returns
// the ids of its calls, which the next turn must answer.
func readAssistantTurn(c *conversation, blocks []anthropicBlock, field string, bad *report) []string {
	at := turnField(len(c.turns))
	bad.name(at, field)
	turn := &messages.ChatMessage{Role: "assistant"}
	var texts, called []string
	for i, b := range blocks {
		bf := fmt.Sprintf("%s.content[%d]", field, i)
		switch b.Type {
		case "text":
			if p, ok := blockText(b, bf, bad); ok {
				bad.name(fmt.Sprintf("%s.content[%d]", at, len(turn.Content)), bf)
				turn.Content, texts = append(turn.Content, p), append(texts, p.Text)
			}
		case "tool_use":
			call, text := readToolUse(b, bf, fmt.Sprintf("%s.tool_calls[%d]", at, len(turn.ToolCalls)), bad)
			turn.ToolCalls, called, texts = append(turn.ToolCalls, call), append(called, call.Id), append(texts, text)
		case "image", "tool_result":
			bad.Add(bf+".type", fmt.Sprintf("%s blocks go in user turns only", b.Type))
		default:
			unsupportedBlock(b, bf, bad)
		}
	}
	if len(turn.Content) > 0 || len(turn.ToolCalls) > 0 {
		c.add(turn, "assistant", strings.Join(texts, "\n"))
	}
	return called
}

// readToolUse reads a tool_use block as the tool call at, as every door reads one (its id, the name of
// a function, its input a JSON object, which travels compacted as the call's arguments); the id must
// also be of the Messages API's characters. It returns the call and its text for the task.
func readToolUse(b anthropicBlock, bf, at string, bad *report) (*messages.ToolCall, string) {
	if b.ID != "" && !toolUseID.MatchString(b.ID) {
		bad.Add(bf+".id", "must be letters, digits, '_' or '-'")
	}
	var args bytes.Buffer
	if len(bytes.TrimSpace(b.Input)) == 0 || json.Compact(&args, b.Input) != nil {
		bad.Add(bf+".input", "is required: a JSON object")
		args.Reset()
		args.WriteString("{}")
	}
	call, text := toolCallOf(b.ID, b.Name, args.String(), at, bf+".id", bf+".name", bf+".input", bad)
	if c := bytes.TrimSpace(b.Caller); len(c) > 0 && string(c) != "null" {
		var caller struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(c, &caller) != nil || caller.Type != "direct" {
			bad.Add(bf+".caller", "is not supported but as {\"type\": \"direct\"}: Conclave runs no server tools")
		}
	}
	return call, text
}

// readUserTurn reads a user's turn, message field: its tool_result blocks first, each a tool turn
// answering a call of the assistant turn before (pending), then its text and images as one user turn.
func readUserTurn(c *conversation, blocks []anthropicBlock, field string, pending []string, bad *report) {
	turn := &messages.ChatMessage{Role: "user"}
	at := "" // the user turn's name, once its first text or image is read (after its tool turns)
	part := func() string {
		if at == "" {
			at = turnField(len(c.turns))
			bad.name(at, field)
		}
		return fmt.Sprintf("%s.content[%d]", at, len(turn.Content))
	}
	var texts []string
	answered := map[string]bool{}
	for i, b := range blocks {
		bf := fmt.Sprintf("%s.content[%d]", field, i)
		switch b.Type {
		case "text":
			if p, ok := blockText(b, bf, bad); ok {
				bad.name(part(), bf)
				turn.Content, texts = append(turn.Content, p), append(texts, p.Text)
			}
		case "image":
			pf := part()
			bad.name(pf, bf)
			if p := blockImage(b, bf, pf, bad); p != nil {
				turn.Content, texts = append(turn.Content, p), append(texts, "[image]")
			}
		case "tool_result":
			switch {
			case len(turn.Content) > 0:
				bad.Add(bf, "tool_result blocks come first in a user turn, before its text and images, as the Messages API requires")
			case !slices.Contains(pending, b.ToolUseID):
				bad.Add(bf+".tool_use_id", fmt.Sprintf("%q answers no tool_use of the assistant turn before", problems.Clip(b.ToolUseID, 64)))
			case answered[b.ToolUseID]:
				bad.Add(bf+".tool_use_id", fmt.Sprintf("%q is answered by an earlier tool_result too", b.ToolUseID))
			default:
				answered[b.ToolUseID] = true
				if result, text, ok := readToolResult(b, bf, bad); ok {
					tf := turnField(len(c.turns))
					bad.name(tf, bf)
					bad.name(tf+".tool_call_id", bf+".tool_use_id")
					c.add(&messages.ChatMessage{Role: "tool", ToolCallId: b.ToolUseID, Content: result}, "tool", text)
				}
			}
		case "tool_use":
			bad.Add(bf+".type", "tool_use blocks go in assistant turns only")
		default:
			unsupportedBlock(b, bf, bad)
		}
	}
	var missing []string
	for _, id := range pending {
		if !answered[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		bad.Add(field, fmt.Sprintf("must answer each tool_use of the assistant turn before with a tool_result (%s has none)", problems.Clip(strings.Join(missing, ", "), 128)))
	}
	if len(turn.Content) > 0 {
		c.add(turn, "user", strings.Join(texts, "\n"))
	}
}

// readToolResult reads a tool's answer: a string or text blocks (none is an empty answer). Images are
// refused: OpenAI's and Gemini's formats carry only text in a tool's answer. is_error has no field in
// those formats either, so a failed tool's answer travels as text that begins with "Error: ", which
// every model reads.
func readToolResult(b anthropicBlock, bf string, bad *report) ([]*messages.ContentPart, string, bool) {
	before := bad.count()
	var parts []*messages.ContentPart
	if c := bytes.TrimSpace(b.Content); len(c) > 0 && string(c) != "null" && string(c) != `""` {
		for i, rb := range readBlocks(b.Content, bf+".content", bad) {
			rf := fmt.Sprintf("%s.content[%d]", bf, i)
			switch rb.Type {
			case "text":
				if p, ok := blockText(rb, rf, bad); ok {
					parts = append(parts, p)
				}
			case "image":
				bad.Add(rf+".type", "images in a tool_result are not supported: OpenAI's and Gemini's formats carry only text in a tool's answer")
			default:
				bad.Add(rf+".type", "a tool_result holds text blocks only")
			}
		}
	}
	if bad.count() > before {
		return nil, "", false
	}
	if len(parts) == 0 {
		parts = []*messages.ContentPart{{Type: "text", Text: ""}}
	}
	if b.IsError != nil && *b.IsError {
		parts[0] = &messages.ContentPart{Type: "text", Text: strings.TrimSpace("Error: " + parts[0].Text)}
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.Text
	}
	return parts, strings.Join(texts, "\n"), true
}

// readAnthropicTools reads the tools: custom tools with a name, a description and an input schema of
// type object. Anthropic's server tools (web search, code execution, ...) run at Anthropic, which a
// panel of other providers cannot do: they are refused by name.
func readAnthropicTools(raw json.RawMessage, bad *report) []*messages.Tool {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("tools", "must be a list of tools")
		return nil
	}
	if len(items) == 0 {
		bad.Add("tools", fmt.Sprintf("must hold between 1 and %d tools", intake.MaxTools))
		return nil
	}
	var tools []*messages.Tool
	for i, item := range items {
		tf := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type        *string         `json:"type"`
			Name        string          `json:"name"`
			Description *string         `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Strict      *bool           `json:"strict"`
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &t) != nil || keys == nil {
			bad.Add(tf, "must be an object with name and input_schema")
			continue
		}
		if t.Type != nil && *t.Type != "custom" {
			bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported: Conclave carries custom tools (name, description, input_schema), not server tools", problems.Clip(*t.Type, 48)))
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			switch k {
			case "type", "name", "description", "input_schema", "strict":
			case "cache_control":
				if _, set := given(keys, k); set {
					bad.Add(tf+"."+k, noCaching)
				}
			default:
				bad.Add(tf+"."+k, "is not supported: Conclave carries a tool's name, description, input_schema and strict")
			}
		}
		at := toolField(len(tools))
		bad.name(at+".name", tf+".name")
		tool := &messages.Tool{Name: t.Name}
		if t.Description != nil {
			tool.Description = *t.Description
		}
		if t.Strict != nil {
			tool.Strict = *t.Strict
		}
		bad.name(at+".parameters", tf+".input_schema")
		var schema struct {
			Type any `json:"type"`
		}
		switch {
		case len(t.InputSchema) == 0 || string(t.InputSchema) == "null":
			bad.Add(tf+".input_schema", "is required: the JSON schema of the tool's input")
		case json.Unmarshal(t.InputSchema, &schema) == nil && schema.Type != "object":
			bad.Add(tf+".input_schema.type", "must be object, as the Messages API requires")
		default:
			tool.Parameters = schemaText(t.InputSchema) // intake holds it to be a schema object
		}
		tools = append(tools, tool)
	}
	return tools
}

// readAnthropicToolChoice reads auto, any, tool (with the name of one of the tools, which intake
// checks) or none, as the tool choices auto, required, function and none; disable_parallel_tool_use is
// the sampling's parallel_tool_calls false, which each adapter writes in its own format.
func readAnthropicToolChoice(raw json.RawMessage, tools []*messages.Tool, bad *report) (*messages.ToolChoice, *bool) {
	var c struct {
		Type    string  `json:"type"`
		Name    *string `json:"name"`
		Disable *bool   `json:"disable_parallel_tool_use"`
	}
	bad.visit("tool_choice")
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &c) != nil || keys == nil {
		bad.Add("tool_choice", `must be {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": ...} or {"type": "none"}`)
		return nil, nil
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		allowed := k == "type" || k == "name" && c.Type == "tool" || k == "disable_parallel_tool_use" && c.Type != "none"
		if !allowed {
			bad.Add("tool_choice."+k, "unknown field")
		}
	}
	var parallel *bool
	if c.Disable != nil && *c.Disable {
		off := false
		parallel = &off
	}
	switch c.Type {
	case "auto", "none":
		return &messages.ToolChoice{Mode: c.Type}, parallel
	case "any":
		return &messages.ToolChoice{Mode: "required"}, parallel
	case "tool":
		if c.Name == nil {
			bad.Add("tool_choice.name", "is required: the tool the model must use")
			return nil, nil
		}
		bad.name("tool_choice.function.name", "tool_choice.name")
		return &messages.ToolChoice{Mode: "function", Name: *c.Name}, parallel
	}
	bad.Add("tool_choice.type", fmt.Sprintf("unknown tool choice %q (want auto, any, tool or none)", problems.Clip(c.Type, 32)))
	return nil, nil
}

// anthropicSampling reads the sampling parameters of the Messages API: max_tokens (required, as the
// API requires it), temperature within the API's [0, 1], top_p, stop_sequences, metadata.user_id (the
// sampling's user), and parallel, read from the tool choice.
func (r askReader) anthropicSampling(parallel *bool) *messages.Sampling {
	r.bad.alias("parameters", "")
	r.bad.alias("parameters.stop", "stop_sequences")
	r.bad.alias("parameters.user", "metadata.user_id")
	s := &messages.Sampling{Temperature: r.within("temperature", 0, 1), TopP: r.float("top_p"), ParallelToolCalls: parallel}
	if _, ok := r.given("max_tokens"); !ok {
		r.add("max_tokens", "is required, as the Messages API requires it: the most tokens the answer may take")
	} else if n := r.integer("max_tokens"); n != nil {
		s.MaxTokens = proto32(*n)
	}
	s.Stop = r.stops("stop_sequences", false)
	if raw, ok := r.given("metadata"); ok {
		var keys map[string]json.RawMessage
		if json.Unmarshal(raw, &keys) != nil || keys == nil {
			r.add("metadata", "must be an object")
			return s
		}
		r.bad.unknown(r.prefix+"metadata", keys, only("user_id"))
		if raw, ok := given(keys, "user_id"); ok {
			r.bad.visit(r.field("metadata.user_id"))
			if json.Unmarshal(raw, &s.User) != nil {
				r.add("metadata.user_id", "must be a string")
			}
		}
	}
	return s
}
