package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
)

// POST /v1/responses: OpenAI's Responses API in front of the same route request as chat completions.
// This file reads the request's own shapes (input items, flat function tools, text.format) into the
// common ask through the builders the chat door uses (ask.go), so both doors take and refuse the same
// things under their own field names; responses_out.go writes the answer and its events.

// responsesFields are the members of a Responses request that Conclave takes, beside its own (timeout,
// strict_parameters, fallbacks). store and metadata are taken as on chat completions: Conclave keeps its
// own record of every request (GET /executions/{id}).
var responsesFields = map[string]bool{
	"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true, "parallel_tool_calls": true, "text": true,
	"temperature": true, "top_p": true, "max_output_tokens": true, "user": true, "safety_identifier": true,
	"stream": true, "stream_options": true, "metadata": true, "store": true, "truncation": true, "include": true, "background": true,
	"timeout": true, "strict_parameters": true, "fallbacks": true,
}

// responsesRefused are the members of the Responses API that Conclave does not carry, each with the
// reason its refusal gives: a caller reads why rather than "unknown field". null is taken as left out.
var responsesRefused = map[string]string{
	"previous_response_id":   "Conclave keeps no responses to continue from: send the whole conversation in input",
	"conversation":           "Conclave keeps no conversations: send the whole conversation in input",
	"prompt":                 "Conclave keeps no prompt templates: send instructions and input themselves",
	"reasoning":              "reasoning settings are not carried to the models",
	"max_tool_calls":         "Conclave carries function tools only, which the caller runs: there are no built-in tool calls to bound",
	"top_logprobs":           "Conclave returns no log probabilities",
	"service_tier":           "Conclave does not choose a provider's service tier",
	"prompt_cache_key":       "prompt caching settings are not carried to the models",
	"prompt_cache_retention": "prompt caching settings are not carried to the models",
	"prompt_cache_options":   "prompt caching settings are not carried to the models",
	"context_management":     "Conclave does not compact conversations",
	"moderation":             "Conclave runs no moderation",
}

func init() {
	for name := range responsesRefused {
		responsesFields[name] = true
	}
}

// Bounds of a Responses request beyond the chat door's.
const (
	maxInputItems    = 2 * maxChatMessages // a tool call and its output are items of their own
	maxMetadataKeys  = 16                  // OpenAI's bounds on metadata
	maxMetadataKey   = 64
	maxMetadataValue = 512
	maxSafetyID      = 64
)

// responsesRequest is a parsed Responses request: the route request as the chat door makes it, and
// what the answer echoes of the request.
type responsesRequest struct {
	*chatRequest
	instructions     *string
	metadata         map[string]string
	user, safetyID   *string
	maxOutputTokens  *int32
	parallelToolCall bool
}

