package httpapi

import (
	"net/http"
	"time"

	"github.com/conclave-ai/conclave/internal/core/problems"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"github.com/julienschmidt/httprouter"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Every door to the pipeline is a codec over one canonical request and one canonical answer. Its
// decoder reads its wire body into the canonical request (a messages.RouteRequest, or an EmbedRequest
// for embeddings), every problem listed under the body's own names, and intake judges the request
// (report.go); its encoder writes the canonical answer, the execution record, and the pieces a direct
// call streams (messages.Delta), in its wire format. serve is what every door does around its codec,
// and answerAsk what every chat door does to run its request and encode the answer.

// door is what serve needs to know of a door beside its codec.
type door struct {
	// endpoint names the door in logs.
	endpoint string
	// idHeaders are the answer's headers that carry the request's id.
	idHeaders []string
	// writeErr writes an error in the door's shape.
	writeErr errorWriter
	// keepAlive is what the door's streams send while they have nothing to say yet.
	keepAlive string
}

// The doors of OpenAI's and Anthropic's APIs (/route-thompson, Conclave's own, is route.go's).
var (
	chatDoor       = door{endpoint: "chat_completions", idHeaders: []string{"X-Request-ID"}, writeErr: writeOpenAIError, keepAlive: sseKeepAlive}
	responsesDoor  = door{endpoint: "responses", idHeaders: []string{"X-Request-ID"}, writeErr: writeOpenAIError, keepAlive: sseKeepAlive}
	embeddingsDoor = door{endpoint: "embeddings", idHeaders: []string{"X-Request-ID"}, writeErr: writeOpenAIError}
	// Anthropic's clients read a request's id in request-id, and expect ping events in a quiet stream.
	messagesDoor = door{endpoint: "messages", idHeaders: []string{"X-Request-ID", "request-id"}, writeErr: writeAnthropicError, keepAlive: anthropicPing}
)

// chatCompletions answers POST /v1/chat/completions: a chat completion, or its chunks when the caller
// streams.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	serveAsk(s, w, r, chatDoor, s.parseChat, func(chat *chatRequest) askEncoder[completion] { return &completionEncoder{chat: chat} })
}

// responses answers POST /v1/responses: the same pipeline as chat completions, answered as the
// Responses API answers, whole or as its stream of events.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	serveAsk(s, w, r, responsesDoor, s.parseResponses, func(rr *responsesRequest) askEncoder[responseObject] { return &responseEncoder{rr: rr} })
}

// messagesHandler answers POST /v1/messages: a message, or its events when the caller streams.
func (s *Server) messagesHandler(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	serveAsk(s, w, r, messagesDoor, s.parseMessages, func(msg *chatRequest) askEncoder[anthropicMessage] { return &messageEncoder{msg: msg} })
}

// embeddings answers POST /v1/embeddings: the vectors of the texts, from one model.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	serve(s, w, r, embeddingsDoor, s.parseEmbeddings, func(x exchange, er *embeddingsRequest) { s.embed(w, r, x, er) })
}

// exchange is one request through a door: the door, the request's id and when it came.
type exchange struct {
	door
	id       string
	received time.Time
}

// serve is the opening every door shares around its codec: it names the request (its id in the
// answer's headers), reads the bounded JSON body, decodes it (a refusal lists every problem the decoder
// and intake found), and hands what it decoded to answer, which runs it and encodes the answer. The
// caller is authenticated before (authedWith).
func serve[R any](s *Server, w http.ResponseWriter, r *http.Request, d door, decode func(body []byte) (R, int, []*messages.Problem), answer func(x exchange, req R)) {
	received := time.Now()
	x := exchange{door: d, id: uuid.NewString(), received: received}
	for _, h := range d.idHeaders {
		w.Header().Set(h, x.id)
	}
	body, ok := s.readJSONWith(w, r, d.writeErr)
	if !ok {
		return
	}
	req, status, why := decode(body)
	if status != 0 {
		s.refuse(w, x, status, why)
		return
	}
	answer(x, req)
}

