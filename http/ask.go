package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// What a caller asks of the models beyond its text, read from OpenAI's request shape: the sampling
// parameters (also /route-thompson's "parameters"), the conversation with its content parts and tool
// calls, the tools, the tool choice and the output format. What each member says goes into a
// messages.Ask as the caller wrote it, for intake to judge; the readers here refuse only what does not
// decode (a member of the wrong type, one the wire format does not know), each under its field, and
// note the body's name of what intake may refuse (see report).

// Bounds of the wire format's lists, beyond the body's size and intake's bounds of an ask.
const (
	maxToolCalls = 128 // tool calls of one assistant message
)

// samplingFields are the sampling parameters, as chat completions and /route-thompson's parameters name
// them (chat completions also takes parallel_tool_calls, with its tools).
var samplingFields = map[string]bool{
	"temperature": true, "top_p": true, "max_tokens": true, "max_completion_tokens": true, "stop": true, "seed": true,
	"presence_penalty": true, "frequency_penalty": true, "logit_bias": true, "user": true,
}

// given reports whether a field was sent with a value: JSON null counts as left out, as OpenAI takes it.
func given(fields map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	raw, ok := fields[name]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, false
	}
	return raw, true
}

// askReader reads the ask's fields of one object; prefix names the object in problems ("" at the top,
// "parameters." in /route-thompson). names, when set, are the caller's names of parameters that its
// door calls otherwise (the Responses API's max_output_tokens is max_tokens here).
type askReader struct {
	fields map[string]json.RawMessage
	prefix string
	names  map[string]string
	bad    *report
}

// field is the body's name of a parameter.
func (r askReader) field(name string) string {
	if n, ok := r.names[name]; ok {
		name = n
	}
	return r.prefix + name
}

func (r askReader) add(field, msg string) { r.bad.Add(r.field(field), msg) }

// given reads a parameter that was sent with a value, noting it read.
func (r askReader) given(name string) (json.RawMessage, bool) {
	raw, ok := given(r.fields, name)
	if ok {
		r.bad.visit(r.field(name))
	}
	return raw, ok
}

// float reads a number (intake judges its range).
func (r askReader) float(name string) *float64 {
	raw, ok := r.given(name)
	if !ok {
		return nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil || math.IsNaN(v) {
		r.add(name, "must be a number")
		return nil
	}
	return &v
}

// within reads a number within [lo, hi]: a bound of the door's own API, tighter than intake's.
func (r askReader) within(name string, lo, hi float64) *float64 {
	v := r.float(name)
	if v != nil && (*v < lo || *v > hi) {
		r.add(name, fmt.Sprintf("must be between %g and %g", lo, hi))
		return nil
	}
	return v
}

// whole reads an integer within [lo, hi], exactly: a seed may be larger than a float64 holds.
func (r askReader) whole(name string, lo, hi int64) *int64 {
	raw, ok := r.given(name)
	if !ok {
		return nil
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		// 5.0 is an integer written as a float; anything else is not one.
		var f float64
		if json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			r.add(name, "must be an integer")
			return nil
		}
		v = int64(f)
	}
	if v < lo || v > hi {
		r.add(name, fmt.Sprintf("must be between %d and %d", lo, hi))
		return nil
	}
	return &v
}

// integer reads an integer of any size (intake judges its range).
func (r askReader) integer(name string) *int64 { return r.whole(name, math.MinInt64, math.MaxInt64) }