// parseResponses decodes a Responses body and has intake judge the request, collecting every problem.
// The status is 0 when the request is valid, 400 for malformed input and 404 when the model is unknown.
func (s *Server) parseResponses(body []byte) (*responsesRequest, int, []*messages.Problem) {
	fields, bad, ok := objectFields(body, responsesFields)
	if !ok {
		return nil, http.StatusBadRequest, details(bad.errs)
	}
	out := &responsesRequest{chatRequest: s.readModel(fields, bad), parallelToolCall: true}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if why, refused := responsesRefused[name]; refused {
			if _, set := given(fields, name); set {
				bad.Add(name, "is not supported: "+why)
			}
		}
	}
	readSettings(fields, bad)

	ask := &messages.Ask{}
	var conv *conversation
	var instructions string
	raw, hasInstructions := given(fields, "instructions")
	hasInstructions = hasInstructions && json.Unmarshal(raw, &instructions) == nil
	bad.visit("input")
	if raw, ok := given(fields, "input"); !ok {
		bad.Add("input", "is required: a text, or a list of messages and function call items")
	} else {
		// The instructions are the conversation's first system turn, as OpenAI inserts them: the input's
		// turns come after it.
		first := 0
		if hasInstructions {
			first = 1
		}
		conv = readInput(raw, first, bad)
	}
	bad.visit("instructions")
	if _, ok := given(fields, "instructions"); ok && !hasInstructions {
		bad.Add("instructions", "must be a string")
	} else if ok && conv != nil {
		out.instructions = &instructions
		bad.name(turnField(0), "instructions")
		conv.turns = append([]*messages.ChatMessage{{Role: "system", Content: []*messages.ContentPart{{Type: "text", Text: instructions}}}}, conv.turns...)
		conv.roles, conv.texts = append([]string{"system"}, conv.roles...), append([]string{instructions}, conv.texts...)
	}
	if conv != nil {
		ask.Messages = conv.turns
		out.route.Task = renderTask(conv.roles, conv.texts)
	}
	bad.alias("task", "input")
	bad.alias("messages", "input")
	bad.visit("tools")
	if raw, ok := given(fields, "tools"); ok {
		ask.Tools = readFunctionTools(raw, bad)
	}
	if raw, ok := given(fields, "tool_choice"); ok {
		ask.ToolChoice = readResponsesToolChoice(raw, bad)
	}
	if raw, ok := given(fields, "text"); ok {
		ask.ResponseFormat = readTextFormat(raw, bad)
	}
	ask.Sampling = out.sampling(fields, bad)
	out.route.Ask = ask
	if raw, ok := given(fields, "metadata"); ok {
		out.metadata = readMetadata(raw, bad)
	}
	out.stream = flag(fields, "stream", bad)
	if raw, ok := given(fields, "stream_options"); ok {
		// include_obfuscation pads OpenAI's deltas against length side channels; Conclave's deltas are the
		// models' own pieces, unpadded, which a client reads the same way.
		var so struct {
			IncludeObfuscation *bool `json:"include_obfuscation"`
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &so) != nil || keys == nil {
			bad.Add("stream_options", "must be an object")
		}
		bad.unknown("stream_options", keys, only("include_obfuscation"))
	}
	readOwn(fields, out.chatRequest, bad)
	if status, ps := s.judge(out.route, bad); status != 0 {
		return nil, status, ps
	}
	return out, 0, nil
}

// readSettings checks the members whose only value Conclave carries is OpenAI's default: store and
// background are booleans (background true is refused: Conclave answers in the foreground), truncation
// is disabled, and include asks for nothing more.
func readSettings(fields map[string]json.RawMessage, bad *report) {
	flag(fields, "store", bad)
	if flag(fields, "background", bad) {
		bad.Add("background", "is not supported: Conclave answers in the foreground (stream: true for a long answer)")
	}
	if raw, ok := given(fields, "truncation"); ok {
		var t string
		if json.Unmarshal(raw, &t) != nil || (t != "disabled" && t != "auto") {
			bad.Add("truncation", "must be disabled or auto")
		} else if t == "auto" {
			bad.Add("truncation", "auto is not supported: Conclave never drops part of a conversation (a model whose window is too small is not asked)")
		}
	}
	if raw, ok := given(fields, "include"); ok {
		var include []string
		if json.Unmarshal(raw, &include) != nil {
			bad.Add("include", "must be a list")
		} else if len(include) > 0 {
			bad.Add("include", fmt.Sprintf("is not supported: Conclave adds no extra output (%s)", problems.Clip(include[0], 64)))
		}
	}
}

// sampling reads the Responses API's sampling parameters under the chat door's names: max_output_tokens
// is max_tokens, and safety_identifier is the end user's id, as user is (OpenAI's newer name for it).
func (out *responsesRequest) sampling(fields map[string]json.RawMessage, bad *report) *messages.Sampling {
	sf := map[string]json.RawMessage{}
	names := map[string]string{"max_tokens": "max_output_tokens"}
	for _, name := range []string{"temperature", "top_p", "parallel_tool_calls"} {
		if raw, ok := fields[name]; ok {
			sf[name] = raw
		}
	}
	if raw, ok := fields["max_output_tokens"]; ok {
		sf["max_tokens"] = raw
	}
	user, hasUser := given(fields, "user")
	safety, hasSafety := given(fields, "safety_identifier")
	var id string
	switch {
	case hasSafety && json.Unmarshal(safety, &id) != nil:
		bad.Add("safety_identifier", "must be a string")
	case hasSafety && len(id) > maxSafetyID: // OpenAI's bound, tighter than intake's on user
		bad.Add("safety_identifier", fmt.Sprintf("must be at most %d bytes", maxSafetyID))
	case hasSafety && hasUser && string(user) != string(safety):
		bad.Add("safety_identifier", "differs from user: give one of them")
	case hasSafety:
		out.safetyID = &id
		sf["user"], names["user"] = safety, "safety_identifier"
	}
	if hasUser {
		var u string
		if json.Unmarshal(user, &u) == nil {
			out.user = &u
		}
		sf["user"], names["user"] = user, "user"
	}
	sampling := askReader{fields: sf, names: names, bad: bad}.sampling()
	if sampling != nil {
		if sampling.MaxTokens != nil {
			out.maxOutputTokens = sampling.MaxTokens
		}
		if sampling.ParallelToolCalls != nil {
			out.parallelToolCall = *sampling.ParallelToolCalls
		}
	}
	return sampling
}

