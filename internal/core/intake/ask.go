package intake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/consensus"
	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
)

// Bounds of an ask.
const (
	MaxStops        = 4        // stop sequences: OpenAI's bound, which a panel's every member must take
	MaxStopBytes    = 1024     // one stop sequence
	MaxOutputTokens = 1 << 24  // max_tokens: far above any model's, within int32
	MaxLogitBias    = 1024     // tokens biased
	MaxUserBytes    = 256      // the end user's id
	MaxTools        = 128      // OpenAI's bound
	MaxNameBytes    = 256      // a participant's name, a tool call's id
	MaxParts        = 64       // content parts of one turn
	MaxTurnCalls    = 1024     // tool calls of one assistant turn
	MaxTurns        = 1 << 15  // turns of a conversation
	MaxImageURL     = 8 << 10  // an https image URL
	MaxImageBytes   = 20 << 20 // a decoded data URI image
)

// FunctionName is OpenAI's rule for function and schema names, which a panel's every member must take.
var FunctionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ImageTypes are the image types a data URI may hold: those the providers take.
var ImageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// OutputFormats are the output formats a request may ask for; a request without one asks for text.
var OutputFormats = map[string]bool{"text": true, "json_object": true, "json_schema": true}

// sampling checks the sampling parameters, under the names /route-thompson gives them.
func (c *checker) sampling(s *messages.Sampling) {
	if s == nil {
		return
	}
	for _, f := range []struct {
		name   string
		v      *float64
		lo, hi float64
	}{{"temperature", s.Temperature, 0, 2}, {"top_p", s.TopP, 0, 1}, {"presence_penalty", s.PresencePenalty, -2, 2},
		{"frequency_penalty", s.FrequencyPenalty, -2, 2}} {
		if f.v != nil && !(*f.v >= f.lo && *f.v <= f.hi) { // NaN too, which a protobuf double can carry
			c.bad.Add(params+f.name, fmt.Sprintf("must be between %g and %g", f.lo, f.hi))
		}
	}
	if n := s.MaxTokens; n != nil && (*n < 1 || *n > MaxOutputTokens) {
		c.bad.Add(params+"max_tokens", fmt.Sprintf("must be between %d and %d", 1, MaxOutputTokens))
	}
	c.stops(s.Stop)
	c.logitBias(s.LogitBias)
	if problem := User(s.User); problem != "" {
		c.bad.Add(params+"user", problem)
	}
}

// params prefixes the names of the sampling parameters, as /route-thompson nests them.
const params = "parameters."

// stops checks the stop sequences: at most MaxStops, none empty or longer than MaxStopBytes (the first
// such is named).
func (c *checker) stops(stops []string) {
	if len(stops) > MaxStops {
		c.bad.Add(params+"stop", fmt.Sprintf("must hold between 1 and %d sequences", MaxStops))
		return
	}
	for i, stop := range stops {
		if stop == "" || len(stop) > MaxStopBytes {
			c.bad.Add(fmt.Sprintf("%sstop[%d]", params, i), fmt.Sprintf("must be between 1 and %d bytes", MaxStopBytes))
			return
		}
	}
}

// logitBias checks the biased tokens: at most MaxLogitBias, each a token id biased by -100 to 100.
func (c *checker) logitBias(bias map[string]int32) {
	if len(bias) > MaxLogitBias {
		c.bad.Add(params+"logit_bias", fmt.Sprintf("must bias at most %d tokens", MaxLogitBias))
		return
	}
	keys := make([]string, 0, len(bias))
	for k := range bias {
		keys = append(keys, k)
	}
	sort.Strings(keys) // problems in a stable order
	for _, k := range keys {
		if n, err := strconv.ParseUint(k, 10, 32); err != nil || strconv.FormatUint(n, 10) != k {
			c.bad.Add(params+"logit_bias."+problems.Clip(k, 32), "must be a token id (a non-negative integer)")
		} else if v := bias[k]; v < -100 || v > 100 {
			c.bad.Add(params+"logit_bias."+k, "must be an integer between -100 and 100")
		}
	}
}

