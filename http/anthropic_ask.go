package httpapi

import (
	"bytes"
	"cmp"
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

// noCaching is why a top-level cache_control is refused: the blocks and tools carry theirs.
const noCaching = "is not supported at the top level: mark the system, message or tool blocks to cache with cache_control"

// maxCacheMarks is how many blocks may carry cache_control in one request, as the Messages API allows.
const maxCacheMarks = 4

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
	// CacheControl is read by readCache.
	CacheControl json.RawMessage `json:"cache_control"`
}

// blockFields are the keys each type of block may have.
var blockFields = map[string]map[string]bool{
	"text":        {"type": true, "text": true, "citations": true, "cache_control": true},
	"image":       {"type": true, "source": true, "cache_control": true},
	"tool_use":    {"type": true, "id": true, "name": true, "input": true, "caller": true, "cache_control": true},
	"tool_result": {"type": true, "tool_use_id": true, "content": true, "is_error": true, "cache_control": true},
}

// readCache reads a block's or a tool's cache_control at: {"type": "ephemeral"} with an optional ttl
// of 5m or 1h. It returns the ttl ("5m" when none is given), or "" when there is no cache_control.
func readCache(raw json.RawMessage, at string, bad *report) string {
	if !present(raw) {
		return ""
	}
	var c struct {
		Type string `json:"type"`
		TTL  string `json:"ttl"`
	}
	keys, ok := object(raw, &c)
	switch {
	case !ok:
		bad.Add(at, `must be {"type": "ephemeral"}, with a ttl of 5m or 1h if you choose`)
		return ""
	case c.Type != "ephemeral":
		bad.Add(at+".type", `must be "ephemeral"`)
		return ""
	case c.TTL != "" && c.TTL != "5m" && c.TTL != "1h":
		bad.Add(at+".ttl", "must be 5m or 1h")
		return ""
	}
	bad.unknown(at, keys, only("type", "ttl"))
	return cmp.Or(c.TTL, "5m")
}

// readBlocks reads content that is a string (one text block) or a list of blocks, each checked for
// the keys its type allows. It returns nil when the content is not usable at all.
func readBlocks(raw json.RawMessage, field string, bad *report) []anthropicBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: &s}}
	}
	items, ok := listOf[json.RawMessage](raw, field, "must be a string or a list of content blocks", intake.MaxParts, "blocks", bad)
	if !ok {
		return nil
	}
	blocks := make([]anthropicBlock, 0, len(items))
	for i, item := range items {
		blocks = append(blocks, readBlock(item, fmt.Sprintf("%s[%d]", field, i), bad))
	}
	return blocks
}

// readBlock decodes the block bf, refusing the members its type does not have. A block that is no
// object of a block's shape is kept, unreadable, so later blocks keep their index.
func readBlock(item json.RawMessage, bf string, bad *report) anthropicBlock {
	var b anthropicBlock
	keys, ok := object(item, &b)
	if !ok {
		bad.Add(bf, "must be a content block: an object with a type and the fields of that type")
		b = anthropicBlock{Type: unreadable}
	}
	if allowed, ok := blockFields[b.Type]; ok {
		refuseMembers(bf, keys, has(allowed), "unknown field", bad)
	}
	return b
}

// refuseMembers refuses the members of the object at that its reader does not take, in name order,
// saying why.
func refuseMembers(at string, keys map[string]json.RawMessage, takes func(string) bool, why string, bad *report) {
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !takes(k) {
			bad.Add(at+"."+k, why)
		}
	}
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
	return &messages.ContentPart{Type: "text", Text: *b.Text, CacheControl: readCache(b.CacheControl, bf+".cache_control", bad)}, true
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
	keys, ok := object(b.Source, &src)
	if !ok {
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
		return cached(imagePart(&uri, nil, bf+".source.data", bf+".source", at, bad), readCache(b.CacheControl, bf+".cache_control", bad))
	case "url":
		return cached(imagePart(&src.URL, nil, bf+".source.url", bf+".source", at, bad), readCache(b.CacheControl, bf+".cache_control", bad))
	}
	bad.Add(bf+".source.type", fmt.Sprintf("image sources of type %q are not supported (base64 and url are)", problems.Clip(src.Type, 32)))
	return nil
}

// cached marks a part, when there is one, with a cache_control's ttl.
func cached(p *messages.ContentPart, ttl string) *messages.ContentPart {
	if p != nil {
		p.CacheControl = ttl
	}
	return p
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
	items, ok := listOf[json.RawMessage](raw, "messages", "must be a list of messages with role and content", maxChatMessages, "messages", bad)
	if !ok {
		return nil
	}
	var pending []string // the tool_use ids of the assistant turn just before
	for i, item := range items {
		pending = c.readAnthropicMessage(item, fmt.Sprintf("messages[%d]", i), pending, bad)
	}
	if len(pending) > 0 {
		bad.Add("messages", "the last assistant turn's tool_use blocks need their tool_result in a user turn after it")
	}
	return c
}