// sampling reads the sampling parameters; nil when none is given.
func (r askReader) sampling() *messages.Sampling {
	r.bad.name("parameters", strings.TrimSuffix(r.prefix, "."))
	for name := range r.names {
		r.bad.alias("parameters."+name, r.field(name))
	}
	s := &messages.Sampling{
		Temperature:      r.float("temperature"),
		TopP:             r.float("top_p"),
		PresencePenalty:  r.float("presence_penalty"),
		FrequencyPenalty: r.float("frequency_penalty"),
		Seed:             r.integer("seed"),
	}
	// max_completion_tokens is OpenAI's newer name for max_tokens: either, or both when they agree.
	maxTokens, maxCompletion := r.integer("max_tokens"), r.integer("max_completion_tokens")
	switch {
	case maxTokens != nil && maxCompletion != nil && *maxTokens != *maxCompletion:
		r.add("max_completion_tokens", "differs from max_tokens: give one of them")
	case maxTokens != nil:
		s.MaxTokens = proto32(*maxTokens)
	case maxCompletion != nil:
		s.MaxTokens = proto32(*maxCompletion)
		r.bad.alias("parameters.max_tokens", r.field("max_completion_tokens"))
	}
	s.Stop = r.stop()
	s.LogitBias = r.logitBias()
	if raw, ok := r.given("user"); ok && json.Unmarshal(raw, &s.User) != nil {
		r.add("user", "must be a string")
	}
	if raw, ok := r.given("parallel_tool_calls"); ok {
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			r.add("parallel_tool_calls", "must be a boolean")
		} else {
			s.ParallelToolCalls = &b
		}
	}
	if s.Temperature == nil && s.TopP == nil && s.PresencePenalty == nil && s.FrequencyPenalty == nil && s.Seed == nil &&
		s.MaxTokens == nil && len(s.Stop) == 0 && len(s.LogitBias) == 0 && s.User == "" && s.ParallelToolCalls == nil {
		return nil
	}
	return s
}

// proto32 is an integer as a request's int32 field holds it: one past its bounds stays past intake's.
func proto32(v int64) *int32 {
	n := int32(max(min(v, math.MaxInt32), math.MinInt32))
	return &n
}

// stop reads chat completions' stop: a stop sequence or a list of them.
func (r askReader) stop() []string { return r.stops("stop", true) }

// stops reads a list of stop sequences under name (intake bounds them). single also takes one sequence
// as a string, and refuses an empty list, as chat completions do; Anthropic's stop_sequences is a list,
// which may be empty.
func (r askReader) stops(name string, single bool) []string {
	raw, ok := r.given(name)
	if !ok {
		return nil
	}
	var one string
	var stops []string
	switch {
	case single && json.Unmarshal(raw, &one) == nil:
		return []string{one}
	case json.Unmarshal(raw, &stops) != nil && single:
		r.add(name, "must be a string or a list of strings")
		return nil
	case json.Unmarshal(raw, &stops) != nil:
		r.add(name, "must be a list of strings")
		return nil
	case len(stops) == 0 && single:
		r.add(name, fmt.Sprintf("must hold between 1 and %d sequences", intake.MaxStops))
		return nil
	}
	return stops
}

