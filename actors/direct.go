package actors

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/inbox"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// A direct call (one catalog model, then its fallbacks) needs no actor of its own: nothing but its
// caller waits for it, and no consensus actor is spawned for it. It is the same coordinator, with the
// same plan, collection machine, permits, retries, fallbacks, streaming, record and answer, hosted by
// its caller's goroutine: what the gates, the slots and the calls say of its jobs comes into an inbox
// registered under the request's name, which the caller reads, and the answer is returned, not sent.
// The hops a direct call saves are the request supervisor's, the coordinator's mailbox and its
// lifecycle, and a streamed answer's listener: its pieces go to the caller's onDelta in place.

// DirectCall is a direct call for RunDirect.
type DirectCall struct {
	Req *messages.RouteRequest
	// Seq is the request's sequence number (Directory.NextSequence).
	Seq uint64
	// OnDelta, when set, takes the pieces of the answer as they come, on the caller's goroutine.
	OnDelta func(*messages.Delta)
	// ShuttingDown is closed when the requests still running are to stop (the shutdown's timeout).
	ShuttingDown <-chan struct{}
	// Wait is the longest the caller waits for the answer: the coordinator answers by the request's
	// deadline, so this is a last resort against a bug.
	Wait time.Duration
}

// RunDirect runs a direct call on the caller's goroutine and returns its answer, its record handed
// to the recorder as for any request. ctx ending (the caller left) stops it; it then answers
// client_closed_request. A panic in it answers 500, as a coordinator's crash does.
func (d *Deps) RunDirect(ctx context.Context, system *actor.ActorSystem, call DirectCall) (exec *messages.Execution, err error) {
	req := call.Req
	if why := CheckRequestName(req.GetRequestId()); why != "" {
		d.Drop(KindRequests, why, req)
		return Refusal(req.GetRequestId(), resilience.MalformedRequest, "the request is malformed ("+why+")"), nil
	}
	in := inbox.New()
	// A name among the coordinators': a request id is in progress once, however it is routed.
	self, fresh := system.ProcessRegistry.Add(callerProcess{in}, RootName+"/"+RequestsName+"/"+req.RequestId)
	if !fresh {
		return Duplicate(req.RequestId), nil
	}
	defer func() {
		system.ProcessRegistry.Remove(self)
		in.Close() // a late word for the request, from a sender holding its address, is dropped
	}()
	h := callerHost{system: system, self: self}
	c := &CoordinatorActor{deps: d, req: req, replyTo: self, seq: call.Seq, relay: call.OnDelta}
	defer func() {
		if v := recover(); v != nil {
			c.due.Stop()
			d.Log.Error("coordinator crashed", zap.String("event", "coordinator_crashed"), zap.String("actor", self.Id), zap.Any("reason", v))
			exec, err = Crashed(req.RequestId, v), nil
		}
	}()
	c.receive(h, &actor.Started{})
	giveUp := time.NewTimer(call.Wait)
	defer giveUp.Stop()
	left, stopping := ctx.Done(), call.ShuttingDown
	var batch []any
	for {
		select {
		case <-in.Ready():
			batch = in.Take(batch[:0])
			for _, m := range batch {
				if x, ok := m.(*messages.Execution); ok && c.answered {
					return x, nil
				}
				c.receive(h, m)
			}
		case <-left:
			left = nil
			c.receive(h, &messages.CancelRequest{RequestId: req.RequestId, Code: string(resilience.ClientClosed)})
		case <-stopping:
			stopping = nil
			c.receive(h, &messages.CancelRequest{RequestId: req.RequestId, Code: string(resilience.ShuttingDown)})
		case <-giveUp.C:
			c.due.Stop()
			return nil, fmt.Errorf("request %s: no answer within %s", req.RequestId, call.Wait)
		}
	}
}

// CheckRequestName says why a request's id cannot name its coordinator, or "": it must be a name, and
// not a path.
func CheckRequestName(id string) string {
	switch {
	case id == "":
		return DropNoRequestID
	case id == "." || id == ".." || strings.ContainsRune(id, '/'):
		return DropMalformed
	}
	return ""
}

// Refusal is the answer to a request that was not coordinated: refused, or its coordinator crashed.
func Refusal(requestID string, kind resilience.Kind, message string) *messages.Execution {
	return &messages.Execution{RequestId: requestID, StatusCode: int32(resilience.StatusOf(kind)),
		Error: &messages.Failure{Code: string(kind), Message: message}}
}

// Crashed is the answer to a request whose coordinator panicked (a bug): Conclave's own fault.
func Crashed(requestID string, reason any) *messages.Execution {
	return Refusal(requestID, resilience.Internal, fmt.Sprintf("internal fault while coordinating the request: %v", reason))
}

// Duplicate is the answer to a request whose id is in progress already.
func Duplicate(requestID string) *messages.Execution {
	return &messages.Execution{RequestId: requestID, StatusCode: http.StatusConflict,
		Error: &messages.Failure{Code: "duplicate_request", Message: "a request with this id is in progress"}}
}

// callerProcess is a direct call's address: what is sent to it goes into its caller's inbox.
type callerProcess struct{ in *inbox.Inbox }

func (p callerProcess) SendUserMessage(_ *actor.PID, m any) {
	if e, ok := m.(*actor.MessageEnvelope); ok {
		m = e.Message
	}
	p.in.Put(m)
}

func (callerProcess) SendSystemMessage(*actor.PID, any) {}
func (callerProcess) Stop(*actor.PID)                   {}

// callerHost is a coordinator's host on its caller's goroutine: it sends through the root.
type callerHost struct {
	system *actor.ActorSystem
	self   *actor.PID
}

func (h callerHost) Self() *actor.PID                    { return h.self }
func (h callerHost) Send(pid *actor.PID, m any)          { h.system.Root.Send(pid, m) }
func (h callerHost) Spawn(props *actor.Props) *actor.PID { return h.system.Root.Spawn(props) }
func (h callerHost) ActorSystem() *actor.ActorSystem     { return h.system }
func (h callerHost) Stop(pid *actor.PID) {
	if pid != h.self { // the caller ends when it has the answer
		h.system.Root.Stop(pid)
	}
}
