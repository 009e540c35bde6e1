package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/validation"
	"github.com/conclave-ai/conclave/messages"
)

// What a caller asks of the models beyond its text, read from OpenAI's request shape: the sampling
// parameters (also /route-thompson's "parameters"), the conversation with its content parts and tool
// calls, the tools, the tool choice and the output format. Every problem is collected, under the
// field it concerns; what is valid goes into a messages.Ask as the caller wrote it.

// Bounds of an ask, beyond the body's size.
const (
	maxStops        = 4        // OpenAI's bound
	maxStopBytes    = 1024     // one stop sequence
	maxOutputTokens = 1 << 24  // max_tokens: far above any model's, within int32
	maxLogitBias    = 1024     // tokens biased
	maxUserBytes    = 256      // the end user's id
	maxParts        = 64       // content parts of one message
	maxToolCalls    = 128      // tool calls of one assistant message
	maxTools        = 128      // OpenAI's bound
	maxNameBytes    = 256      // a participant's name, a tool call's id
	maxImageURL     = 8 << 10  // an https image URL
	maxImageBytes   = 20 << 20 // a decoded data URI image
	maxFallbacks    = 8
)

// samplingFields are the sampling parameters, as chat completions and /route-thompson's parameters name
// them (chat completions also takes parallel_tool_calls, with its tools).
var samplingFields = map[string]bool{
	"temperature": true, "top_p": true, "max_tokens": true, "max_completion_tokens": true, "stop": true, "seed": true,
	"presence_penalty": true, "frequency_penalty": true, "logit_bias": true, "user": true,
}

// functionName is OpenAI's rule for function and schema names.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// imageTypes are the image types a data URI may hold: those the providers take.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

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
	bad    *validation.Errors
}

func (r askReader) add(field, msg string) {
	if name, ok := r.names[field]; ok {
		field = name
	}
	r.bad.Add(r.prefix+field, msg)
}

