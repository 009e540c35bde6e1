// Package providertest runs providers on loopback for tests: HTTP servers that speak one wire format
// each (OpenAI chat completions and embeddings, Anthropic Messages, Gemini generateContent and
// embeddings), with their error bodies, rate-limit headers, slow answers, keep-alive lines and answers
// cut short, and a record of every request they were sent. They read a call as the provider would: its
// turns with text and image parts, tool calls and their results (a result must answer a call of the
// turn before, as each API requires), and answer with text or with tool calls, whole or streamed in the
// format's events at a pace the test sets, or with a vector for each input of an embeddings call.
package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Wire formats.
const (
	OpenAI    = "openai"
	Anthropic = "anthropic"
	Gemini    = "gemini"
)

// Request is what a server was sent.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// Response is what a server answers. A response without a Body and with status 200 (or none) is
// composed from the call in the server's format: the Answerer's text, or Text, or the ToolCalls; a
// stream when the call asks for one.
type Response struct {
	Status int
	Header map[string]string
	Body   string
	// Delay waits before answering; KeepAlive writes that many blank lines first (DeepSeek's habit).
	Delay     time.Duration
	KeepAlive int
	// Cut writes half of the body and closes the connection; a composed stream is cut after its pieces,
	// before its end.
	Cut bool
	// Text replaces the Answerer's text in a composed answer.
	Text string
	// ToolCalls make a composed answer call these tools (after Text, when there is one).
	ToolCalls []ToolCall
	// InputTokens and OutputTokens are a composed answer's usage (zero: 12 and 7). CacheRead and
	// CacheWrite are the input tokens among InputTokens read from and written to the prompt cache, in
	// the format's own fields (OpenAI's and Gemini's formats report no cache writes).
	InputTokens, OutputTokens int
	CacheRead, CacheWrite     int
	// Pace, when set, holds a composed stream: its first event goes at once, each later one waits for a
	// value from Pace (or its close). A test can so see the first piece arrive before the server ends;
	// the events before the first piece (OpenAI's role; Anthropic's message_start, content_block_start
	// and ping) need a value each, which the test can put in a buffered Pace ahead.
	Pace <-chan struct{}
	// StreamError ends a composed stream, after its text, with the format's error event.
	StreamError *StreamError
}

// ToolCall is a call of a tool in a composed answer. Without an ID the server makes one (Gemini's calls
// have none). Arguments is a JSON object.
type ToolCall struct {
	ID, Name, Arguments string
	// Signature is the thought signature a Gemini answer sends with the call.
	Signature string
}

// StreamError is an error event in a stream: Code is OpenAI's code and Gemini's, Type OpenAI's type,
// Anthropic's error type and Gemini's status.
type StreamError struct {
	Code          int
	Type, Message string
}

// composed reports whether the server makes the answer from the call.
func (r Response) composed() bool {
	return r.Body == "" && (r.Status == 0 || r.Status == http.StatusOK)
}

// Answerer makes a successful answer from the request: the model and the user's text.
type Answerer func(model, prompt string) string

// Server is a provider on loopback.
type Server struct {
	*httptest.Server
	Format   string
	mu       sync.Mutex
	requests []Request
	queue    []Response
	faults   []Response
	nfault   int
	answer   Answerer
	// The model list, apart from the calls: listings, their failures to come, and the requests for them.
	models   []Model
	listFail []Response
	listings []Request
	finished atomic.Int64
}

// Finished returns how many calls the server has finished answering (their whole answer written).
func (s *Server) Finished() int { return int(s.finished.Load()) }

// Model is one model a server lists; Context and MaxOutput may be zero (not listed).
type Model struct {
	ID                 string
	Context, MaxOutput int
	// PricePrompt and PriceCompletion are OpenRouter's per-token prices (empty: not listed); Output
	// lists output modalities (empty: not listed).
	PricePrompt, PriceCompletion string
	Output                       []string
	// Methods are Gemini's supported generation methods (empty: generateContent).
	Methods []string
}

// SetModels sets the server's model list.
func (s *Server) SetModels(ms ...Model) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]Model(nil), ms...)
}

// FailListing makes the next readings of the model list get these responses.
func (s *Server) FailListing(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listFail = append(s.listFail, rs...)
}

// ClearListingFailures drops the listing failures still to come: the model list answers again.
func (s *Server) ClearListingFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listFail = nil
}

// Listings returns every request for the model list.
func (s *Server) Listings() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.listings...)
}

// New starts a server for a wire format; answer makes its answers (nil: "The answer is (B).").
func New(format string, answer Answerer) *Server {
	s := NewUnstarted(format, answer)
	s.Start()
	return s
}

// NewUnstarted is New without the start: set the server up, then Start it, or StartAt an address.
func NewUnstarted(format string, answer Answerer) *Server {
	if answer == nil {
		answer = func(string, string) string { return "The answer is (B)." }
	}
	s := &Server{Format: format, answer: answer}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	return s
}

