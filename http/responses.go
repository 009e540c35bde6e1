package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/conclave-ai/conclave/internal/core/intake"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// POST /v1/responses: OpenAI's Responses API in front of the same route request as chat completions.
// This file is its decoder: it reads the request's own shapes (input items, flat function tools,
// text.format) into the common ask through the builders the chat door uses (ask.go), so both doors take
// and refuse the same things under their own field names; responses_out.go is its encoder, the answer
// and its events.

// responsesFields are the members of a Responses request that Conclave takes, beside its own (timeout,
// strict_parameters, fallbacks), and those it refuses by name. store and metadata are taken as on chat
// completions: Conclave keeps its own record of every request (GET /executions/{id}).
var responsesFields = withRefused(map[string]bool{
	"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true, "parallel_tool_calls": true, "text": true,
	"temperature": true, "top_p": true, "max_output_tokens": true, "user": true, "safety_identifier": true,
	"stream": true, "stream_options": true, "metadata": true, "store": true, "truncation": true, "include": true, "background": true,
	"timeout": true, "strict_parameters": true, "fallbacks": true, "cache": true,
}, responsesRefused)

// responsesRefused are the members of the Responses API that Conclave does not carry, each with the
// reason its refusal gives: a caller reads why rather than "unknown field". null is taken as left out.
var responsesRefused = map[string]string{
	"previous_response_id":   "is not supported: Conclave keeps no responses to continue from: send the whole conversation in input",
	"conversation":           "is not supported: Conclave keeps no conversations: send the whole conversation in input",
	"prompt":                 "is not supported: Conclave keeps no prompt templates: send instructions and input themselves",
	"reasoning":              "is not supported: reasoning settings are not carried to the models",
	"max_tool_calls":         "is not supported: Conclave carries function tools only, which the caller runs: there are no built-in tool calls to bound",
	"top_logprobs":           "is not supported: Conclave returns no log probabilities",
	"service_tier":           "is not supported: Conclave does not choose a provider's service tier",
	"prompt_cache_key":       "is not supported: prompt caching settings are not carried to the models",
	"prompt_cache_retention": "is not supported: prompt caching settings are not carried to the models",
	"prompt_cache_options":   "is not supported: prompt caching settings are not carried to the models",
	"context_management":     "is not supported: Conclave does not compact conversations",
	"moderation":             "is not supported: Conclave runs no moderation",
}

// Bounds of a Responses request beyond the chat door's.
const (
	maxInputItems    = 2 * maxChatMessages // a tool call and its output are items of their own
	maxMetadataKeys  = 16                  // OpenAI's bounds on metadata
	maxMetadataKey   = 64
	maxMetadataValue = 512
	maxSafetyID      = 64
)

// responsesRequest is a decoded Responses request: the route request as the chat door makes it, and
// what the answer echoes of the request.
type responsesRequest struct {
	*chatRequest
	instructions     *string
	metadata         map[string]string
	user, safetyID   *string
	maxOutputTokens  *int32
	parallelToolCall bool
}

// parseResponses is the Responses API's decoder: it decodes a body and has intake judge the request,
// collecting every problem. The status is 0 when the request is valid, 400 for malformed input and 404
// when the model is unknown.
func (s *Server) parseResponses(body []byte) (*responsesRequest, int, []*messages.Problem) {
	return decodeAsk(s, body, responsesFields, s.readResponses)
}

// readResponses reads the Responses API's own members: the model, those refused by name, the settings
// Conclave takes at their defaults, the conversation (instructions and input), the tools, the tool
// choice, the output format, the sampling parameters, the metadata and the stream's.
func (s *Server) readResponses(fields map[string]json.RawMessage, bad *report) *responsesRequest {
	out := &responsesRequest{chatRequest: s.readModel(fields, bad), parallelToolCall: true}
	refuseByName(fields, responsesRefused, bad)
	readSettings(fields, bad)
	ask := &messages.Ask{}
	if conv := out.readConversation(fields, bad); conv != nil {
		conv.into(out.route, ask)
	}
	bad.alias("task", "input")
	bad.alias("messages", "input")
	bad.visit("tools")
	ask.Tools = readGiven(fields, "tools", readFunctionTools, bad)
	ask.ToolChoice = readGiven(fields, "tool_choice", readResponsesToolChoice, bad)
	ask.ResponseFormat = readGiven(fields, "text", readTextFormat, bad)
	ask.Sampling = out.sampling(fields, bad)
	out.route.Ask = ask
	out.metadata = readGiven(fields, "metadata", readMetadata, bad)
	out.stream = flag(fields, "stream", bad)
	if raw, ok := given(fields, "stream_options"); ok {
		readStreamOptions(raw, bad)
	}
	return out
}