// float reads a number within [lo, hi].
func (r askReader) float(name string, lo, hi float64) *float64 {
	raw, ok := given(r.fields, name)
	if !ok {
		return nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil || math.IsNaN(v) {
		r.add(name, "must be a number")
		return nil
	}
	if v < lo || v > hi {
		r.add(name, fmt.Sprintf("must be between %g and %g", lo, hi))
		return nil
	}
	return &v
}

// whole reads an integer within [lo, hi], exactly: a seed may be larger than a float64 holds.
func (r askReader) whole(name string, lo, hi int64) *int64 {
	raw, ok := given(r.fields, name)
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

// sampling reads the sampling parameters; nil when none is given.
func (r askReader) sampling() *messages.Sampling {
	s := &messages.Sampling{
		Temperature:      r.float("temperature", 0, 2),
		TopP:             r.float("top_p", 0, 1),
		PresencePenalty:  r.float("presence_penalty", -2, 2),
		FrequencyPenalty: r.float("frequency_penalty", -2, 2),
		Seed:             r.whole("seed", math.MinInt64, math.MaxInt64),
	}
	// max_completion_tokens is OpenAI's newer name for max_tokens: either, or both when they agree.
	maxTokens, maxCompletion := r.whole("max_tokens", 1, maxOutputTokens), r.whole("max_completion_tokens", 1, maxOutputTokens)
	switch {
	case maxTokens != nil && maxCompletion != nil && *maxTokens != *maxCompletion:
		r.add("max_completion_tokens", "differs from max_tokens: give one of them")
	case maxTokens != nil:
		s.MaxTokens = proto32(*maxTokens)
	case maxCompletion != nil:
		s.MaxTokens = proto32(*maxCompletion)
	}
	s.Stop = r.stop()
	s.LogitBias = r.logitBias()
	if raw, ok := given(r.fields, "user"); ok {
		if json.Unmarshal(raw, &s.User) != nil {
			r.add("user", "must be a string")
		} else if len(s.User) > maxUserBytes {
			r.add("user", fmt.Sprintf("must be at most %d bytes", maxUserBytes))
		}
	}
	if raw, ok := given(r.fields, "parallel_tool_calls"); ok {
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

func proto32(v int64) *int32 {
	n := int32(v)
	return &n
}

// stop reads chat completions' stop: a stop sequence or a list of up to four.
func (r askReader) stop() []string { return r.stops("stop", true) }

// stops reads a list of up to four stop sequences under name (four: OpenAI's bound, which a panel's
// every member must take). single also takes one sequence as a string, and refuses an empty list, as
// chat completions do; Anthropic's stop_sequences is a list, which may be empty.
func (r askReader) stops(name string, single bool) []string {
	raw, ok := given(r.fields, name)
	if !ok {
		return nil
	}
	var one string
	var stops []string
	switch {
	case single && json.Unmarshal(raw, &one) == nil:
		stops = []string{one}
	case json.Unmarshal(raw, &stops) != nil && single:
		r.add(name, "must be a string or a list of strings")
		return nil
	case json.Unmarshal(raw, &stops) != nil:
		r.add(name, "must be a list of strings")
		return nil
	case len(stops) == 0 && !single:
		return nil
	}
	if len(stops) == 0 || len(stops) > maxStops {
		r.add(name, fmt.Sprintf("must hold between 1 and %d sequences", maxStops))
		return nil
	}
	for i, s := range stops {
		if s == "" || len(s) > maxStopBytes {
			r.add(fmt.Sprintf("%s[%d]", name, i), fmt.Sprintf("must be between 1 and %d bytes", maxStopBytes))
			return nil
		}
	}
	return stops
}

// logitBias reads a map of token ids to biases in [-100, 100].
func (r askReader) logitBias() map[string]int32 {
	raw, ok := given(r.fields, "logit_bias")
	if !ok {
		return nil
	}
	var m map[string]float64
	if json.Unmarshal(raw, &m) != nil {
		r.add("logit_bias", "must be an object of token ids to numbers")
		return nil
	}
	if len(m) > maxLogitBias {
		r.add("logit_bias", fmt.Sprintf("must bias at most %d tokens", maxLogitBias))
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // problems in a stable order
	out := make(map[string]int32, len(m))
	for _, k := range keys {
		v := m[k]
		if n, err := strconv.ParseUint(k, 10, 32); err != nil || strconv.FormatUint(n, 10) != k {
			r.add("logit_bias."+validation.Clip(k, 32), "must be a token id (a non-negative integer)")
			continue
		}
		if v != math.Trunc(v) || v < -100 || v > 100 {
			r.add("logit_bias."+k, "must be an integer between -100 and 100")
			continue
		}
		out[k] = int32(v)
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
	users        int
}

// readMessages reads a conversation, every problem under messages[i]. A tool message must answer a
// tool call of an earlier assistant message.
func readMessages(raw json.RawMessage, bad *validation.Errors) *conversation {
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
	callIDs := map[string]bool{}
	ok := true
	for i, item := range items {
		field := fmt.Sprintf("messages[%d]", i)
		turn, role, text, good := readMessage(item, field, callIDs, bad)
		if !good {
			ok = false
			continue
		}
		if role == "user" {
			c.users++
		}
		c.turns, c.roles, c.texts = append(c.turns, turn), append(c.roles, role), append(c.texts, text)
	}
	if c.users == 0 && ok {
		bad.Add("messages", "must hold at least one user message")
	}
	if !ok {
		return nil
	}
	return c
}

// readMessage reads one message: the turn, its role as the caller wrote it, its text for the task,
// and whether it is valid.
func readMessage(raw json.RawMessage, field string, callIDs map[string]bool, bad *validation.Errors) (*messages.ChatMessage, string, string, bool) {
	var keys map[string]json.RawMessage
	var m chatMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &m) != nil {
		bad.Add(field, "must be an object with role and content")
		return nil, "", "", false
	}
	before := len(*bad)
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !messageFields[k] {
			bad.Add(field+"."+k, "unknown field")
		}
	}
	if !chatRoles[m.Role] {
		if m.Role == "function" {
			bad.Add(field+".role", "the function role is OpenAI's deprecated form: send a tool message with tool_call_id")
		} else {
			bad.Add(field+".role", fmt.Sprintf("unknown role %q (want system, developer, user, assistant or tool)", validation.Clip(m.Role, 32)))
		}
		return nil, "", "", false
	}
	turn := &messages.ChatMessage{Role: m.Role}
	if m.Role == "developer" {
		turn.Role = "system" // the same instructions, under the name every wire format knows
	}
	if m.Name != nil {
		if *m.Name == "" || len(*m.Name) > maxNameBytes {
			bad.Add(field+".name", fmt.Sprintf("must be between 1 and %d bytes", maxNameBytes))
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
	if m.ToolCallID != nil && m.Role != "tool" {
		bad.Add(field+".tool_call_id", "only a tool message has tool_call_id")
	}

	var texts []string
	hasContent := len(m.Content) > 0 && string(m.Content) != "null"
	if hasContent {
		turn.Content, texts = readContent(m.Content, m.Role, field+".content", bad)
	}
	if m.Role == "assistant" && string(m.Content) == `""` && len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
		// An empty text beside tool calls says nothing; some wire formats refuse an empty text block.
		turn.Content, texts, hasContent = nil, nil, false
	}
	switch m.Role {
	case "assistant":
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			var calls []string
			turn.ToolCalls, calls = readToolCalls(m.ToolCalls, field+".tool_calls", callIDs, bad)
			texts = append(texts, calls...)
		}
		if m.Refusal != nil && !hasContent {
			// A refusal is what the assistant said: the models read it as its text.
			turn.Content = []*messages.ContentPart{{Type: "text", Text: *m.Refusal}}
			texts = append(texts, *m.Refusal)
			hasContent = true
		}
		if !hasContent && len(turn.ToolCalls) == 0 && len(*bad) == before {
			bad.Add(field+".content", "is required unless the message has tool_calls")
		}
	case "tool":
		turn.ToolCallId = answersCall(m.ToolCallID, field+".tool_call_id", "an earlier assistant message", callIDs, bad)
		fallthrough
	default:
		if !hasContent {
			bad.Add(field+".content", "is required")
		}
	}
	return turn, m.Role, strings.Join(texts, "\n"), len(*bad) == before
}

// readContent reads a message's content: a string, or a list of parts. Text parts go to every role;
// image parts only in a user's message, as OpenAI takes them.
func readContent(raw json.RawMessage, role, field string, bad *validation.Errors) ([]*messages.ContentPart, []string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []*messages.ContentPart{{Type: "text", Text: s}}, []string{s}
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, "must be a string or a list of content parts")
		return nil, nil
	}
	if len(items) == 0 || len(items) > maxParts {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d parts", maxParts))
		return nil, nil
	}
	var parts []*messages.ContentPart
	var texts []string
	for i, item := range items {
		pf := fmt.Sprintf("%s[%d]", field, i)
		var typ string
		if json.Unmarshal(item["type"], &typ) != nil {
			bad.Add(pf+".type", "is required: text or image_url")
			continue
		}
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
		case typ == "image_url" && role == "user":
			allowed["image_url"] = true
			if p := readImage(item["image_url"], pf+".image_url", bad); p != nil {
				parts, texts = append(parts, p), append(texts, "[image]")
			}
		case typ == "image_url":
			bad.Add(pf+".type", "images go in user messages only")
			continue
		case typ == "input_audio" || typ == "file":
			bad.Add(pf+".type", fmt.Sprintf("content parts of type %s are not supported (text and image_url are)", typ))
			continue
		default:
			bad.Add(pf+".type", fmt.Sprintf("unknown content part type %q (want text or image_url)", validation.Clip(typ, 32)))
			continue
		}
		for _, k := range sortedKeys(item) {
			if !allowed[k] {
				bad.Add(pf+"."+k, "unknown field")
			}
		}
	}
	return parts, texts
}

func sortedKeys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readImage reads a chat completion's image part: {"url": ..., "detail": ...}.
func readImage(raw json.RawMessage, field string, bad *validation.Errors) *messages.ContentPart {
	var img struct {
		URL    *string `json:"url"`
		Detail *string `json:"detail"`
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &img) != nil || keys == nil {
		bad.Add(field, "must be an object with url")
		return nil
	}
	before := len(*bad)
	for _, k := range sortedKeys(keys) {
		if k != "url" && k != "detail" {
			bad.Add(field+"."+k, "unknown field")
		}
	}
	part := imagePart(img.URL, img.Detail, field+".url", field+".detail", bad)
	if len(*bad) > before {
		return nil
	}
	return part
}

// imagePart checks an image, as every door takes it: an https URL, which Conclave passes on and never
// fetches, or a data URI of a PNG, JPEG, GIF or WebP image whose bytes are what it says; its detail is
// auto, low, high or original. Problems go under the fields named.
func imagePart(url, detail *string, urlField, detailField string, bad *validation.Errors) *messages.ContentPart {
	before := len(*bad)
	part := &messages.ContentPart{Type: "image_url"}
	if detail != nil {
		switch *detail {
		case "auto", "low", "high", "original":
			part.Detail = *detail
		default:
			bad.Add(detailField, "must be auto, low, high or original")
		}
	}
	switch {
	case url == nil:
		bad.Add(urlField, "is required: an https URL or a data URI")
	case strings.HasPrefix(*url, "data:"):
		if msg := checkDataURI(*url); msg != "" {
			bad.Add(urlField, msg)
		}
	default:
		if msg := checkImageURL(*url); msg != "" {
			bad.Add(urlField, msg)
		}
	}
	if len(*bad) > before {
		return nil
	}
	part.ImageUrl = *url
	return part
}

// checkImageURL says what is wrong with an image URL, or "".
func checkImageURL(s string) string {
	if len(s) > maxImageURL {
		return fmt.Sprintf("must be at most %d bytes (or a data URI)", maxImageURL)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "":
		return "must be an https URL or a data URI"
	case u.Scheme != "https":
		return fmt.Sprintf("must be an https URL or a data URI, not %s", validation.Clip(u.Scheme, 16))
	case u.User != nil:
		return "must not carry credentials"
	}
	return ""
}

// checkDataURI says what is wrong with an image's data URI, or "": it must be base64 of at most
// maxImageBytes, and its bytes an image of the type it declares.
func checkDataURI(s string) string {
	header, data, ok := strings.Cut(strings.TrimPrefix(s, "data:"), ",")
	mediaType, encoding, _ := strings.Cut(header, ";")
	mediaType = strings.ToLower(mediaType)
	switch {
	case !ok || encoding != "base64":
		return "a data URI must be data:<image type>;base64,<data>"
	case !imageTypes[mediaType]:
		return fmt.Sprintf("a data URI must hold image/png, image/jpeg, image/gif or image/webp, not %q", validation.Clip(mediaType, 32))
	case base64.StdEncoding.DecodedLen(len(data)) > maxImageBytes+2:
		return fmt.Sprintf("the image must be at most %d bytes", maxImageBytes)
	}
	decoded, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return "the data URI's data is not base64"
	}
	if len(decoded) > maxImageBytes {
		return fmt.Sprintf("the image must be at most %d bytes", maxImageBytes)
	}
	if sniffed := http.DetectContentType(decoded); sniffed != mediaType {
		return fmt.Sprintf("the data is not a %s image (it looks like %s)", mediaType, sniffed)
	}
	return ""
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

// readToolCalls reads an assistant's tool calls, noting their ids in callIDs; it returns the calls
// and their text for the task.
func readToolCalls(raw json.RawMessage, field string, callIDs map[string]bool, bad *validation.Errors) ([]*messages.ToolCall, []string) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add(field, "must be a list of tool calls")
		return nil, nil
	}
	if len(items) == 0 || len(items) > maxToolCalls {
		bad.Add(field, fmt.Sprintf("must hold between 1 and %d tool calls", maxToolCalls))
		return nil, nil
	}
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
		for _, k := range sortedKeys(keys) {
			if k != "id" && k != "type" && k != "function" {
				bad.Add(cf+"."+k, "unknown field")
			}
		}
		if c.Type != "function" {
			bad.Add(cf+".type", "must be function")
		}
		call, text := toolCallOf(c.ID, c.Function.Name, c.Function.Arguments, cf+".id", cf+".function.name", cf+".function.arguments", callIDs, bad)
		calls, texts = append(calls, call), append(texts, text)
	}
	return calls, texts
}