// readAnthropicMessage reads the message field into the conversation. pending are the ids of the
// tool_use blocks of the assistant turn just before, which a user turn answers; it returns those of
// this turn.
func (c *conversation) readAnthropicMessage(item json.RawMessage, field string, pending []string, bad *report) []string {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if !objectOf(item, &m, field, "must be an object with role and content", only("role", "content"), bad) {
		return nil
	}
	if m.Role != "user" && m.Role != "assistant" {
		bad.Add(field+".role", fmt.Sprintf("unknown role %q (want user or assistant; the system prompt is the top-level system)", problems.Clip(m.Role, 32)))
		return nil
	}
	if !present(m.Content) {
		bad.Add(field+".content", "is required")
		return nil
	}
	blocks := readBlocks(m.Content, field+".content", bad)
	if m.Role == "user" {
		readUserTurn(c, blocks, field, pending, bad)
		return nil
	}
	if len(pending) > 0 {
		bad.Add(field, fmt.Sprintf("the tool_use blocks of the assistant turn before need their tool_result in a user turn first (%s)", problems.Clip(strings.Join(pending, ", "), 128)))
	}
	return readAssistantTurn(c, blocks, field, bad)
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
			turn.CacheControl = cmp.Or(readCache(b.CacheControl, bf+".cache_control", bad), turn.CacheControl)
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
	u := &userTurn{c: c, field: field, turn: &messages.ChatMessage{Role: "user"}, pending: pending, answered: map[string]bool{}, bad: bad}
	for i, b := range blocks {
		u.block(b, fmt.Sprintf("%s.content[%d]", field, i))
	}
	u.end()
}

// userTurn is a user's turn being read.
type userTurn struct {
	c     *conversation
	field string
	turn  *messages.ChatMessage
	// at is the user turn's name, once its first text or image is read (after its tool turns).
	at    string
	texts []string
	// pending are the ids of the assistant turn's calls, answered those answered so far.
	pending  []string
	answered map[string]bool
	bad      *report
}

// block reads the block bf of the turn.
func (u *userTurn) block(b anthropicBlock, bf string) {
	switch b.Type {
	case "text":
		if p, ok := blockText(b, bf, u.bad); ok {
			u.bad.name(u.part(), bf)
			u.turn.Content, u.texts = append(u.turn.Content, p), append(u.texts, p.Text)
		}
	case "image":
		pf := u.part()
		u.bad.name(pf, bf)
		if p := blockImage(b, bf, pf, u.bad); p != nil {
			u.turn.Content, u.texts = append(u.turn.Content, p), append(u.texts, "[image]")
		}
	case "tool_result":
		u.toolResult(b, bf)
	case "tool_use":
		u.bad.Add(bf+".type", "tool_use blocks go in assistant turns only")
	default:
		unsupportedBlock(b, bf, u.bad)
	}
}

// part is intake's name of the turn's next part, naming the turn itself the first time.
func (u *userTurn) part() string {
	if u.at == "" {
		u.at = turnField(len(u.c.turns))
		u.bad.name(u.at, u.field)
	}
	return fmt.Sprintf("%s.content[%d]", u.at, len(u.turn.Content))
}

// toolResult reads a tool_result block as a tool turn, which answers a call of the assistant turn
// before, once, before the turn's text and images.
func (u *userTurn) toolResult(b anthropicBlock, bf string) {
	switch {
	case len(u.turn.Content) > 0:
		u.bad.Add(bf, "tool_result blocks come first in a user turn, before its text and images, as the Messages API requires")
	case !slices.Contains(u.pending, b.ToolUseID):
		u.bad.Add(bf+".tool_use_id", fmt.Sprintf("%q answers no tool_use of the assistant turn before", problems.Clip(b.ToolUseID, 64)))
	case u.answered[b.ToolUseID]:
		u.bad.Add(bf+".tool_use_id", fmt.Sprintf("%q is answered by an earlier tool_result too", b.ToolUseID))
	default:
		u.answered[b.ToolUseID] = true
		if result, text, ok := readToolResult(b, bf, u.bad); ok {
			tf := turnField(len(u.c.turns))
			u.bad.name(tf, bf)
			u.bad.name(tf+".tool_call_id", bf+".tool_use_id")
			u.c.add(&messages.ChatMessage{Role: "tool", ToolCallId: b.ToolUseID, Content: result,
				CacheControl: readCache(b.CacheControl, bf+".cache_control", u.bad)}, "tool", text)
		}
	}
}

