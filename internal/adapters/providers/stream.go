package providers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/fnv1a"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// Delta is a piece of a streamed answer, as it arrived: some text, pieces of tool calls, or both.
type Delta struct {
	Text      string
	ToolCalls []ToolCallDelta
}

// ToolCallDelta is a piece of one tool call. The first piece of a call carries its ID and Name; each
// piece adds to its Arguments (JSON text, complete only once the stream ends). Index is the call's
// place among the reply's tool calls.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Streamer is a Backend that can stream: it reports each piece of the answer to onDelta as it arrives
// (in order, from the calling goroutine) and returns the whole reply, its usage from the provider's last
// event. Errors are classified as Complete classifies them, before the first piece and after it alike.
type Streamer interface {
	Stream(ctx context.Context, call Call, onDelta func(Delta)) (Reply, error)
}

// Stream streams a call through a backend, or, when the backend cannot stream, completes it and reports
// the whole answer as one piece.
func Stream(ctx context.Context, b Backend, call Call, onDelta func(Delta)) (Reply, error) {
	if s, ok := b.(Streamer); ok {
		return s.Stream(ctx, call, onDelta)
	}
	reply, err := b.Complete(ctx, call)
	if err == nil {
		emitWhole(reply, onDelta)
	}
	return reply, err
}

// streamed posts a streaming request and reads its answer: an event stream with read, and anything
// else (an error, or a provider that answered whole) with parse, reported as one piece when it is an
// answer.
func streamed(ctx context.Context, client *http.Client, url string, h http.Header, body []byte, provider, model string,
	parse func(status int, header http.Header, body []byte) (Reply, error),
	read func(status int, header http.Header, body io.Reader) (Reply, error), onDelta func(Delta)) (Reply, error) {
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	resp, err := send(ctx, client, http.MethodPost, url, h, bytes.NewReader(body), provider, model)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 || !isEventStream(resp.Header) {
		x, err := readAnswer(ctx, resp, provider, model)
		if err != nil {
			return Reply{}, err
		}
		reply, err := parse(x.status, x.header, x.body)
		if err == nil {
			emitWhole(reply, onDelta)
		}
		return reply, err
	}
	return read(resp.StatusCode, resp.Header, resp.Body)
}

// emitWhole reports a whole reply as one piece, when it says anything.
func emitWhole(r Reply, onDelta func(Delta)) {
	d := Delta{Text: r.Text}
	for i, c := range r.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, ToolCallDelta{Index: i, ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	relay(d, onDelta)
}

// relay passes a piece of a stream on, when it says anything.
func relay(d Delta, onDelta func(Delta)) {
	if d.Text != "" || len(d.ToolCalls) > 0 {
		onDelta(d)
	}
}

// streamFormat reads the events of one wire format's stream into a reply.
type streamFormat interface {
	// event reads one event with data; last says the stream has ended with it.
	event(ev sseEvent) (last bool, err error)
	// whole reports whether the stream is whole if it ends here: a format without a closing event ends
	// with the connection once it has said that the answer is finished.
	whole() bool
}

// readStream reads a stream's events into f until its last event, or until the stream ends where f
// says it may. Events without data are skipped; whatever cuts the stream short is classified by
// streamFailure.
func readStream(ctx context.Context, body io.Reader, f streamFormat, provider, model string, status int) error {
	events := newSSEReader(body)
	for {
		ev, err := events.next()
		if err == io.EOF && f.whole() {
			return nil
		}
		if err != nil {
			return streamFailure(ctx, err, provider, model, status)
		}
		if len(bytes.TrimSpace(ev.data)) == 0 {
			continue
		}
		if last, err := f.event(ev); last || err != nil {
			return err
		}
	}
}

// Bounds of a stream: one event (a line of it included), the whole stream (maxResponseBytes), and the
// tool calls of one answer.
const (
	maxEventBytes = 4 << 20
	maxToolCalls  = 256
)

var (
	errEventTooLarge  = fmt.Errorf("an event of the stream is larger than %d bytes", maxEventBytes)
	errStreamTooLarge = fmt.Errorf("the stream is larger than %d bytes", maxResponseBytes)
	errStreamCut      = errors.New("the stream was cut off")
)

// sseEvent is one server-sent event: its name (empty for the default "message") and its data lines
// joined by newlines. The data is the reader's, valid until its next event.
type sseEvent struct {
	name string
	data []byte
}

// sseReader reads server-sent events (the text/event-stream format every provider streams in), with
// each event and the whole stream bounded. Comments (": keep-alive", ": OPENROUTER PROCESSING") are
// skipped. It reads each line and each event's data into buffers of its own, reused from one event to
// the next.
type sseReader struct {
	r     *bufio.Reader
	total int
	line  []byte
	data  []byte
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 32<<10)} }

