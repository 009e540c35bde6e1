package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// What a caller asks of the models beyond its text, read from OpenAI's request shape: the conversation
// with its content parts and tool calls, the tools, the tool choice and the output format (the sampling
// parameters are sampling.go's). What each member says goes into a messages.Ask as the caller wrote it,
// for intake to judge; the readers here refuse only what does not decode (a member of the wrong type,
// one the wire format does not know), each under its field, and note the body's name of what intake may
// refuse (see report). The builders every door shares (imagePart, toolCallOf, functionDef.tool,
// readNamedChoice, jsonSchemaDef.format) are here too.

// Bounds of the wire format's lists, beyond the body's size and intake's bounds of an ask.
const (
	maxToolCalls = 128 // tool calls of one assistant message
)

// chatMessage is one message of OpenAI's request. Content is a string, a list of parts, or null (an
// assistant's tool calls alone). Annotations are an answer's, which a caller may send back with it:
// they say nothing to a model.
type chatMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Name         *string         `json:"name"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	ToolCallID   *string         `json:"tool_call_id"`
	Refusal      *string         `json:"refusal"`
	Audio        json.RawMessage `json:"audio"`
	FunctionCall json.RawMessage `json:"function_call"`
	Annotations  json.RawMessage `json:"annotations"`
}

// messageFields are the keys a message may have.
var messageFields = map[string]bool{"role": true, "content": true, "name": true, "tool_calls": true, "tool_call_id": true,
	"refusal": true, "audio": true, "function_call": true, "annotations": true}

// chatRoles are the roles a conversation may hold; developer is OpenAI's newer name for system.
var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// readMessages reads a conversation, every problem under messages[i]: each message whose role is known
// is a turn, for intake to judge with the others (a tool message answers a call of an earlier one).
func readMessages(raw json.RawMessage, bad *report) *conversation {
	items, ok := listOf[json.RawMessage](raw, "messages", "must be a list of messages with role and content", maxChatMessages, "messages", bad)
	if !ok {
		return nil
	}
	c := &conversation{}
	for i, item := range items {
		if turn, role, text := readMessage(item, fmt.Sprintf("messages[%d]", i), turnField(len(c.turns)), bad); turn != nil {
			c.add(turn, role, text)
		}
	}
	return c
}

// readMessage reads one message as the turn intake calls at: the turn, its role as the caller wrote
// it, and its text for the task; nil when it is no message of a known role.
func readMessage(raw json.RawMessage, field, at string, bad *report) (*messages.ChatMessage, string, string) {
	m, ok := decodeMessage(raw, field, bad)
	if !ok {
		return nil, "", ""
	}
	bad.name(at, field)
	turn := &messages.ChatMessage{Role: asRole(m.Role)}
	m.readMembers(turn, field, bad)
	texts := m.readBody(turn, field, at, bad)
	return turn, m.Role, strings.Join(texts, "\n")
}

// decodeMessage decodes a message of a known role, refusing the members a message does not have.
func decodeMessage(raw json.RawMessage, field string, bad *report) (chatMessage, bool) {
	var keys map[string]json.RawMessage
	var m chatMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &m) != nil {
		bad.Add(field, "must be an object with role and content")
		return m, false
	}
	bad.unknown(field, keys, has(messageFields))
	switch {
	case chatRoles[m.Role]:
		return m, true
	case m.Role == "function":
		bad.Add(field+".role", "the function role is OpenAI's deprecated form: send a tool message with tool_call_id")
	default:
		bad.Add(field+".role", fmt.Sprintf("unknown role %q (want system, developer, user, assistant or tool)", problems.Clip(m.Role, 32)))
	}
	return m, false
}

// readMembers reads a message's name and tool_call_id into its turn, and refuses what Conclave does not
// carry (audio, a function call) and what only an assistant's message has.
func (m chatMessage) readMembers(turn *messages.ChatMessage, field string, bad *report) {
	if m.Name != nil {
		bad.visit(field + ".name")
		if *m.Name == "" {
			bad.Add(field+".name", fmt.Sprintf("must be between 1 and %d bytes", intake.MaxNameBytes))
		}
		turn.Name = *m.Name
	}
	for _, k := range []struct {
		name string
		raw  json.RawMessage
	}{{"audio", m.Audio}, {"function_call", m.FunctionCall}} {
		if present(k.raw) {
			bad.Add(field+"."+k.name, "is not supported: Conclave carries text, images and tool calls")
		}
	}
	if m.Role != "assistant" {
		for _, k := range []struct {
			name string
			set  bool
		}{{"tool_calls", present(m.ToolCalls)}, {"refusal", m.Refusal != nil}} {
			if k.set {
				bad.Add(field+"."+k.name, "only an assistant message has "+k.name)
			}
		}
	}
	if m.ToolCallID != nil {
		bad.visit(field + ".tool_call_id")
		turn.ToolCallId = *m.ToolCallID
	}
}

// readBody reads a message's content into its turn, the turn at, and an assistant's tool calls and
// refusal; it returns the turn's texts for the task.
func (m chatMessage) readBody(turn *messages.ChatMessage, field, at string, bad *report) []string {
	var texts []string
	hasContent := present(m.Content)
	bad.visit(field + ".content")
	if hasContent {
		turn.Content, texts = readContent(m.Content, m.Role, field+".content", at+".content", bad)
	}
	if m.Role != "assistant" {
		return texts
	}
	calls := present(m.ToolCalls)
	if string(m.Content) == `""` && calls {
		// An empty text beside tool calls says nothing; some wire formats refuse an empty text block.
		turn.Content, texts, hasContent = nil, nil, false
	}
	if calls {
		var called []string
		turn.ToolCalls, called = readToolCalls(m.ToolCalls, field+".tool_calls", at+".tool_calls", bad)
		texts = append(texts, called...)
	}
	if m.Refusal != nil && !hasContent {
		// A refusal is what the assistant said: the models read it as its text.
		turn.Content = []*messages.ContentPart{{Type: "text", Text: *m.Refusal}}
		texts = append(texts, *m.Refusal)
	}
	return texts
}

// readContent reads a message's content, at intake's content of a turn: a string, or a list of parts,
// text and images (intake takes images in a user's message only, as OpenAI does).
func readContent(raw json.RawMessage, role, field, at string, bad *report) ([]*messages.ContentPart, []string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		bad.name(at+"[0]", field)
		return []*messages.ContentPart{{Type: "text", Text: s}}, []string{s}
	}
	items, ok := listOf[map[string]json.RawMessage](raw, field, "must be a string or a list of content parts", intake.MaxParts, "parts", bad)
	if !ok {
		return nil, nil
	}
	bad.name(at, field)
	return readParts(items, role, field, at, "is required: text or image_url", chatPart, bad)
}

// partReader reads a content part of a type, pf, as the part at: the part (nil when it has none to
// give) and its text for the task, and the members its type takes, which are checked after it; nil
// members when the part was refused, which says nothing more of it.
type partReader func(typ, role string, item map[string]json.RawMessage, pf, at string, bad *report) (*messages.ContentPart, string, map[string]bool)

// readParts reads content that is a list of parts, at intake's at: each part by the reader of its type
// (whose absence says typeRequired), then its members.
func readParts(items []map[string]json.RawMessage, role, field, at, typeRequired string, read partReader, bad *report) ([]*messages.ContentPart, []string) {
	var parts []*messages.ContentPart
	var texts []string
	for i, item := range items {
		pf := fmt.Sprintf("%s[%d]", field, i)
		part := fmt.Sprintf("%s[%d]", at, len(parts))
		var typ string
		if json.Unmarshal(item["type"], &typ) != nil {
			bad.Add(pf+".type", typeRequired)
			continue
		}
		bad.name(part, pf)
		p, text, takes := read(typ, role, item, pf, part, bad)
		if takes == nil {
			continue
		}
		if p != nil {
			parts, texts = append(parts, p), append(texts, text)
		}
		bad.unknown(pf, item, has(takes))
	}
	return parts, texts
}

// chatPart reads a chat completion's content part: text (an assistant's refusal too, whose text is
// under "refusal") or image_url.
func chatPart(typ, role string, item map[string]json.RawMessage, pf, at string, bad *report) (*messages.ContentPart, string, map[string]bool) {
	switch {
	case typ == "text" || (typ == "refusal" && role == "assistant"):
		return readTextPart(item, typ, pf, map[string]bool{"type": true, typ: true}, bad)
	case typ == "image_url":
		return readImage(item["image_url"], pf+".image_url", at, bad), "[image]", map[string]bool{"type": true, "image_url": true}
	case typ == "input_audio" || typ == "file":
		bad.Add(pf+".type", fmt.Sprintf("content parts of type %s are not supported (text and image_url are)", typ))
	default:
		bad.Add(pf+".type", fmt.Sprintf("unknown content part type %q (want text or image_url)", problems.Clip(typ, 32)))
	}
	return nil, "", nil
}

// readTextPart reads a part whose text is under key; takes are the members of its type.
func readTextPart(item map[string]json.RawMessage, key, pf string, takes map[string]bool, bad *report) (*messages.ContentPart, string, map[string]bool) {
	var text string
	if json.Unmarshal(item[key], &text) != nil {
		bad.Add(pf+"."+key, "must be a string")
		return nil, "", nil
	}
	return &messages.ContentPart{Type: "text", Text: text}, text, takes
}

// readImage reads a chat completion's image part, {"url": ..., "detail": ...}, as the part at.
func readImage(raw json.RawMessage, field, at string, bad *report) *messages.ContentPart {
	var img struct {
		URL    *string `json:"url"`
		Detail *string `json:"detail"`
	}
	if !objectOf(raw, &img, field, "must be an object with url", only("url", "detail"), bad) {
		return nil
	}
	return imagePart(img.URL, img.Detail, field+".url", field+".detail", at, bad)
}

// imagePart is an image as every door reads it, the part at: its URL (an https URL or a data URI) and
// its detail, under the fields named, which intake judges.
func imagePart(url, detail *string, urlField, detailField, at string, bad *report) *messages.ContentPart {
	part := &messages.ContentPart{Type: messages.PartImage}
	if detail != nil {
		bad.name(at+".image_url.detail", detailField)
		part.Detail = *detail
	}
	bad.name(at+".image_url.url", urlField)
	if url != nil {
		part.ImageUrl = *url
	}
	return part
}

// wireToolCall is a tool call in OpenAI's shape, in a request's assistant message or in an answer.
type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// readToolCalls reads an assistant's tool calls, intake's at; it returns the calls and their text for
// the task.
func readToolCalls(raw json.RawMessage, field, at string, bad *report) ([]*messages.ToolCall, []string) {
	items, ok := listOf[json.RawMessage](raw, field, "must be a list of tool calls", maxToolCalls, "tool calls", bad)
	if !ok {
		return nil, nil
	}
	bad.name(at, field)
	var calls []*messages.ToolCall
	var texts []string
	for i, item := range items {
		cf := fmt.Sprintf("%s[%d]", field, i)
		var c wireToolCall
		if !objectOf(item, &c, cf, "must be an object with id, type function and function {name, arguments}", only("id", "type", "function"), bad) {
			continue
		}
		if c.Type != "function" {
			bad.Add(cf+".type", "must be function")
		}
		call, text := toolCallOf(c.ID, c.Function.Name, c.Function.Arguments, fmt.Sprintf("%s[%d]", at, len(calls)), cf+".id", cf+".function.name", cf+".function.arguments", bad)
		calls, texts = append(calls, call), append(texts, text)
	}
	return calls, texts
}

// toolCallOf is a tool call of an earlier turn as every door reads it, the call at (its id, the
// function's name, its arguments as a JSON object in text, which intake judges under the fields named);
// it returns the call and its text for the task.
func toolCallOf(id, name, arguments, at, idField, nameField, argsField string, bad *report) (*messages.ToolCall, string) {
	bad.name(at+".id", idField)
	bad.name(at+".function.name", nameField)
	bad.name(at+".function.arguments", argsField)
	args := strings.TrimSpace(arguments)
	if args == "" {
		args = "{}" // a call without arguments, as some models write it
	}
	return &messages.ToolCall{Id: id, Name: name, Arguments: args}, fmt.Sprintf("[calls %s(%s)]", name, args)
}

// readTools reads the functions the models may call.
func readTools(raw json.RawMessage, bad *report) []*messages.Tool {
	items, ok := toolList(raw, bad)
	if !ok {
		return nil
	}
	return readToolList(items, readChatTool, bad)
}

// toolList decodes a list of tools, which may not be empty (intake bounds its length).
func toolList(raw json.RawMessage, bad *report) ([]json.RawMessage, bool) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("tools", "must be a list of tools")
		return nil, false
	}
	if len(items) == 0 {
		bad.Add("tools", fmt.Sprintf("must hold between 1 and %d tools", intake.MaxTools))
		return nil, false
	}
	return items, true
}

// toolReader reads the tool tf as intake's tool n; nil when it refused it.
type toolReader func(item json.RawMessage, tf string, n int, bad *report) *messages.Tool

// readToolList reads each tool of a list, keeping those read.
func readToolList(items []json.RawMessage, read toolReader, bad *report) []*messages.Tool {
	var tools []*messages.Tool
	for i, item := range items {
		if tool := read(item, fmt.Sprintf("tools[%d]", i), len(tools), bad); tool != nil {
			tools = append(tools, tool)
		}
	}
	return tools
}

// readChatTool reads a chat completion's tool: a function, under "function".
func readChatTool(item json.RawMessage, tf string, n int, bad *report) *messages.Tool {
	var t struct {
		Type     string          `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	if !objectOf(item, &t, tf, "must be an object with type function and function", only("type", "function"), bad) {
		return nil
	}
	if t.Type != "function" {
		bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported (function is)", problems.Clip(t.Type, 32)))
		return nil
	}
	var f functionDef
	if !objectOf(t.Function, &f, tf+".function", "must be an object with name", only("name", "description", "parameters", "strict"), bad) {
		return nil
	}
	return f.tool(tf+".function", toolField(n), bad)
}