// User says what is wrong with the end user's id a request names, or returns "".
func User(id string) string {
	if len(id) > MaxUserBytes {
		return fmt.Sprintf("must be at most %d bytes", MaxUserBytes)
	}
	return ""
}

// tools checks the functions the models may call: a name of OpenAI's rule, unique among the tools,
// and parameters that are a JSON schema object that compiles.
func (c *checker) tools(tools []*messages.Tool) {
	if len(tools) > MaxTools {
		c.bad.Add("tools", fmt.Sprintf("must hold between 1 and %d tools", MaxTools))
		return
	}
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		tf := fmt.Sprintf("tools[%d].function", i)
		if t == nil {
			c.bad.Add(fmt.Sprintf("tools[%d]", i), "must be a tool")
			continue
		}
		switch {
		case !FunctionName.MatchString(t.Name):
			c.bad.Add(tf+".name", "must be 1 to 64 letters, digits, '_' or '-'")
		case seen[t.Name]:
			c.bad.Add(tf+".name", fmt.Sprintf("%q names an earlier tool too", t.Name))
		}
		seen[t.Name] = true
		switch {
		case t.Parameters == "":
		case !jsonObject(t.Parameters):
			c.bad.Add(tf+".parameters", "must be a JSON schema (an object)")
		default:
			c.schema(tf+".parameters", t.Parameters)
		}
	}
}

// toolChoice checks whether a model may, must or must not call tools: a function it must call is one
// of tools, and a call required needs tools.
func (c *checker) toolChoice(choice *messages.ToolChoice, tools []*messages.Tool) {
	if choice == nil {
		return
	}
	switch choice.Mode {
	case "none", "auto":
	case "required":
		if len(tools) == 0 {
			c.bad.Add("tool_choice", "asks for a tool call, which needs tools")
		}
	case "function":
		for _, t := range tools {
			if t.GetName() == choice.Name {
				return
			}
		}
		c.bad.Add("tool_choice.function.name", fmt.Sprintf("%q is none of the tools", problems.Clip(choice.Name, 64)))
	default:
		c.bad.Add("tool_choice", fmt.Sprintf("unknown tool choice %q (want none, auto, required, or a function of the tools)", problems.Clip(choice.Mode, 32)))
	}
}

// format checks the answer's form: text, json_object, or json_schema with a name of OpenAI's rule and
// a schema object that compiles.
func (c *checker) format(f *messages.OutputFormat) {
	if f == nil {
		return
	}
	if !OutputFormats[f.Type] {
		c.bad.Add("response_format.type", fmt.Sprintf("unknown type %q (want text, json_object or json_schema)", problems.Clip(f.Type, 32)))
		return
	}
	if f.Type != "json_schema" {
		return
	}
	const field = "response_format.json_schema"
	if !FunctionName.MatchString(f.Name) {
		c.bad.Add(field+".name", "must be 1 to 64 letters, digits, '_' or '-'")
	}
	switch {
	case f.Schema == "":
		c.bad.Add(field+".schema", "is required: the JSON schema of the answer")
	case !jsonObject(f.Schema):
		c.bad.Add(field+".schema", "must be a JSON schema (an object)")
	default:
		c.schema(field+".schema", f.Schema)
	}
}

// MaxSchemaProblemBytes bounds what a problem says of why a schema cannot be compiled.
const MaxSchemaProblemBytes = 220

// schema compiles a schema object of the request (the output format's, a tool's parameters) as the
// answers' check will, before any model is asked: one that cannot be compiled (a $ref to nothing, to
// a URL, or back to itself) is refused now rather than after the panel was paid for. The request's
// schemas share one bound of size (consensus.MaxSchemaNodes), so that compiling them all takes a
// bounded time.
func (c *checker) schema(field, text string) {
	nodes, err := consensus.CheckSchema(text, consensus.MaxSchemaNodes-c.schemaNodes)
	c.schemaNodes += nodes
	if err != nil {
		c.bad.Add(field, problems.Clip(err.Error(), MaxSchemaProblemBytes))
	}
}