// end refuses a turn that leaves a call of the assistant turn before unanswered, and adds the user turn
// when it has text or images.
func (u *userTurn) end() {
	var missing []string
	for _, id := range u.pending {
		if !u.answered[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		u.bad.Add(u.field, fmt.Sprintf("must answer each tool_use of the assistant turn before with a tool_result (%s has none)", problems.Clip(strings.Join(missing, ", "), 128)))
	}
	if len(u.turn.Content) > 0 {
		u.c.add(u.turn, "user", strings.Join(u.texts, "\n"))
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
	items, ok := toolList(raw, bad)
	if !ok {
		return nil
	}
	return readToolList(items, readAnthropicTool, bad)
}

// readAnthropicTool reads a custom tool tf as intake's tool n.
func readAnthropicTool(item json.RawMessage, tf string, n int, bad *report) *messages.Tool {
	var t struct {
		Type         *string         `json:"type"`
		Name         string          `json:"name"`
		Description  *string         `json:"description"`
		InputSchema  json.RawMessage `json:"input_schema"`
		Strict       *bool           `json:"strict"`
		CacheControl json.RawMessage `json:"cache_control"`
	}
	keys, ok := object(item, &t)
	if !ok {
		bad.Add(tf, "must be an object with name and input_schema")
		return nil
	}
	if t.Type != nil && *t.Type != "custom" {
		bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported: Conclave carries custom tools (name, description, input_schema), not server tools", problems.Clip(*t.Type, 48)))
		return nil
	}
	refuseMembers(tf, keys, only("type", "name", "description", "input_schema", "strict", "cache_control"),
		"is not supported: Conclave carries a tool's name, description, input_schema, strict and cache_control", bad)
	at := toolField(n)
	tool := toolOf(t.Name, t.Description, t.Strict, tf, at, bad)
	tool.CacheControl = readCache(t.CacheControl, tf+".cache_control", bad)
	bad.name(at+".parameters", tf+".input_schema")
	tool.Parameters = inputSchema(t.InputSchema, tf, bad)
	return tool
}

// inputSchema reads a tool's input_schema: a JSON schema of type object, as the Messages API requires
// (intake holds it to be a schema object); "" when it is none.
func inputSchema(raw json.RawMessage, tf string, bad *report) string {
	var schema struct {
		Type any `json:"type"`
	}
	switch {
	case !present(raw):
		bad.Add(tf+".input_schema", "is required: the JSON schema of the tool's input")
	case json.Unmarshal(raw, &schema) == nil && schema.Type != "object":
		bad.Add(tf+".input_schema.type", "must be object, as the Messages API requires")
	default:
		return schemaText(raw)
	}
	return ""
}

// anthropicChoices are the Messages API's tool choices, as the modes of the ask's.
var anthropicChoices = map[string]string{"auto": "auto", "none": "none", "any": "required", "tool": "function"}

// readAnthropicToolChoice reads auto, any, tool (with the name of one of the tools, which intake
// checks) or none, as the tool choices auto, required, function and none; disable_parallel_tool_use is
// the sampling's parallel_tool_calls false, which each adapter writes in its own format.
func readAnthropicToolChoice(raw json.RawMessage, bad *report) (*messages.ToolChoice, *bool) {
	var c struct {
		Type    string  `json:"type"`
		Name    *string `json:"name"`
		Disable *bool   `json:"disable_parallel_tool_use"`
	}
	bad.visit("tool_choice")
	takes := func(k string) bool {
		return k == "type" || k == "name" && c.Type == "tool" || k == "disable_parallel_tool_use" && c.Type != "none"
	}
	if !objectOf(raw, &c, "tool_choice", `must be {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": ...} or {"type": "none"}`, takes, bad) {
		return nil, nil
	}
	mode, known := anthropicChoices[c.Type]
	switch {
	case !known:
		bad.Add("tool_choice.type", fmt.Sprintf("unknown tool choice %q (want auto, any, tool or none)", problems.Clip(c.Type, 32)))
		return nil, nil
	case mode == "function" && c.Name == nil:
		bad.Add("tool_choice.name", "is required: the tool the model must use")
		return nil, nil
	}
	var parallel *bool
	if c.Disable != nil && *c.Disable {
		off := false
		parallel = &off
	}
	if mode != "function" {
		return &messages.ToolChoice{Mode: mode}, parallel
	}
	bad.name("tool_choice.function.name", "tool_choice.name")
	return &messages.ToolChoice{Mode: "function", Name: *c.Name}, parallel
}