// readMetadata reads up to 16 string pairs, keys of at most 64 bytes and values of at most 512.
func readMetadata(raw json.RawMessage, bad *report) map[string]string {
	var m map[string]string
	if json.Unmarshal(raw, &m) != nil || m == nil {
		bad.Add("metadata", "must be an object of strings")
		return nil
	}
	if len(m) > maxMetadataKeys {
		bad.Add("metadata", fmt.Sprintf("must hold at most %d pairs", maxMetadataKeys))
		return nil
	}
	for _, k := range sortedStrings(m) {
		if len(k) > maxMetadataKey || len(m[k]) > maxMetadataValue {
			bad.Add("metadata."+problems.Clip(k, 64), fmt.Sprintf("keys are at most %d bytes, values at most %d", maxMetadataKey, maxMetadataValue))
		}
	}
	return m
}

func sortedStrings(m map[string]string) []string {
	raw := make(map[string]json.RawMessage, len(m))
	for k := range m {
		raw[k] = nil
	}
	return slices.Sorted(maps.Keys(raw))
}

// readInput reads input: a text (one user message), or a list of items, every problem under input[i].
// A message item is a turn; a function_call item is a call of the assistant's turn before it (a turn of
// its own when the turn before is not the assistant's); a function_call_output item is a tool turn
// answering a call of an earlier item. The turns are intake's from first on.
func readInput(raw json.RawMessage, first int, bad *report) *conversation {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		bad.name(turnField(first), "input")
		bad.name(turnField(first)+".content[0]", "input")
		c := &conversation{}
		c.add(&messages.ChatMessage{Role: "user", Content: []*messages.ContentPart{{Type: "text", Text: text}}}, "user", text)
		return c
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("input", "must be a text or a list of items")
		return nil
	}
	if len(items) == 0 || len(items) > maxInputItems {
		bad.Add("input", fmt.Sprintf("must hold between 1 and %d items", maxInputItems))
		return nil
	}
	c := &conversation{}
	for i, item := range items {
		field := fmt.Sprintf("input[%d]", i)
		var keys map[string]json.RawMessage
		var head struct {
			Type *string `json:"type"`
			Role *string `json:"role"`
		}
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &head) != nil || keys == nil {
			bad.Add(field, "must be an item: a message with role and content, or a function_call or function_call_output")
			continue
		}
		typ := "message" // a message may leave its type out
		if head.Type != nil {
			typ = *head.Type
		}
		next := turnField(first + len(c.turns))
		switch typ {
		case "message":
			if turn, role, text := readInputMessage(item, keys, field, next, bad); turn != nil {
				c.add(turn, role, text)
			}
		case "function_call":
			n := len(c.turns)
			joins := n > 0 && c.turns[n-1].Role == "assistant"
			at := next + ".tool_calls[0]"
			if joins {
				at = fmt.Sprintf("%s.tool_calls[%d]", turnField(first+n-1), len(c.turns[n-1].ToolCalls))
			}
			call, text := readFunctionCall(item, keys, field, at, bad)
			if call == nil {
				continue
			}
			if joins {
				// The calls an answer made beside its text, or in parallel, are one assistant turn.
				c.turns[n-1].ToolCalls = append(c.turns[n-1].ToolCalls, call)
				c.texts[n-1] = joinText(c.texts[n-1], text)
				continue
			}
			bad.name(next, field)
			c.add(&messages.ChatMessage{Role: "assistant", ToolCalls: []*messages.ToolCall{call}}, "assistant", text)
		case "function_call_output":
			if turn, text := readFunctionOutput(item, keys, field, next, bad); turn != nil {
				c.add(turn, "tool", text)
			}
		case "reasoning":
			bad.Add(field+".type", "reasoning items are not carried: leave them out of input")
		case "item_reference":
			bad.Add(field+".type", "Conclave keeps no items to refer to: send the item itself")
		default:
			bad.Add(field+".type", fmt.Sprintf("items of type %q are not supported (message, function_call and function_call_output are)", problems.Clip(typ, 32)))
		}
	}
	return c
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// inputRoles are the roles of a message item; developer is sent as system, as on chat completions.
var inputRoles = map[string]bool{"user": true, "assistant": true, "system": true, "developer": true}