// toolCallOf checks a tool call of an earlier turn, as every door takes it (its id, the function's name,
// its arguments as a JSON object in text), noting its id in callIDs; it returns the call and its text
// for the task. Problems go under the fields named.
func toolCallOf(id, name, arguments, idField, nameField, argsField string, callIDs map[string]bool, bad *validation.Errors) (*messages.ToolCall, string) {
	switch {
	case id == "" || len(id) > maxNameBytes:
		bad.Add(idField, fmt.Sprintf("must be between 1 and %d bytes", maxNameBytes))
	case callIDs[id]:
		bad.Add(idField, fmt.Sprintf("%q names an earlier tool call too", validation.Clip(id, 64)))
	}
	callIDs[id] = true
	if !functionName.MatchString(name) {
		bad.Add(nameField, "must be 1 to 64 letters, digits, '_' or '-'")
	}
	args := strings.TrimSpace(arguments)
	if args == "" {
		args = "{}" // a call without arguments, as some models write it
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		bad.Add(argsField, "must be a JSON object, as text")
	}
	return &messages.ToolCall{Id: id, Name: name, Arguments: args}, fmt.Sprintf("[calls %s(%s)]", name, args)
}

// answersCall checks the call id a tool's result answers: a call of an earlier turn (what names those
// calls in the door's words). It returns the id, or "" with a problem.
func answersCall(id *string, field, what string, callIDs map[string]bool, bad *validation.Errors) string {
	switch {
	case id == nil || *id == "":
		bad.Add(field, "is required: the id of the tool call this result answers")
	case !callIDs[*id]:
		bad.Add(field, fmt.Sprintf("%q answers no tool call of %s", validation.Clip(*id, 64), what))
	default:
		return *id
	}
	return ""
}