// logitBias reads a map of token ids to integers (intake judges the ids and the range).
func (r askReader) logitBias() map[string]int32 {
	raw, ok := r.given("logit_bias")
	if !ok {
		return nil
	}
	var m map[string]float64
	if json.Unmarshal(raw, &m) != nil {
		r.add("logit_bias", "must be an object of token ids to numbers")
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // problems in a stable order
	out := make(map[string]int32, len(m))
	for _, k := range keys {
		r.bad.visit(r.field("logit_bias." + k))
		if v := m[k]; v != math.Trunc(v) {
			r.add("logit_bias."+k, "must be an integer between -100 and 100")
		} else {
			out[k] = *proto32(int64(max(min(v, math.MaxInt32), math.MinInt32)))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

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

// conversation is a request's messages, read: the turns for the models, and each turn's role and
// text for the task classification reads.
type conversation struct {
	turns        []*messages.ChatMessage
	roles, texts []string
}

// add appends one turn read, with its role as the caller wrote it and its text for the task.
func (c *conversation) add(turn *messages.ChatMessage, role, text string) {
	c.turns, c.roles, c.texts = append(c.turns, turn), append(c.roles, role), append(c.texts, text)
}

// turnField is intake's name of the turn the conversation's next turn, or the one n after it, will be.
func turnField(n int) string { return fmt.Sprintf("messages[%d]", n) }

// readMessages reads a conversation, every problem under messages[i]: each message whose role is known
// is a turn, for intake to judge with the others (a tool message answers a call of an earlier one).
func readMessages(raw json.RawMessage, bad *report) *conversation {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("messages", "must be a list of messages with role and content")
		return nil
	}
	if len(items) == 0 || len(items) > maxChatMessages {
		bad.Add("messages", fmt.Sprintf("must hold between 1 and %d messages", maxChatMessages))
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
	var keys map[string]json.RawMessage
	var m chatMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &m) != nil {
		bad.Add(field, "must be an object with role and content")
		return nil, "", ""
	}
	bad.unknown(field, keys, has(messageFields))
	if !chatRoles[m.Role] {
		if m.Role == "function" {
			bad.Add(field+".role", "the function role is OpenAI's deprecated form: send a tool message with tool_call_id")
		} else {
			bad.Add(field+".role", fmt.Sprintf("unknown role %q (want system, developer, user, assistant or tool)", problems.Clip(m.Role, 32)))
		}
		return nil, "", ""
	}
	bad.name(at, field)
	turn := &messages.ChatMessage{Role: m.Role}
	if m.Role == "developer" {
		turn.Role = "system" // the same instructions, under the name every wire format knows
	}
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
		if len(k.raw) > 0 && string(k.raw) != "null" {
			bad.Add(field+"."+k.name, "is not supported: Conclave carries text, images and tool calls")
		}
	}
	if m.Role != "assistant" {
		for _, k := range []struct {
			name string
			set  bool
		}{{"tool_calls", len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null"}, {"refusal", m.Refusal != nil}} {
			if k.set {
				bad.Add(field+"."+k.name, "only an assistant message has "+k.name)
			}
		}
	}
	if m.ToolCallID != nil {
		bad.visit(field + ".tool_call_id")
		turn.ToolCallId = *m.ToolCallID
	}

	var texts []string
	hasContent := len(m.Content) > 0 && string(m.Content) != "null"
	bad.visit(field + ".content")
	if hasContent {
		turn.Content, texts = readContent(m.Content, m.Role, field+".content", at+".content", bad)
	}
	if m.Role == "assistant" && string(m.Content) == `""` && len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
		// An empty text beside tool calls says nothing; some wire formats refuse an empty text block.
		turn.Content, texts, hasContent = nil, nil, false
	}
	if m.Role == "assistant" {
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			var calls []string
			turn.ToolCalls, calls = readToolCalls(m.ToolCalls, field+".tool_calls", at+".tool_calls", bad)
			texts = append(texts, calls...)
		}
		if m.Refusal != nil && !hasContent {
			// A refusal is what the assistant said: the models read it as its text.
			turn.Content = []*messages.ContentPart{{Type: "text", Text: *m.Refusal}}
			texts = append(texts, *m.Refusal)
		}
	}
	return turn, m.Role, strings.Join(texts, "\n")
}

// readContent reads a message's content, at intake's content of a turn: a string, or a list of parts,
// text and images (intake takes images in a user's message only, as OpenAI does).
func readContent(raw json.RawMessage, role, field, at string, bad *report) ([]*messages.ContentPart, []string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		bad.name(at+"[0]", field)
		return []*messages.ContentPart{{Type: "text", Text: s}}, []string{s}
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, "must be a string or a list of content parts")
		return nil, nil
	}
	if len(items) == 0 || len(items) > intake.MaxParts {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d parts", intake.MaxParts))
		return nil, nil
	}
	bad.name(at, field)
	var parts []*messages.ContentPart
	var texts []string
	for i, item := range items {
		pf := fmt.Sprintf("%s[%d]", field, i)
		part := fmt.Sprintf("%s[%d]", at, len(parts))
		var typ string
		if json.Unmarshal(item["type"], &typ) != nil {
			bad.Add(pf+".type", "is required: text or image_url")
			continue
		}
		bad.name(part, pf)
		allowed := map[string]bool{"type": true}
		switch {
		case typ == "text" || (typ == "refusal" && role == "assistant"):
			key := typ // a refusal part holds its text under "refusal"
			allowed[key] = true
			var text string
			if json.Unmarshal(item[key], &text) != nil {
				bad.Add(pf+"."+key, "must be a string")
				continue
			}
			parts, texts = append(parts, &messages.ContentPart{Type: "text", Text: text}), append(texts, text)
		case typ == "image_url":
			allowed["image_url"] = true
			if p := readImage(item["image_url"], pf+".image_url", part, bad); p != nil {
				parts, texts = append(parts, p), append(texts, "[image]")
			}
		case typ == "input_audio" || typ == "file":
			bad.Add(pf+".type", fmt.Sprintf("content parts of type %s are not supported (text and image_url are)", typ))
			continue
		default:
			bad.Add(pf+".type", fmt.Sprintf("unknown content part type %q (want text or image_url)", problems.Clip(typ, 32)))
			continue
		}
		bad.unknown(pf, item, has(allowed))
	}
	return parts, texts
}