// readInputMessage reads a message item as the turn at: the turn, the role as written, and its text for
// the task; nil when it has no role of a message. An assistant's message sent back as it came (id,
// status, output_text with annotations) is taken.
func readInputMessage(raw json.RawMessage, keys map[string]json.RawMessage, field, at string, bad *report) (*messages.ChatMessage, string, string) {
	bad.unknown(field, keys, only("type", "role", "content", "id", "status", "phase"))
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &m) != nil || !inputRoles[m.Role] {
		bad.Add(field+".role", fmt.Sprintf("unknown role %q (want user, assistant, system or developer)", problems.Clip(m.Role, 32)))
		return nil, "", ""
	}
	bad.name(at, field)
	turn := &messages.ChatMessage{Role: m.Role}
	if m.Role == "developer" {
		turn.Role = "system" // the same instructions, under the name every wire format knows
	}
	var texts []string
	if len(m.Content) == 0 || string(m.Content) == "null" {
		bad.Add(field+".content", "is required")
	} else {
		turn.Content, texts = readInputContent(m.Content, m.Role, field+".content", at+".content", bad)
	}
	return turn, m.Role, joinAll(texts)
}

func joinAll(texts []string) string {
	out := ""
	for _, t := range texts {
		out = joinText(out, t)
	}
	return out
}

// readInputContent reads a message's content, intake's at: a text, or a list of parts: input_text in
// any message, input_image in a user's, and an answer's output_text and refusal in an assistant's.
func readInputContent(raw json.RawMessage, role, field, at string, bad *report) ([]*messages.ContentPart, []string) {
	bad.name(at, field)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []*messages.ContentPart{{Type: "text", Text: s}}, []string{s}
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, "must be a text or a list of content parts")
		return nil, nil
	}
	if len(items) == 0 || len(items) > intake.MaxParts {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d parts", intake.MaxParts))
		return nil, nil
	}
	var parts []*messages.ContentPart
	var texts []string
	for i, item := range items {
		pf := fmt.Sprintf("%s[%d]", field, i)
		part := fmt.Sprintf("%s[%d]", at, len(parts))
		var typ string
		if json.Unmarshal(item["type"], &typ) != nil {
			bad.Add(pf+".type", "is required: input_text or input_image")
			continue
		}
		bad.name(part, pf)
		allowed := map[string]bool{"type": true}
		switch {
		case typ == "input_text" || (role == "assistant" && (typ == "output_text" || typ == "refusal")):
			key := "text"
			if typ == "refusal" { // a refusal is what the assistant said: the models read it as its text
				key = "refusal"
			}
			allowed[key] = true
			if typ == "output_text" { // an answer's own, sent back with it: they say nothing to a model
				allowed["annotations"], allowed["logprobs"] = true, true
			}
			var text string
			if json.Unmarshal(item[key], &text) != nil {
				bad.Add(pf+"."+key, "must be a string")
				continue
			}
			parts, texts = append(parts, &messages.ContentPart{Type: "text", Text: text}), append(texts, text)
		case typ == "input_image" && role == "user":
			allowed["image_url"], allowed["detail"], allowed["file_id"] = true, true, true
			var img struct {
				URL    *string `json:"image_url"`
				Detail *string `json:"detail"`
			}
			if raw, ok := given(item, "file_id"); ok && string(raw) != `""` {
				bad.Add(pf+".file_id", "is not supported: Conclave keeps no files; send the image as an https URL or a data URI in image_url")
				continue
			}
			b, _ := json.Marshal(item)
			if json.Unmarshal(b, &img) != nil {
				bad.Add(pf, "must be an input_image with image_url")
				continue
			}
			parts, texts = append(parts, imagePart(img.URL, img.Detail, pf+".image_url", pf+".detail", part, bad)), append(texts, "[image]")
		case typ == "input_image" && role == "tool":
			bad.Add(pf+".type", "a function's output is carried as text: images are not supported there")
			continue
		case typ == "input_image":
			bad.Add(pf+".type", "images go in user messages only")
			continue
		case typ == "input_file" || typ == "input_audio":
			bad.Add(pf+".type", fmt.Sprintf("content parts of type %s are not supported (input_text and input_image are)", typ))
			continue
		default:
			bad.Add(pf+".type", fmt.Sprintf("unknown content part type %q (want input_text or input_image)", problems.Clip(typ, 32)))
			continue
		}
		bad.unknown(pf, item, has(allowed))
	}
	return parts, texts
}