// readTools reads the functions the models may call.
func readTools(raw json.RawMessage, bad *validation.Errors) []*messages.Tool {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		bad.Add("tools", "must be a list of tools")
		return nil
	}
	if len(items) == 0 || len(items) > maxTools {
		bad.Add("tools", fmt.Sprintf("must hold between 1 and %d tools", maxTools))
		return nil
	}
	var tools []*messages.Tool
	seen := map[string]bool{}
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
		for _, k := range sortedKeys(keys) {
			if k != "type" && k != "function" {
				bad.Add(tf+"."+k, "unknown field")
			}
		}
		if t.Type != "function" {
			bad.Add(tf+".type", fmt.Sprintf("tools of type %q are not supported (function is)", validation.Clip(t.Type, 32)))
			continue
		}
		var f functionDef
		var fkeys map[string]json.RawMessage
		if json.Unmarshal(t.Function, &fkeys) != nil || json.Unmarshal(t.Function, &f) != nil || fkeys == nil {
			bad.Add(tf+".function", "must be an object with name")
			continue
		}
		for _, k := range sortedKeys(fkeys) {
			if k != "name" && k != "description" && k != "parameters" && k != "strict" {
				bad.Add(tf+".function."+k, "unknown field")
			}
		}
		tools = append(tools, f.tool(tf+".function", seen, bad))
	}
	return tools
}