// jsonObject reports whether a text is one JSON object.
func jsonObject(text string) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal([]byte(text), &obj) == nil && obj != nil
}

// roles are the roles of a turn.
var roles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

// conversation checks the turns of an ask: known roles, images in user turns only and each one an
// https URL or a data URI of an image, tool calls in assistant turns only (each with an id used once, a
// function's name and arguments that are a JSON object), a tool turn answering a call of an earlier
// turn, content in every turn but an assistant's that calls tools, and a user turn at least.
func (c *checker) conversation(turns []*messages.ChatMessage) {
	if len(turns) == 0 {
		return
	}
	if len(turns) > MaxTurns {
		c.bad.Add("messages", fmt.Sprintf("must hold at most %d turns", MaxTurns))
		return
	}
	callIDs := map[string]bool{}
	users := 0
	for t, m := range turns {
		if c.turn(m, fmt.Sprintf("messages[%d]", t), callIDs) {
			users++
		}
	}
	if users == 0 {
		c.bad.Add("messages", "must hold at least one user message")
	}
}

// turn checks one turn, field, noting its calls' ids in callIDs; it reports whether it is a user's.
func (c *checker) turn(m *messages.ChatMessage, field string, callIDs map[string]bool) bool {
	if m == nil {
		c.bad.Add(field, "must be a turn")
		return false
	}
	if !roles[m.Role] {
		c.bad.Add(field+".role", fmt.Sprintf("unknown role %q (want system, user, assistant or tool)", problems.Clip(m.Role, 32)))
		return false
	}
	if len(m.Name) > MaxNameBytes {
		c.bad.Add(field+".name", fmt.Sprintf("must be between 1 and %d bytes", MaxNameBytes))
	}
	if m.ToolCallId != "" && m.Role != "tool" {
		c.bad.Add(field+".tool_call_id", "only a tool message has tool_call_id")
	}
	c.content(m, field)
	c.toolCalls(m, field, callIDs)
	c.required(m, field, callIDs)
	return m.Role == "user"
}

// required checks what a turn of its role must have: content, unless it is an assistant's that calls
// tools, and a tool turn the id of a call of an earlier turn (callIDs), which it answers.
func (c *checker) required(m *messages.ChatMessage, field string, callIDs map[string]bool) {
	switch m.Role {
	case "assistant":
		if len(m.Content) == 0 && len(m.ToolCalls) == 0 {
			c.bad.Add(field+".content", "is required unless the message has tool_calls")
		}
	case "tool":
		switch {
		case m.ToolCallId == "":
			c.bad.Add(field+".tool_call_id", "is required: the id of the tool call this result answers")
		case !callIDs[m.ToolCallId]:
			c.bad.Add(field+".tool_call_id", fmt.Sprintf("%q answers no tool call of an earlier turn", problems.Clip(m.ToolCallId, 64)))
		}
		fallthrough
	default:
		if len(m.Content) == 0 {
			c.bad.Add(field+".content", "is required")
		}
	}
}

// content checks a turn's parts: text, or images in a user's turn.
func (c *checker) content(m *messages.ChatMessage, field string) {
	if len(m.Content) > MaxParts {
		c.bad.Add(field+".content", fmt.Sprintf("must hold between 1 and %d parts", MaxParts))
		return
	}
	for p, part := range m.Content {
		pf := fmt.Sprintf("%s.content[%d]", field, p)
		switch {
		case part == nil:
			c.bad.Add(pf, "must be a content part")
		case part.Type == messages.PartText:
		case part.Type == messages.PartImage && m.Role != "user":
			c.bad.Add(pf+".type", "images go in user messages only")
		case part.Type == messages.PartImage:
			switch part.Detail {
			case "", "auto", "low", "high", "original":
			default:
				c.bad.Add(pf+".image_url.detail", "must be auto, low, high or original")
			}
			if msg := ImageURL(part.ImageUrl); msg != "" {
				c.bad.Add(pf+".image_url.url", msg)
			}
		default:
			c.bad.Add(pf+".type", fmt.Sprintf("unknown content part type %q (want text or image_url)", problems.Clip(part.Type, 32)))
		}
	}
}