// readFunctionCall reads a function_call item, the call at: an assistant's call, sent back with the
// conversation.
func readFunctionCall(raw json.RawMessage, keys map[string]json.RawMessage, field, at string, bad *report) (*messages.ToolCall, string) {
	bad.unknown(field, keys, only("type", "call_id", "name", "arguments", "id", "status"))
	var c struct {
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	if json.Unmarshal(raw, &c) != nil {
		bad.Add(field, "must be a function_call with call_id, name and arguments as text")
		return nil, ""
	}
	return toolCallOf(c.CallID, c.Name, c.Arguments, at, field+".call_id", field+".name", field+".arguments", bad)
}

// readFunctionOutput reads a function_call_output item as the tool turn at: the result of a call of an
// earlier item, as a text or a list of input_text parts.
func readFunctionOutput(raw json.RawMessage, keys map[string]json.RawMessage, field, at string, bad *report) (*messages.ChatMessage, string) {
	bad.unknown(field, keys, only("type", "call_id", "output", "id", "status", "name"))
	var o struct {
		CallID *string         `json:"call_id"`
		Output json.RawMessage `json:"output"`
		Name   *string         `json:"name"`
	}
	if json.Unmarshal(raw, &o) != nil {
		bad.Add(field, "must be a function_call_output with call_id and output")
		return nil, ""
	}
	bad.name(at, field)
	bad.name(at+".tool_call_id", field+".call_id")
	turn := &messages.ChatMessage{Role: "tool"}
	if o.CallID != nil {
		turn.ToolCallId = *o.CallID
	}
	if o.Name != nil { // the function that gave the output, as a chat completion's tool message names it
		bad.name(at+".name", field+".name")
		if *o.Name == "" {
			bad.Add(field+".name", fmt.Sprintf("must be between 1 and %d bytes", intake.MaxNameBytes))
		}
		turn.Name = *o.Name
	}
	var texts []string
	if len(o.Output) == 0 || string(o.Output) == "null" {
		bad.Add(field+".output", "is required: the call's result")
		bad.alias(at+".content", field+".output")
	} else {
		// A result's images are not carried: every wire format takes text as a tool's result.
		turn.Content, texts = readInputContent(o.Output, "tool", field+".output", at+".content", bad)
	}
	return turn, joinAll(texts)
}

// readFunctionTools reads the Responses API's tools: function tools, flat. Built-in tools (web search,
// file search, code interpreter and the like) run at OpenAI, not at a model: they are refused by name.
func readFunctionTools(raw json.RawMessage, bad *report) []*messages.Tool {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("tools", "must be a list of tools")
		return nil
	}
	var tools []*messages.Tool
	for i, item := range items {
		tf := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type string `json:"type"`
			functionDef
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(item, &keys) != nil || json.Unmarshal(item, &t) != nil || keys == nil {
			bad.Add(tf, "must be an object with type function and name")
			continue
		}
		if t.Type != "function" {
			bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported: Conclave carries function tools, which the caller runs", problems.Clip(t.Type, 32)))
			continue
		}
		bad.unknown(tf, keys, only("type", "name", "description", "parameters", "strict"))
		tools = append(tools, t.functionDef.tool(tf, toolField(len(tools)), bad))
	}
	return tools
}