// functionDef is a function tool as every door describes it (chat completions under "function", the
// Responses API beside its type).
type functionDef struct {
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// tool checks a function tool whose members are under field: a name of OpenAI's rule, unique among
// the tools (seen), parameters a JSON schema object kept in the caller's key order.
func (f functionDef) tool(field string, seen map[string]bool, bad *validation.Errors) *messages.Tool {
	tool := &messages.Tool{Name: f.Name}
	switch {
	case !functionName.MatchString(f.Name):
		bad.Add(field+".name", "must be 1 to 64 letters, digits, '_' or '-'")
	case seen[f.Name]:
		bad.Add(field+".name", fmt.Sprintf("%q names an earlier tool too", f.Name))
	}
	seen[f.Name] = true
	if f.Description != nil {
		tool.Description = *f.Description
	}
	if f.Strict != nil {
		tool.Strict = *f.Strict
	}
	if len(f.Parameters) > 0 && string(f.Parameters) != "null" {
		if schema, msg := schemaText(f.Parameters); msg != "" {
			bad.Add(field+".parameters", msg)
		} else {
			tool.Parameters = schema
		}
	}
	return tool
}

// schemaText checks that a JSON schema is an object and returns it compacted, its keys in the caller's
// order (a strict schema's property order is the order a model writes the fields in).
func schemaText(raw json.RawMessage) (string, string) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return "", "must be a JSON schema (an object)"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", "must be a JSON schema (an object)"
	}
	return b.String(), ""
}

// readToolChoice reads none, auto, required, or a function the model must call, which must be one of
// tools.
func readToolChoice(raw json.RawMessage, tools []*messages.Tool, bad *validation.Errors) *messages.ToolChoice {
	const want = "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}"
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return toolChoiceMode(mode, "tool_choice", want, tools, bad)
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
		bad.Add("tool_choice.type", fmt.Sprintf("tool choices of type %q are not supported (function is)", validation.Clip(named.Type, 32)))
		return nil
	}
	return toolChoiceFunction(named.Function.Name, "tool_choice.function.name", tools, bad)
}

// toolChoiceMode checks a tool choice by mode: none, auto, or required (which needs tools); want says
// in the door's words what the field may be.
func toolChoiceMode(mode, field, want string, tools []*messages.Tool, bad *validation.Errors) *messages.ToolChoice {
	switch mode {
	case "none", "auto":
	case "required":
		if len(tools) == 0 {
			bad.Add(field, "required needs tools")
			return nil
		}
	default:
		bad.Add(field, want)
		return nil
	}
	return &messages.ToolChoice{Mode: mode}
}