// readConversation reads instructions and input into the conversation: the instructions are its first
// system turn, as OpenAI inserts them, and the input's turns come after it.
func (out *responsesRequest) readConversation(fields map[string]json.RawMessage, bad *report) *conversation {
	var conv *conversation
	var instructions string
	raw, hasInstructions := given(fields, "instructions")
	hasInstructions = hasInstructions && json.Unmarshal(raw, &instructions) == nil
	bad.visit("input")
	if raw, ok := given(fields, "input"); !ok {
		bad.Add("input", "is required: a text, or a list of messages and function call items")
	} else {
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
		conv.turns = append([]*messages.ChatMessage{textTurn("system", instructions)}, conv.turns...)
		conv.roles, conv.texts = append([]string{"system"}, conv.roles...), append([]string{instructions}, conv.texts...)
	}
	return conv
}

// readStreamOptions checks a stream's options. include_obfuscation pads OpenAI's deltas against length
// side channels; Conclave's deltas are the models' own pieces, unpadded, which a client reads the same
// way.
func readStreamOptions(raw json.RawMessage, bad *report) {
	var so struct {
		IncludeObfuscation *bool `json:"include_obfuscation"`
	}
	keys, ok := object(raw, &so)
	if !ok {
		bad.Add("stream_options", "must be an object")
	}
	bad.unknown("stream_options", keys, only("include_obfuscation"))
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

// sampling reads the Responses API's sampling parameters (responsesSampling), noting what the answer
// echoes of them.
func (out *responsesRequest) sampling(fields map[string]json.RawMessage, bad *report) *messages.Sampling {
	params := responsesSampling
	if out.endUser(fields, bad) == "safety_identifier" {
		params = responsesSafetySampling
	}
	sampling := params.read(fields, "", bad)
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

// endUser reads which member names the end user: user, or safety_identifier, OpenAI's newer name for
// it, when it is given alone or agrees with user; it returns the member the sampling's user is read
// from.
func (out *responsesRequest) endUser(fields map[string]json.RawMessage, bad *report) string {
	user, hasUser := given(fields, "user")
	safety, hasSafety := given(fields, "safety_identifier")
	var id string
	wire := "user"
	switch {
	case hasSafety && json.Unmarshal(safety, &id) != nil:
		bad.Add("safety_identifier", "must be a string")
	case hasSafety && len(id) > maxSafetyID: // OpenAI's bound, tighter than intake's on user
		bad.Add("safety_identifier", fmt.Sprintf("must be at most %d bytes", maxSafetyID))
	case hasSafety && hasUser && string(user) != string(safety):
		bad.Add("safety_identifier", "differs from user: give one of them")
	case hasSafety:
		out.safetyID = &id
		wire = "safety_identifier"
	}
	if hasUser {
		var u string
		if json.Unmarshal(user, &u) == nil {
			out.user = &u
		}
		wire = "user"
	}
	return wire
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
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if len(k) > maxMetadataKey || len(m[k]) > maxMetadataValue {
			bad.Add("metadata."+problems.Clip(k, 64), fmt.Sprintf("keys are at most %d bytes, values at most %d", maxMetadataKey, maxMetadataValue))
		}
	}
	return m
}

// readInput reads input: a text (one user message), or a list of items, every problem under input[i].
// The turns are intake's from first on.
func readInput(raw json.RawMessage, first int, bad *report) *conversation {
	var text string
	c := &conversation{}
	if json.Unmarshal(raw, &text) == nil {
		bad.name(turnField(first), "input")
		bad.name(turnField(first)+".content[0]", "input")
		c.add(textTurn("user", text), "user", text)
		return c
	}
	items, ok := listOf[json.RawMessage](raw, "input", "must be a text or a list of items", maxInputItems, "items", bad)
	if !ok {
		return nil
	}
	for i, item := range items {
		c.readItem(item, fmt.Sprintf("input[%d]", i), first, bad)
	}
	return c
}

// inputItemsRefused are the types of input items Conclave does not carry, with why.
var inputItemsRefused = map[string]string{
	"reasoning":      "reasoning items are not carried: leave them out of input",
	"item_reference": "Conclave keeps no items to refer to: send the item itself",
}

// readItem reads an input item, field, into the conversation, whose turns are intake's from first on.
// A message item is a turn; a function_call item is a call of the assistant's turn before it (a turn of
// its own when the turn before is not the assistant's); a function_call_output item is a tool turn
// answering a call of an earlier item.
func (c *conversation) readItem(item json.RawMessage, field string, first int, bad *report) {
	var head struct {
		Type *string `json:"type"`
		Role *string `json:"role"`
	}
	keys, ok := object(item, &head)
	if !ok {
		bad.Add(field, "must be an item: a message with role and content, or a function_call or function_call_output")
		return
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
		c.readCallItem(item, keys, field, first, bad)
	case "function_call_output":
		if turn, text := readFunctionOutput(item, keys, field, next, bad); turn != nil {
			c.add(turn, "tool", text)
		}
	default:
		why, refused := inputItemsRefused[typ]
		if !refused {
			why = fmt.Sprintf("items of type %q are not supported (message, function_call and function_call_output are)", problems.Clip(typ, 32))
		}
		bad.Add(field+".type", why)
	}
}

// readCallItem reads a function_call item into the conversation: the calls an answer made beside its
// text, or in parallel, are one assistant turn.
func (c *conversation) readCallItem(item json.RawMessage, keys map[string]json.RawMessage, field string, first int, bad *report) {
	n := len(c.turns)
	next := turnField(first + n)
	joins := n > 0 && c.turns[n-1].Role == "assistant"
	at := next + ".tool_calls[0]"
	if joins {
		at = fmt.Sprintf("%s.tool_calls[%d]", turnField(first+n-1), len(c.turns[n-1].ToolCalls))
	}
	call, text := readFunctionCall(item, keys, field, at, bad)
	switch {
	case call == nil:
	case joins:
		c.turns[n-1].ToolCalls = append(c.turns[n-1].ToolCalls, call)
		c.texts[n-1] = joinText(c.texts[n-1], text)
	default:
		bad.name(next, field)
		c.add(&messages.ChatMessage{Role: "assistant", ToolCalls: []*messages.ToolCall{call}}, "assistant", text)
	}
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
	turn := &messages.ChatMessage{Role: asRole(m.Role)}
	var texts []string
	if !present(m.Content) {
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
	items, ok := listOf[map[string]json.RawMessage](raw, field, "must be a text or a list of content parts", intake.MaxParts, "parts", bad)
	if !ok {
		return nil, nil
	}
	return readParts(items, role, field, at, "is required: input_text or input_image", inputPart, bad)
}

// inputPart reads an input content part: input_text, an answer's output_text and refusal sent back in
// an assistant's message (a refusal is what the assistant said: the models read it as its text), or
// input_image in a user's.
func inputPart(typ, role string, item map[string]json.RawMessage, pf, at string, bad *report) (*messages.ContentPart, string, map[string]bool) {
	switch {
	case typ == "input_text" || (role == "assistant" && typ == "output_text"):
		// An answer's annotations and logprobs come back with it: they say nothing to a model.
		return readTextPart(item, "text", pf, map[string]bool{"type": true, "text": true, "annotations": typ == "output_text", "logprobs": typ == "output_text"}, bad)
	case role == "assistant" && typ == "refusal":
		return readTextPart(item, "refusal", pf, map[string]bool{"type": true, "refusal": true}, bad)
	case typ == "input_image" && role == "user":
		return readInputImage(item, pf, at, bad)
	case typ == "input_image" && role == "tool":
		bad.Add(pf+".type", "a function's output is carried as text: images are not supported there")
	case typ == "input_image":
		bad.Add(pf+".type", "images go in user messages only")
	case typ == "input_file" || typ == "input_audio":
		bad.Add(pf+".type", fmt.Sprintf("content parts of type %s are not supported (input_text and input_image are)", typ))
	default:
		bad.Add(pf+".type", fmt.Sprintf("unknown content part type %q (want input_text or input_image)", problems.Clip(typ, 32)))
	}
	return nil, "", nil
}

// readInputImage reads an input_image part as the part at: an https URL or a data URI in image_url.
func readInputImage(item map[string]json.RawMessage, pf, at string, bad *report) (*messages.ContentPart, string, map[string]bool) {
	if raw, ok := given(item, "file_id"); ok && string(raw) != `""` {
		bad.Add(pf+".file_id", "is not supported: Conclave keeps no files; send the image as an https URL or a data URI in image_url")
		return nil, "", nil
	}
	var img struct {
		URL    *string `json:"image_url"`
		Detail *string `json:"detail"`
	}
	b, _ := json.Marshal(item)
	if json.Unmarshal(b, &img) != nil {
		bad.Add(pf, "must be an input_image with image_url")
		return nil, "", nil
	}
	takes := map[string]bool{"type": true, "image_url": true, "detail": true, "file_id": true}
	return imagePart(img.URL, img.Detail, pf+".image_url", pf+".detail", at, bad), "[image]", takes
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
	if !present(o.Output) {
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
	return readToolList(items, readFunctionTool, bad)
}

// readFunctionTool reads a function tool of the Responses API, its members beside its type.
func readFunctionTool(item json.RawMessage, tf string, n int, bad *report) *messages.Tool {
	var t struct {
		Type string `json:"type"`
		functionDef
	}
	keys, ok := object(item, &t)
	if !ok {
		bad.Add(tf, "must be an object with type function and name")
		return nil
	}
	if t.Type != "function" {
		bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported: Conclave carries function tools, which the caller runs", problems.Clip(t.Type, 32)))
		return nil
	}
	bad.unknown(tf, keys, only("type", "name", "description", "parameters", "strict"))
	return t.functionDef.tool(tf, toolField(n), bad)
}

// readResponsesToolChoice reads none, auto, required, or {"type": "function", "name": ...} naming one
// of the tools (which intake checks).
func readResponsesToolChoice(raw json.RawMessage, bad *report) *messages.ToolChoice {
	const want = "must be none, auto, required or {\"type\": \"function\", \"name\": ...}"
	return readNamedChoice(raw, want, "tool_choice.name", func(raw json.RawMessage) (string, string, error) {
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		err := json.Unmarshal(raw, &named)
		return named.Type, named.Name, err
	}, bad)
}

// readTextFormat reads text: {"format": ...}; verbosity is refused.
func readTextFormat(raw json.RawMessage, bad *report) *messages.OutputFormat {
	var text struct {
		Format    json.RawMessage `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"`
	}
	keys, ok := object(raw, &text)
	if !ok {
		bad.Add("text", "must be an object with format")
		return nil
	}
	bad.unknown("text", keys, only("format", "verbosity"))
	if _, ok := given(keys, "verbosity"); ok {
		bad.Add("text.verbosity", "is not supported: verbosity is not carried to the models")
	}
	return readGiven(keys, "format", readFlatFormat, bad)
}

// readFlatFormat reads text.format: text, json_object, or json_schema with name, schema, strict and
// description beside its type.
func readFlatFormat(raw json.RawMessage, bad *report) *messages.OutputFormat {
	var format struct {
		Type string `json:"type"`
		jsonSchemaDef
	}
	keys, ok := object(raw, &format)
	if !ok {
		bad.Add("text.format", "must be an object with type text, json_object or json_schema")
		return nil
	}
	schemaMembers := only("name", "schema", "strict", "description")
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if k != "type" && !(format.Type == "json_schema" && schemaMembers(k)) {
			bad.Add("text.format."+k, "unknown field")
		}
	}
	bad.name("response_format.type", "text.format.type")
	if format.Type == "json_schema" {
		return format.jsonSchemaDef.format("text.format", bad)
	}
	return &messages.OutputFormat{Type: format.Type}
}

// responseID is the Responses API's id of a request: OpenAI's prefix and the request id, which names
// its record (GET /executions/{request id}).
func responseID(requestID string) string { return "resp_" + requestID }