// readResponsesToolChoice reads none, auto, required, or {"type": "function", "name": ...} naming one
// of the tools (which intake checks).
func readResponsesToolChoice(raw json.RawMessage, bad *report) *messages.ToolChoice {
	const want = "must be none, auto, required or {\"type\": \"function\", \"name\": ...}"
	bad.visit("tool_choice")
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return toolChoiceMode(mode, "tool_choice", want, bad)
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &named) != nil {
		bad.Add("tool_choice", want)
		return nil
	}
	if named.Type != "function" {
		bad.Add("tool_choice.type", fmt.Sprintf("tool choices of type %q are not supported (function is)", problems.Clip(named.Type, 32)))
		return nil
	}
	bad.name("tool_choice.function.name", "tool_choice.name")
	return &messages.ToolChoice{Mode: "function", Name: named.Name}
}

// readTextFormat reads text: {"format": text, json_object, or json_schema with name, schema, strict
// and description beside its type}.
func readTextFormat(raw json.RawMessage, bad *report) *messages.OutputFormat {
	var text struct {
		Format    json.RawMessage `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"`
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &text) != nil || keys == nil {
		bad.Add("text", "must be an object with format")
		return nil
	}
	bad.unknown("text", keys, only("format", "verbosity"))
	if _, ok := given(keys, "verbosity"); ok {
		bad.Add("text.verbosity", "is not supported: verbosity is not carried to the models")
	}
	f, ok := given(keys, "format")
	if !ok {
		return nil
	}
	var format struct {
		Type string `json:"type"`
		jsonSchemaDef
	}
	var fkeys map[string]json.RawMessage
	if json.Unmarshal(f, &fkeys) != nil || json.Unmarshal(f, &format) != nil || fkeys == nil {
		bad.Add("text.format", "must be an object with type text, json_object or json_schema")
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(fkeys)) {
		switch {
		case k == "type":
		case format.Type == "json_schema" && (k == "name" || k == "schema" || k == "strict" || k == "description"):
		default:
			bad.Add("text.format."+k, "unknown field")
		}
	}
	bad.name("response_format.type", "text.format.type")
	if format.Type == "json_schema" {
		return format.jsonSchemaDef.format("text.format", bad)
	}
	return &messages.OutputFormat{Type: format.Type}
}

// responses answers POST /v1/responses: the same pipeline as chat completions, answered as the
// Responses API answers, whole or as its stream of events.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	received := time.Now()
	id := uuid.NewString()
	w.Header().Set("X-Request-ID", id)
	body, ok := s.readJSONWith(w, r, writeOpenAIError)
	if !ok {
		return
	}
	rr, status, why := s.parseResponses(body)
	if status != 0 {
		s.refuse(w, id, "responses", status, why)
		return
	}
	req := rr.route
	s.received(r, id, received, "responses", rr.chatRequest)

	routing(w) // before the keep-alives, which read it
	var sse *sseStream
	var events *responseEvents
	var exec *messages.Execution
	var err error
	if rr.stream {
		sse = s.startStream(w)
		events = newResponseEvents(sse, shellOf(rr, id, received))
	}
	if rr.stream {
		// A direct call's answer, or a rotating arbiter's synthesis, goes out as it is written; any
		// other answer once the consensus has it.
		exec, err = s.engine.RouteStreaming(r.Context(), req, events.delta)
	} else {
		exec, err = s.engine.Route(r.Context(), req)
	}
	sse.quiet() // the keep-alives write through w: stop them before w changes
	routed(w, exec)
	if exec = s.settle(id, exec, err); exec.StatusCode != http.StatusOK {
		if sse.started() {
			events.fail(exec)
			return
		}
		setRetryAfter(w, exec.Error)
		writeOpenAIError(w, int(exec.StatusCode), exec.Error.Code, exec.Error.Message, exec.Error.Details)
		return
	}
	resp := renderResponse(exec, rr)
	if events != nil {
		events.finish(exec, resp)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// responseID is the Responses API's id of a request: OpenAI's prefix and the request id, which names
// its record (GET /executions/{request id}).
func responseID(requestID string) string { return "resp_" + requestID }