// toolCalls checks an assistant's calls of tools, noting their ids in callIDs.
func (c *checker) toolCalls(m *messages.ChatMessage, field string, callIDs map[string]bool) {
	switch {
	case len(m.ToolCalls) == 0:
		return
	case m.Role != "assistant":
		c.bad.Add(field+".tool_calls", "only an assistant message has tool_calls")
		return
	case len(m.ToolCalls) > MaxTurnCalls:
		c.bad.Add(field+".tool_calls", fmt.Sprintf("must hold between 1 and %d tool calls", MaxTurnCalls))
		return
	}
	for i, call := range m.ToolCalls {
		cf := fmt.Sprintf("%s.tool_calls[%d]", field, i)
		if call == nil {
			c.bad.Add(cf, "must be a tool call")
			continue
		}
		switch {
		case call.Id == "" || len(call.Id) > MaxNameBytes:
			c.bad.Add(cf+".id", fmt.Sprintf("must be between 1 and %d bytes", MaxNameBytes))
		case callIDs[call.Id]:
			c.bad.Add(cf+".id", fmt.Sprintf("%q names an earlier tool call too", problems.Clip(call.Id, 64)))
		}
		callIDs[call.Id] = true
		if !FunctionName.MatchString(call.Name) {
			c.bad.Add(cf+".function.name", "must be 1 to 64 letters, digits, '_' or '-'")
		}
		if !jsonObject(call.Arguments) {
			c.bad.Add(cf+".function.arguments", "must be a JSON object, as text")
		}
	}
}

// ImageURL says what is wrong with an image, or returns "": an https URL, which Conclave passes on and
// never fetches, or a data URI of a PNG, JPEG, GIF or WebP image whose bytes are what it says.
func ImageURL(s string) string {
	switch {
	case s == "":
		return "is required: an https URL or a data URI"
	case strings.HasPrefix(s, "data:"):
		return dataURI(s)
	}
	if len(s) > MaxImageURL {
		return fmt.Sprintf("must be at most %d bytes (or a data URI)", MaxImageURL)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "":
		return "must be an https URL or a data URI"
	case u.Scheme != "https":
		return fmt.Sprintf("must be an https URL or a data URI, not %s", problems.Clip(u.Scheme, 16))
	case u.User != nil:
		return "must not carry credentials"
	}
	return ""
}

// dataURI says what is wrong with an image's data URI, or returns "": base64 of at most MaxImageBytes,
// whose bytes are an image of the type it declares.
func dataURI(s string) string {
	header, data, ok := strings.Cut(strings.TrimPrefix(s, "data:"), ",")
	mediaType, encoding, _ := strings.Cut(header, ";")
	mediaType = strings.ToLower(mediaType)
	switch {
	case !ok || encoding != "base64":
		return "a data URI must be data:<image type>;base64,<data>"
	case !ImageTypes[mediaType]:
		return fmt.Sprintf("a data URI must hold image/png, image/jpeg, image/gif or image/webp, not %q", problems.Clip(mediaType, 32))
	case base64.StdEncoding.DecodedLen(len(data)) > MaxImageBytes+2:
		return fmt.Sprintf("the image must be at most %d bytes", MaxImageBytes)
	}
	decoded, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return "the data URI's data is not base64"
	}
	if len(decoded) > MaxImageBytes {
		return fmt.Sprintf("the image must be at most %d bytes", MaxImageBytes)
	}
	// The bytes are sniffed, never fetched or decoded as an image: the standard library's sniffer is a
	// pure function of them.
	if sniffed := http.DetectContentType(decoded); sniffed != mediaType {
		return fmt.Sprintf("the data is not a %s image (it looks like %s)", mediaType, sniffed)
	}
	return ""
}