// refuse answers a request its door refused, in the door's shape, and logs it.
func (s *Server) refuse(w http.ResponseWriter, x exchange, status int, why []*messages.Problem) {
	s.log.Info("request rejected", zap.String("event", "request_rejected"), zap.String("request_id", x.id), zap.Int("status", status),
		zap.String("endpoint", x.endpoint), zap.Array("problems", problemsField(why)))
	msg := "the request is invalid"
	if status == http.StatusNotFound {
		msg = "the model does not exist"
	}
	x.writeErr(w, status, "", msg, why)
}

// fail answers a request that failed before its answer began, in the door's shape, saying when to come
// back when the failure knows.
func (x exchange) fail(w http.ResponseWriter, exec *messages.Execution) {
	setRetryAfter(w, exec.Error)
	x.writeErr(w, int(exec.StatusCode), exec.Error.Code, exec.Error.Message, exec.Error.Details)
}

// clientID is the caller's X-Request-ID when it may be kept beside the server's id, or "".
func clientID(r *http.Request) string {
	if c := r.Header.Get("X-Request-ID"); validClientID(c) {
		return c
	}
	return ""
}

// received stamps a chat door's request with its ids and logs its arrival.
func (s *Server) received(r *http.Request, x exchange, chat *chatRequest) {
	req := chat.route
	req.RequestId, req.ReceivedAt, req.ClientRequestId = x.id, timestamppb.New(x.received), clientID(r)
	if ce := s.log.Check(zap.DebugLevel, "request received"); ce != nil {
		ce.Write(zap.String("event", "request_received"), zap.String("request_id", x.id), zap.String("endpoint", x.endpoint),
			zap.String("model", problems.Clip(chat.model, 128)), zap.Int("task_bytes", len(req.Task)), zap.Bool("stream", chat.stream), zap.String("remote", r.RemoteAddr))
	}
}

// askEncoder is a chat door's encoder: it writes the canonical answer in the door's wire format, A,
// whole, or as a stream of the pieces a direct call (or a rotating arbiter's synthesis) writes as they
// come, then the rest of the answer once the consensus has it.
type askEncoder[A any] interface {
	// stream begins the answer's events over st, and returns the listener of the pieces.
	stream(x exchange, st *sseStream) func(*messages.Delta)
	// render is a successful answer in the door's shape, or the failure it turns out to be.
	render(x exchange, exec *messages.Execution) (A, *messages.Execution)
	// finish ends a stream with the answer rendered.
	finish(exec *messages.Execution, answer A)
	// fail ends a begun stream with a failure.
	fail(exec *messages.Execution)
}

// asking is a chat door's decoded request, which holds the chat request it asks.
type asking interface{ asks() *chatRequest }

// serveAsk is a chat door's handler: serve with the door's decoder, then answerAsk with the encoder
// made for the request decoded.
func serveAsk[R asking, A any](s *Server, w http.ResponseWriter, r *http.Request, d door, decode func([]byte) (R, int, []*messages.Problem), encoder func(R) askEncoder[A]) {
	serve(s, w, r, d, decode, func(x exchange, req R) {
		answerAsk(s, w, r, x, req.asks(), encoder(req))
	})
}

// answerAsk runs a chat door's request through the pipeline and writes its answer with the door's
// encoder: whole, or as a stream when the caller asked for one. A stream writes nothing before its
// first event or keep-alive, so a request that fails before then still answers with its own status.
func answerAsk[A any](s *Server, w http.ResponseWriter, r *http.Request, x exchange, chat *chatRequest, enc askEncoder[A]) {
	s.received(r, x, chat)
	routing(w, x.id) // before the keep-alives, which read it
	var st *sseStream
	var exec *messages.Execution
	var err error
	if chat.stream {
		st = s.startStream(w, x.keepAlive)
		exec, err = s.engine.RouteStreaming(r.Context(), chat.route, enc.stream(x, st))
	} else {
		exec, err = s.engine.Route(r.Context(), chat.route)
	}
	st.quiet() // the keep-alives write through w: stop them before w changes
	routed(w, exec)
	exec = s.settle(x.id, exec, err)
	var answer A
	if exec.StatusCode == http.StatusOK {
		answer, exec = enc.render(x, exec)
	}
	switch {
	case exec.StatusCode != http.StatusOK && st.started():
		enc.fail(exec)
	case exec.StatusCode != http.StatusOK:
		x.fail(w, exec)
	case st == nil:
		writeJSON(w, http.StatusOK, answer)
	default:
		enc.finish(exec, answer)
	}
}