// toolChoiceFunction checks a function the model must call: one of tools.
func toolChoiceFunction(name, field string, tools []*messages.Tool, bad *validation.Errors) *messages.ToolChoice {
	for _, t := range tools {
		if t.Name == name {
			return &messages.ToolChoice{Mode: "function", Name: name}
		}
	}
	bad.Add(field, fmt.Sprintf("%q is none of the tools", validation.Clip(name, 64)))
	return nil
}

// readResponseFormat reads text, json_object, or json_schema with its name, schema and strictness.
func readResponseFormat(raw json.RawMessage, bad *validation.Errors) *messages.OutputFormat {
	var f struct {
		Type       string          `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &f) != nil || keys == nil {
		bad.Add("response_format", "must be an object with type text, json_object or json_schema")
		return nil
	}
	for _, k := range sortedKeys(keys) {
		if k != "type" && !(k == "json_schema" && f.Type == "json_schema") {
			bad.Add("response_format."+k, "unknown field")
		}
	}
	switch f.Type {
	case "text", "json_object":
		return &messages.OutputFormat{Type: f.Type}
	case "json_schema":
	default:
		bad.Add("response_format.type", fmt.Sprintf("unknown type %q (want text, json_object or json_schema)", validation.Clip(f.Type, 32)))
		return nil
	}
	var js jsonSchemaDef
	var jskeys map[string]json.RawMessage
	if json.Unmarshal(f.JSONSchema, &jskeys) != nil || json.Unmarshal(f.JSONSchema, &js) != nil || jskeys == nil {
		bad.Add("response_format.json_schema", "is required: an object with name and schema")
		return nil
	}
	for _, k := range sortedKeys(jskeys) {
		if k != "name" && k != "description" && k != "schema" && k != "strict" {
			bad.Add("response_format.json_schema."+k, "unknown field")
		}
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

// format checks a json_schema format whose members are under field: a name of OpenAI's rule and a
// schema object. A description, which OutputFormat has no field for, is carried as the schema's own
// description when it has none, so the models read it.
func (js jsonSchemaDef) format(field string, bad *validation.Errors) *messages.OutputFormat {
	out := &messages.OutputFormat{Type: "json_schema", Name: js.Name}
	if !functionName.MatchString(js.Name) {
		bad.Add(field+".name", "must be 1 to 64 letters, digits, '_' or '-'")
	}
	if js.Strict != nil {
		out.Strict = *js.Strict
	}
	if len(js.Schema) == 0 || string(js.Schema) == "null" {
		bad.Add(field+".schema", "is required: the JSON schema of the answer")
		return nil
	}
	schema, msg := schemaText(js.Schema)
	if msg != "" {
		bad.Add(field+".schema", msg)
		return nil
	}
	if js.Description != nil && *js.Description != "" {
		schema = describe(schema, *js.Description)
	}
	out.Schema = schema
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
func flag(fields map[string]json.RawMessage, name string, bad *validation.Errors) bool {
	raw, ok := given(fields, name)
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
// fails: catalog models, each once, other than the model itself. A panel (conclave/...) has no
// fallbacks: its blueprint's selection already stands in for a failed model.
func (s *Server) readFallbacks(raw json.RawMessage, chat *chatRequest, bad, unknown *validation.Errors) []string {
	var ids []string
	if json.Unmarshal(raw, &ids) != nil {
		bad.Add("fallbacks", "must be a list of model ids")
		return nil
	}
	if len(ids) == 0 || len(ids) > maxFallbacks {
		bad.Add("fallbacks", fmt.Sprintf("must list between 1 and %d models", maxFallbacks))
		return nil
	}
	if chat.model == autoModel || chat.route.Category != "" {
		bad.Add("fallbacks", "only a direct call (model names a catalog model) takes fallbacks")
		return nil
	}
	seen := map[string]bool{chat.model: true}
	for i, id := range ids {
		field := fmt.Sprintf("fallbacks[%d]", i)
		switch {
		case id == "":
			bad.Add(field, "must not be empty")
		case seen[id]:
			bad.Add(field, fmt.Sprintf("model %q is the model or an earlier fallback", validation.Clip(id, 128)))
		default:
			if m, known := s.engine.Catalog().Get(id); !known {
				unknown.Add(field, fmt.Sprintf("unknown model %q (GET /v1/models lists them)", validation.Clip(id, 128)))
			} else if m.Has(catalog.Embeddings) {
				bad.Add(field, fmt.Sprintf("%q is an embeddings model, which answers no chat", validation.Clip(id, 128)))
			}
		}
		seen[id] = true
	}
	return ids
}