// readImage reads a chat completion's image part, {"url": ..., "detail": ...}, as the part at.
func readImage(raw json.RawMessage, field, at string, bad *report) *messages.ContentPart {
	var img struct {
		URL    *string `json:"url"`
		Detail *string `json:"detail"`
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &img) != nil || keys == nil {
		bad.Add(field, "must be an object with url")
		return nil
	}
	bad.unknown(field, keys, only("url", "detail"))
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
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, "must be a list of tool calls")
		return nil, nil
	}
	if len(items) == 0 || len(items) > maxToolCalls {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d tool calls", maxToolCalls))
		return nil, nil
	}
	bad.name(at, field)
	var calls []*messages.ToolCall
	var texts []string
	for i, item := range items {
		cf := fmt.Sprintf("%s[%d]", field, i)
		var c wireToolCall
		var keys map[string]json.RawMessage
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &c) != nil || keys == nil {
			bad.Add(cf, "must be an object with id, type function and function {name, arguments}")
			continue
		}
		bad.unknown(cf, keys, only("id", "type", "function"))
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
			Type     string          `json:"type"`
			Function json.RawMessage `json:"function"`
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &t) != nil || keys == nil {
			bad.Add(tf, "must be an object with type function and function")
			continue
		}
		bad.unknown(tf, keys, only("type", "function"))
		if t.Type != "function" {
			bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported (function is)", problems.Clip(t.Type, 32)))
			continue
		}
		var f functionDef
		var fkeys map[string]json.RawMessage
		if json.Unmarshal(t.Function, &fkeys) != nil || json.Unmarshal(t.Function, &f) != nil || fkeys == nil {
			bad.Add(tf+".function", "must be an object with name")
			continue
		}
		bad.unknown(tf+".function", fkeys, only("name", "description", "parameters", "strict"))
		tools = append(tools, f.tool(tf+".function", toolField(len(tools)), bad))
	}
	return tools
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
	bad.name(at+".name", field+".name")
	tool := &messages.Tool{Name: f.Name}
	if f.Description != nil {
		tool.Description = *f.Description
	}
	if f.Strict != nil {
		tool.Strict = *f.Strict
	}
	if len(f.Parameters) > 0 && string(f.Parameters) != "null" {
		bad.name(at+".parameters", field+".parameters")
		tool.Parameters = schemaText(f.Parameters)
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
	bad.visit("tool_choice")
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return toolChoiceMode(mode, "tool_choice", want, bad)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil {
		bad.Add("tool_choice", want)
		return nil
	}
	if named.Type != "function" {
		bad.Add("tool_choice.type", fmt.Sprintf("tool choices of type %q are not supported (function is)", problems.Clip(named.Type, 32)))
		return nil
	}
	bad.name("tool_choice.function.name", "tool_choice.function.name")
	return &messages.ToolChoice{Mode: "function", Name: named.Function.Name}
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
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &f) != nil || keys == nil {
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
	var jskeys map[string]json.RawMessage
	if json.Unmarshal(f.JSONSchema, &jskeys) != nil || json.Unmarshal(f.JSONSchema, &js) != nil || jskeys == nil {
		bad.Add("response_format.json_schema", "is required: an object with name and schema")
		return nil
	}
	bad.unknown("response_format.json_schema", jskeys, only("name", "description", "schema", "strict"))
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
	if len(js.Schema) == 0 || string(js.Schema) == "null" {
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

// flag reads a boolean; false when left out.
func flag(fields map[string]json.RawMessage, name string, bad *report) bool {
	raw, ok := given(fields, name)
	bad.visit(name)
	if !ok {
		return false
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		bad.Add(name, "must be a boolean")
	}
	return b
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
