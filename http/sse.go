package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/conclave-ai/conclave/messages"
)

// DefaultStreamKeepAlive is how often a stream that has nothing to say yet sends an SSE comment, so
// proxies and clients do not give up on a long consensus.
const DefaultStreamKeepAlive = 10 * time.Second

// sseStream writes one response as server-sent events. Nothing is written until the first event or
// keep-alive: a request that fails before then still answers with its own status and an error body.
// Once the stream has begun its status is 200, so a failure ends it with an error event, never with
// a clean end of stream.
type sseStream struct {
	w     http.ResponseWriter
	flush func()
	mu    sync.Mutex
	begun bool
	stop  chan struct{}
	done  chan struct{}
}

// newStream returns a stream over w, without keep-alives.
func newStream(w http.ResponseWriter) *sseStream {
	st := &sseStream{w: w, flush: func() {}}
	if f, ok := w.(http.Flusher); ok {
		st.flush = f.Flush
	}
	return st
}

// startStream returns a stream over w whose keep-alives start after the server's interval: SSE
// comments (sseKeepAlive), or events of the door's form (Anthropic's clients expect ping events).
func (s *Server) startStream(w http.ResponseWriter, keepAlive string) *sseStream {
	st := newStream(w)
	st.stop, st.done = make(chan struct{}), make(chan struct{})
	every := s.opts.StreamKeepAlive
	if every <= 0 {
		every = DefaultStreamKeepAlive
	}
	go func() {
		defer close(st.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-st.stop:
				return
			case <-t.C:
				st.write(keepAlive)
			}
		}
	}()
	return st
}

// sseKeepAlive is the comment a stream sends while it has nothing to say.
const sseKeepAlive = ": keep-alive\n\n"

// quiet stops the keep-alives; the caller writes the rest alone. A nil stream is a no-op.
func (st *sseStream) quiet() {
	if st == nil {
		return
	}
	select {
	case <-st.stop:
	default:
		close(st.stop)
	}
	<-st.done
}

// started reports whether anything was written, and so the status sent.
func (st *sseStream) started() bool {
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.begun
}

func (st *sseStream) write(s string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.begun {
		h := st.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		st.w.WriteHeader(http.StatusOK)
		st.begun = true
	}
	_, _ = st.w.Write([]byte(s))
	st.flush()
}