// toolField is intake's name of the function of the tool n.
func toolField(n int) string { return fmt.Sprintf("tools[%d].function", n) }

// functionDef is a function tool as every door describes it (chat completions under "function", the
// Responses API beside its type).
type functionDef struct {
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// tool is a function tool whose members are under field, intake's at: its name and its parameters (a
// JSON schema, kept in the caller's key order), which intake judges.
func (f functionDef) tool(field, at string, bad *report) *messages.Tool {
	tool := toolOf(f.Name, f.Description, f.Strict, field, at, bad)
	if present(f.Parameters) {
		bad.name(at+".parameters", field+".parameters")
		tool.Parameters = schemaText(f.Parameters)
	}
	return tool
}

// toolOf is a tool as every door reads it, intake's at: its name, under field, which intake judges, its
// description and whether its schema is strict.
func toolOf(name string, description *string, strict *bool, field, at string, bad *report) *messages.Tool {
	bad.name(at+".name", field+".name")
	tool := &messages.Tool{Name: name}
	if description != nil {
		tool.Description = *description
	}
	if strict != nil {
		tool.Strict = *strict
	}
	return tool
}

// schemaText is a JSON schema compacted, its keys in the caller's order (a strict schema's property
// order is the order a model writes the fields in).
func schemaText(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// readToolChoice reads none, auto, required, or a function the model must call, which intake holds to
// be one of the tools.
func readToolChoice(raw json.RawMessage, bad *report) *messages.ToolChoice {
	const want = "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}"
	return readNamedChoice(raw, want, "tool_choice.function.name", func(raw json.RawMessage) (string, string, error) {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		err := json.Unmarshal(raw, &named)
		return named.Type, named.Function.Name, err
	}, bad)
}

// readNamedChoice reads a tool choice of OpenAI's doors: a mode, none, auto or required (want says in
// the door's words what it may be), or an object naming the function the model must call, decoded by
// named in the door's shape, the function's name under nameField.
func readNamedChoice(raw json.RawMessage, want, nameField string, named func(json.RawMessage) (typ, name string, err error), bad *report) *messages.ToolChoice {
	bad.visit("tool_choice")
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return toolChoiceMode(mode, "tool_choice", want, bad)
	}
	typ, name, err := named(raw)
	if err != nil {
		bad.Add("tool_choice", want)
		return nil
	}
	if typ != "function" {
		bad.Add("tool_choice.type", fmt.Sprintf("tool choices of type %q are not supported (function is)", problems.Clip(typ, 32)))
		return nil
	}
	bad.name("tool_choice.function.name", nameField)
	return &messages.ToolChoice{Mode: "function", Name: name}
}

// toolChoiceMode is a tool choice by mode, none, auto or required, which intake judges under field;
// want says in the door's words what the field may be. A function is named by an object, never by a
// string.
func toolChoiceMode(mode, field, want string, bad *report) *messages.ToolChoice {
	if mode == "function" {
		bad.Add(field, want)
		return nil
	}
	bad.name("tool_choice", field)
	return &messages.ToolChoice{Mode: mode}
}

// readResponseFormat reads text, json_object, or json_schema with its name, schema and strictness.
func readResponseFormat(raw json.RawMessage, bad *report) *messages.OutputFormat {
	var f struct {
		Type       string          `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
	}
	keys, ok := object(raw, &f)
	if !ok {
		bad.Add("response_format", "must be an object with type text, json_object or json_schema")
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if k != "type" && !(k == "json_schema" && f.Type == "json_schema") {
			bad.Add("response_format."+k, "unknown field")
		}
	}
	bad.name("response_format.type", "response_format.type")
	if f.Type != "json_schema" {
		return &messages.OutputFormat{Type: f.Type}
	}
	var js jsonSchemaDef
	if !objectOf(f.JSONSchema, &js, "response_format.json_schema", "is required: an object with name and schema", only("name", "description", "schema", "strict"), bad) {
		return nil
	}
	return js.format("response_format.json_schema", bad)
}

// jsonSchemaDef is a json_schema output format's members, as every door names them (chat completions
// under "json_schema", the Responses API beside its type).
type jsonSchemaDef struct {
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// format is a json_schema format whose members are under field: its name and its schema, which intake
// judges. A description, which OutputFormat has no field for, is carried as the schema's own
// description when it has none, so the models read it.
func (js jsonSchemaDef) format(field string, bad *report) *messages.OutputFormat {
	out := &messages.OutputFormat{Type: "json_schema", Name: js.Name}
	bad.name("response_format.json_schema.name", field+".name")
	if js.Strict != nil {
		out.Strict = *js.Strict
	}
	bad.name("response_format.json_schema.schema", field+".schema")
	if !present(js.Schema) {
		return out
	}
	out.Schema = schemaText(js.Schema)
	if js.Description != nil && *js.Description != "" {
		out.Schema = describe(out.Schema, *js.Description)
	}
	return out
}

// describe adds a description to a compacted schema that has none, as its first key, leaving the rest
// of the text as it was.
func describe(schema, description string) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(schema), &obj) != nil {
		return schema
	}
	if _, has := obj["description"]; has {
		return schema
	}
	d, _ := json.Marshal(description)
	if len(obj) == 0 {
		return `{"description":` + string(d) + `}`
	}
	return `{"description":` + string(d) + `,` + schema[1:]
}

// readFallbacks reads the models a direct call moves to, in order, when its model or its provider
// fails (intake holds them to be catalog models, each once, other than the model itself).
func readFallbacks(raw json.RawMessage, bad *report) []string {
	var ids []string
	if json.Unmarshal(raw, &ids) != nil {
		bad.Add("fallbacks", "must be a list of model ids")
		return nil
	}
	if len(ids) == 0 {
		bad.Add("fallbacks", fmt.Sprintf("must list between 1 and %d models", intake.MaxFallbacks))
		return nil
	}
	return ids
}