// StartAt starts an unstarted server on addr ("127.0.0.1:port"): an upstream that comes up where it
// is expected, after connections to it were refused.
func (s *Server) StartAt(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.Listener.Close()
	s.Listener = l
	s.Start()
	return nil
}

// RefusingAddr returns a loopback address where nothing listens: connections to it are refused
// (until something listens there).
func RefusingAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// Queue makes the next requests get these responses, in order; then answers come again.
func (s *Server) Queue(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, rs...)
}

// Fail makes every call get rs in turn, once the queue is empty, until Fail with none: a provider that
// stays down.
func (s *Server) Fail(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.nfault = append([]Response(nil), rs...), 0
}

// Requests returns every call the server was sent (readings of the model list apart).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Last returns the last request, or a zero one.
func (s *Server) Last() Request {
	rs := s.Requests()
	if len(rs) == 0 {
		return Request{}
	}
	return rs[len(rs)-1]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	var resp Response
	call := r.Method != http.MethodGet
	if !call {
		s.listings = append(s.listings, req)
		if len(s.listFail) > 0 {
			resp, s.listFail = s.listFail[0], s.listFail[1:]
		} else {
			resp = s.listing(r)
		}
	} else {
		s.requests = append(s.requests, req)
		if len(s.queue) > 0 {
			resp, s.queue = s.queue[0], s.queue[1:]
		} else if len(s.faults) > 0 {
			resp = s.faults[s.nfault%len(s.faults)]
			s.nfault++
		}
	}
	s.mu.Unlock()
	defer s.finished.Add(1)
	if resp.Delay > 0 {
		select {
		case <-time.After(resp.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if call && resp.composed() && isEmbeddings(r.URL.Path) {
		resp = s.embeddings(r, body)
	} else if call && resp.composed() {
		a, err := s.read(r, body)
		if err != nil {
			resp = s.refusal(err)
		} else if a.stream {
			s.stream(w, r, a, resp)
			return
		} else {
			resp = s.whole(a, resp)
		}
	}
	write(w, resp)
}

// write writes a response whole, or half of it when it is to be cut.
func write(w http.ResponseWriter, resp Response) {
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	if resp.Status == 0 {
		resp.Status = http.StatusOK
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	if resp.Cut { // promise the whole body, send half: the client sees it cut short
		w.Header().Set("Content-Length", fmt.Sprint(len(resp.Body)))
	}
	w.WriteHeader(resp.Status)
	for i := 0; i < resp.KeepAlive; i++ {
		io.WriteString(w, "\n")
		w.(http.Flusher).Flush()
	}
	if resp.Cut {
		io.WriteString(w, resp.Body[:len(resp.Body)/2])
		w.(http.Flusher).Flush()
		hangUp(w)
		return
	}
	io.WriteString(w, resp.Body)
}

// hangUp closes the connection under a response.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// listing answers a reading of the model list in the server's format, all on one page except for
// Anthropic's and Gemini's, which page two models at a time. Called with mu held.
func (s *Server) listing(r *http.Request) Response {
	switch s.Format {
	case Anthropic:
		return s.anthropicListing(r.URL.Query().Get("after_id"))
	case Gemini:
		return s.geminiListing(r.URL.Query().Get("pageToken"))
	}
	return s.openAIListing()
}

// listingPage is how many models a page of a paged listing holds.
const listingPage = 2

// anthropicListing is the page of Anthropic's model list after the model named after ("" for the first).
func (s *Server) anthropicListing(after string) Response {
	start := 0
	if after != "" {
		for i, m := range s.models {
			if m.ID == after {
				start = i + 1
			}
		}
	}
	end := min(start+listingPage, len(s.models))
	var data []string
	for _, m := range s.models[start:end] {
		data = append(data, fmt.Sprintf(`{"type":"model","id":%s,"display_name":%s,"created_at":"2025-10-01T00:00:00Z","max_input_tokens":%s,"max_tokens":%s,"capabilities":null}`,
			quote(m.ID), quote(m.ID), orNull(m.Context), orNull(m.MaxOutput)))
	}
	first, last := "null", "null"
	if len(data) > 0 {
		first, last = quote(s.models[start].ID), quote(s.models[end-1].ID)
	}
	return Response{Body: fmt.Sprintf(`{"data":[%s],"has_more":%t,"first_id":%s,"last_id":%s}`, strings.Join(data, ","), end < len(s.models), first, last)}
}

// geminiListing is the page of Gemini's model list at a page token (the index of its first model).
func (s *Server) geminiListing(token string) Response {
	start := 0
	fmt.Sscan(token, &start)
	end := min(start+listingPage, len(s.models))
	var data []string
	for _, m := range s.models[start:end] {
		methods := m.Methods
		if len(methods) == 0 {
			methods = []string{"generateContent", "countTokens"}
		}
		raw, _ := json.Marshal(methods)
		data = append(data, fmt.Sprintf(`{"name":%s,"version":"001","displayName":%s,"inputTokenLimit":%d,"outputTokenLimit":%d,"supportedGenerationMethods":%s}`,
			quote("models/"+m.ID), quote(m.ID), m.Context, m.MaxOutput, raw))
	}
	next := ""
	if end < len(s.models) {
		next = fmt.Sprintf(`,"nextPageToken":"%d"`, end)
	}
	return Response{Body: fmt.Sprintf(`{"models":[%s]%s}`, strings.Join(data, ","), next)}
}

// openAIListing is the whole OpenAI-format model list, with OpenRouter's fields where a model has them.
func (s *Server) openAIListing() Response {
	var data []string
	for _, m := range s.models {
		extra := ""
		if m.Context > 0 {
			extra += fmt.Sprintf(`,"context_length":%d`, m.Context)
		}
		if m.PricePrompt != "" {
			extra += fmt.Sprintf(`,"pricing":{"prompt":%s,"completion":%s}`, quote(m.PricePrompt), quote(m.PriceCompletion))
		}
		if len(m.Output) > 0 {
			raw, _ := json.Marshal(m.Output)
			extra += fmt.Sprintf(`,"architecture":{"input_modalities":["text"],"output_modalities":%s}`, raw)
		}
		if m.MaxOutput > 0 {
			extra += fmt.Sprintf(`,"top_provider":{"max_completion_tokens":%d}`, m.MaxOutput)
		}
		data = append(data, fmt.Sprintf(`{"id":%s,"object":"model","created":1767225600,"owned_by":"system"%s}`, quote(m.ID), extra))
	}
	return Response{Body: fmt.Sprintf(`{"object":"list","data":[%s]}`, strings.Join(data, ","))}
}

// ListingAnswer is the page of the model list the server answers to a request.
func (s *Server) ListingAnswer(r Request) string {
	req, _ := http.NewRequest(http.MethodGet, "http://x"+r.Path+"?"+r.Query, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listing(req).Body
}

func orNull(n int) string {
	if n == 0 {
		return "null"
	}
	return fmt.Sprint(n)
}

func quote(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// ChatCompletion is an OpenAI chat completion.
func ChatCompletion(model, text string, in, out int) string {
	return chatCompletion(model, text, usage{in: in, out: out})
}

func chatCompletion(model, text string, u usage) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":null},"logprobs":null,"finish_reason":"stop"}],`+
		`"usage":%s}`, quote(model), quote(text), u.openAI())
}

// usage is a composed answer's usage: every input token, those read from and written to the cache
// among them, and the output.
type usage struct{ in, read, write, out int }

// openAI is the usage as a chat completion writes it: prompt_tokens counts the cached ones.
func (u usage) openAI() string {
	details := ""
	if u.read > 0 {
		details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0}`, u.read)
	}
	return fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%s}`, u.in, u.out, u.in+u.out, details)
}

// anthropic is the usage as a message writes it: input_tokens leaves the cached ones out.
func (u usage) anthropic() string {
	return fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"cache_creation":null,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,`+
		`"inference_geo":null,"server_tool_use":null,"service_tier":"standard"}`, u.in-u.read-u.write, u.out, u.write, u.read)
}

// gemini is the usage as generateContent writes it: promptTokenCount counts the cached ones.
func (u usage) gemini() string {
	cached := ""
	if u.read > 0 {
		cached = fmt.Sprintf(`,"cachedContentTokenCount":%d`, u.read)
	}
	return fmt.Sprintf(`{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d%s}`, u.in, u.out, u.in+u.out, cached)
}

// OpenAIError is an OpenAI error body; OpenRouter sends a number as its code.
func OpenAIError(message, typ string, code any) string {
	c, _ := json.Marshal(code)
	return fmt.Sprintf(`{"error":{"message":%s,"type":%s,"param":null,"code":%s}}`, quote(message), quote(typ), c)
}

// AnthropicMessage is a Messages answer.
func AnthropicMessage(model, text string, in, out int) string {
	return anthropicMessage(model, text, usage{in: in, out: out})
}

func anthropicMessage(model, text string, u usage) string {
	return fmt.Sprintf(`{"id":"msg_01","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s,"citations":null}],`+
		`"stop_reason":"end_turn","stop_sequence":null,"stop_details":null,"container":null,"usage":%s}`, quote(model), quote(text), u.anthropic())
}

// AnthropicError is a Messages error body.
func AnthropicError(typ, message string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%s,"message":%s},"request_id":"req_011"}`, quote(typ), quote(message))
}

// GeminiAnswer is a generateContent answer.
func GeminiAnswer(model, text string, in, out int) string {
	return fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":%s}],"role":"model"},"finishReason":"STOP","index":0}],`+
		`"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d},"modelVersion":%s,"responseId":"resp-1"}`,
		quote(text), in, out, in+out, quote(model))
}

// GeminiError is a Google API error body; details are raw JSON objects.
func GeminiError(code int, status, message string, details ...string) string {
	return fmt.Sprintf(`{"error":{"code":%d,"message":%s,"status":%s,"details":[%s]}}`, code, quote(message), quote(status), strings.Join(details, ","))
}