// event writes one data event holding v as JSON.
func (st *sseStream) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"message":"internal error","type":"server_error"}}`)
	}
	st.write("data: " + string(b) + "\n\n")
}

// named writes one event of a name holding v as JSON.
func (st *sseStream) named(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		name, b = "error", []byte(`{"status":500,"error":{"code":"internal","message":"could not encode the answer"}}`)
	}
	st.send(name, b)
}

// send writes one event of a name holding data.
func (st *sseStream) send(name string, data []byte) {
	st.write("event: " + name + "\ndata: " + string(data) + "\n\n")
}

// fail ends a begun stream with an OpenAI error event and no [DONE]: clients see an error, not an
// empty answer.
func (st *sseStream) fail(e *messages.Execution) {
	st.event(openAIErrorOf(int(e.StatusCode), e.Error.GetCode(), e.Error.GetMessage(), e.Error.GetDetails()))
}

// chunk is OpenAI's chat.completion.chunk.
type chunk struct {
	ID       string             `json:"id"`
	Object   string             `json:"object"`
	Created  int64              `json:"created"`
	Model    string             `json:"model"`
	Choices  []chunkChoice      `json:"choices"`
	Usage    *completionUsage   `json:"usage,omitempty"`
	Conclave *conclaveExtension `json:"conclave,omitempty"`
}

type chunkChoice struct {
	Index        int         `json:"index"`
	Delta        chunkDelta  `json:"delta"`
	Logprobs     *noLogprobs `json:"logprobs"`
	FinishReason *string     `json:"finish_reason"`
}

type chunkDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []chunkToolCall `json:"tool_calls,omitempty"`
}

// chunkToolCall is a piece of a tool call in a chunk: OpenAI's streams number the calls, so a client
// can put the pieces of one together. The first piece of a call has its id, type and name; each adds to
// its arguments.
type chunkToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function chunkFunction `json:"function"`
}

type chunkFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// chunkBytes is about how much of the answer one chunk carries.
const chunkBytes = 64

// completion streams a finished completion as OpenAI does: a first chunk with the role, the answer in
// pieces, each tool call whole in a chunk of its own, a last chunk with the finish reason (and Conclave's extension), the usage when asked for,
// then [DONE].
func (st *sseStream) completion(c completion, includeUsage bool) {
	base := chunk{ID: c.ID, Object: "chat.completion.chunk", Created: c.Created, Model: c.Model}
	first := base
	empty := ""
	first.Choices = []chunkChoice{{Delta: chunkDelta{Role: "assistant", Content: &empty}}}
	st.event(first)
	msg := c.Choices[0].Message
	if msg.Content != nil {
		for _, piece := range pieces(*msg.Content, chunkBytes) {
			ch := base
			ch.Choices = []chunkChoice{{Delta: chunkDelta{Content: &piece}}}
			st.event(ch)
		}
	}
	for i, call := range msg.ToolCalls {
		ch := base
		ch.Choices = []chunkChoice{{Delta: chunkDelta{ToolCalls: []chunkToolCall{{Index: i, ID: call.ID, Type: call.Type,
			Function: chunkFunction{Name: call.Function.Name, Arguments: call.Function.Arguments}}}}}}
		st.event(ch)
	}
	st.finish(base, c, includeUsage)
}

// finish ends a completion's stream: a last chunk with the finish reason (and Conclave's extension),
// the usage when asked for, then [DONE].
func (st *sseStream) finish(base chunk, c completion, includeUsage bool) {
	last := base
	reason := c.Choices[0].FinishReason
	last.Choices = []chunkChoice{{FinishReason: &reason}}
	last.Conclave = &c.Conclave
	st.event(last)
	if includeUsage {
		u := base
		u.Choices = []chunkChoice{}
		u.Usage = &c.Usage
		st.event(u)
	}
	st.write("data: [DONE]\n\n")
}

// relay writes a completion's chunks as its model writes them: the first with the role, then each
// piece of text and of tool calls as it comes. Its methods run on the engine's listener, one at a time.
type relay struct {
	st      *sseStream
	base    chunk
	started bool
	text    strings.Builder // what was relayed of the answer's text
}

func (r *relay) delta(d *messages.Delta) {
	if !r.started {
		r.started = true
		first, empty := r.base, ""
		first.Choices = []chunkChoice{{Delta: chunkDelta{Role: "assistant", Content: &empty}}}
		r.st.event(first)
	}
	ch := r.base
	var delta chunkDelta
	if d.Text != "" {
		text := d.Text
		delta.Content = &text
		r.text.WriteString(text)
	}
	for _, c := range d.ToolCalls {
		piece := chunkToolCall{Index: int(c.Index), ID: c.Id, Function: chunkFunction{Name: c.Name, Arguments: c.Arguments}}
		if c.Id != "" || c.Name != "" {
			piece.Type = "function"
		}
		delta.ToolCalls = append(delta.ToolCalls, piece)
	}
	if delta.Content == nil && len(delta.ToolCalls) == 0 {
		return
	}
	ch.Choices = []chunkChoice{{Delta: delta}}
	r.st.event(ch)
}

// finish ends a relayed completion. The answer is what was relayed, or continues it (a synthesis the
// consensus completed); an answer that replaced what was relayed (the arbiter's verdict was not usable)
// ends the stream with an error: the caller has read text that is not the answer, and the record holds
// the answer.
func (r *relay) finish(c completion, includeUsage bool) {
	msg := c.Choices[0].Message
	if msg.Content != nil {
		add := func(piece string) {
			ch := r.base
			ch.Choices = []chunkChoice{{Delta: chunkDelta{Content: &piece}}}
			r.st.event(ch)
		}
		if !continueAnswer(*msg.Content, r.text.String(), add, func() { r.st.fail(superseded(c.ID)) }) {
			return
		}
	}
	r.st.finish(r.base, c, includeUsage)
}

// continueAnswer says what a stream has not yet said of an answer that continues the text streamed so
// far (a synthesis the consensus completed): the rest, in pieces, each through add. An answer that does
// not continue it (it replaced the arbiter's verdict, which was not usable) calls fail instead, and
// continueAnswer reports false: the caller has read text that is not the answer.
func continueAnswer(answer, streamed string, add func(piece string), fail func()) bool {
	rest, continues := strings.CutPrefix(answer, streamed)
	if !continues {
		fail()
		return false
	}
	for _, piece := range pieces(rest, chunkBytes) {
		add(piece)
	}
	return true
}

// superseded is the failure of a stream whose text the consensus replaced (the arbiter's verdict could
// not be used): the caller has read text that is not the answer, and only an error can say so.
func superseded(requestID string) *messages.Execution {
	return &messages.Execution{StatusCode: http.StatusBadGateway, Error: &messages.Failure{Code: "stream_superseded",
		Message: "the text streamed so far is not the answer: the consensus replaced the arbiter's synthesis; GET /executions/" + requestID + " holds the answer"}}
}

// pieces cuts text into pieces of about n bytes, after a space where one is near, never inside a
// UTF-8 sequence; joined they are the text.
func pieces(text string, n int) []string {
	var out []string
	for len(text) > n {
		cut := n
		for cut < len(text) && !utf8.RuneStart(text[cut]) {
			cut++
		}
		for i := cut; i > n/2; i-- {
			if text[i-1] == ' ' {
				cut = i
				break
			}
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
	if text != "" {
		out = append(out, text)
	}
	return out
}