// next returns the next event, io.EOF after the last, or the error that cut the stream.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	s.data = s.data[:0]
	lines, seen := 0, false
	for {
		line, err := s.readLine()
		if err == io.EOF && seen {
			// The stream ended without the blank line after its last event: the event is whole all the same.
			return sseEvent{name: ev.name, data: s.data}, nil
		}
		if err != nil {
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if seen {
				return sseEvent{name: ev.name, data: s.data}, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.name, seen = string(value), true
		case "data":
			if lines > 0 {
				s.data = append(s.data, '\n')
			}
			lines++
			if len(s.data)+len(value) > maxEventBytes {
				return sseEvent{}, errEventTooLarge
			}
			s.data = append(s.data, value...)
			seen = true
		}
	}
}

// readLine reads one line without its end of line, bounded by maxEventBytes and the stream's bound.
// The line is the reader's, valid until its next line.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		s.total += len(chunk)
		if s.total > maxResponseBytes {
			return nil, errStreamTooLarge
		}
		if len(s.line)+len(chunk) > maxEventBytes {
			return nil, errEventTooLarge
		}
		s.line = append(s.line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(s.line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(s.line) > 0:
			return bytes.TrimRight(s.line, "\r\n"), nil
		default:
			return nil, err
		}
	}
}

// isEventStream reports whether an answer is a stream of server-sent events. A server may answer a
// request for a stream with one JSON body (an error, or a gateway that does not stream): it is read
// whole then.
func isEventStream(h http.Header) bool {
	t, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return t == "text/event-stream"
}

// streamFailure classifies what ended a stream before its end: the caller's deadline, or a provider
// that cut it off or sent more than the bounds allow.
func streamFailure(ctx context.Context, err error, provider, model string, status int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var re *resilience.Error
	if errors.As(err, &re) {
		return err
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errStreamCut
	} else if !errors.Is(err, errEventTooLarge) && !errors.Is(err, errStreamTooLarge) {
		err = fmt.Errorf("%w: %v", errStreamCut, err)
	}
	return &resilience.Error{Kind: resilience.ProviderUnavailable, Provider: provider, Model: model, Status: status, Err: err}
}

// strikeKey strikes the key from a piece of a stream, as withoutKey does from a reply. A key split
// across two pieces cannot be seen in either; the whole reply is struck again at the end.
func strikeKey(key secret.String, onDelta func(Delta)) func(Delta) {
	k := key.Reveal()
	if k == "" {
		return onDelta
	}
	return func(d Delta) {
		d.Text = strings.ReplaceAll(d.Text, k, key.String())
		for i := range d.ToolCalls {
			d.ToolCalls[i].Arguments = strings.ReplaceAll(d.ToolCalls[i].Arguments, k, key.String())
		}
		onDelta(d)
	}
}

// syntheticCallID makes a tool call's id where the provider gives none: stable (the same answer gets
// the same ids) and unique within an answer, from the answer's id, the call's place and what it says.
func syntheticCallID(parts ...string) string {
	h := fnv1a.Offset
	for _, p := range parts {
		h = h.AddString(p).AddByte(0)
	}
	return "call_" + fmt.Sprintf("%016x", uint64(h))
}

// toolCalls accumulates the pieces of tool calls by their index, bounded by maxToolCalls. Each call's
// arguments have a builder of their own, held by pointer: a builder must not move once written to.
type toolCalls struct {
	calls []ToolCall
	args  []*strings.Builder
}

// add adds a piece to the call at index; a new index opens a call.
func (t *toolCalls) add(d ToolCallDelta) error {
	if d.Index < 0 || d.Index >= maxToolCalls {
		return fmt.Errorf("tool call index %d outside 0..%d", d.Index, maxToolCalls-1)
	}
	for len(t.calls) <= d.Index {
		t.calls = append(t.calls, ToolCall{})
		t.args = append(t.args, new(strings.Builder))
	}
	c := &t.calls[d.Index]
	if d.ID != "" {
		c.ID = d.ID
	}
	if d.Name != "" {
		c.Name = d.Name
	}
	t.args[d.Index].WriteString(d.Arguments)
	return nil
}

// hasID reports whether the call at index is open and has its id.
func (t *toolCalls) hasID(index int) bool {
	return index >= 0 && index < len(t.calls) && t.calls[index].ID != ""
}

// done returns the calls with their whole arguments.
func (t *toolCalls) done() []ToolCall {
	if len(t.calls) == 0 {
		return nil
	}
	out := make([]ToolCall, len(t.calls))
	for i, c := range t.calls {
		c.Arguments = t.args[i].String()
		out[i] = c
	}
	return out
}
