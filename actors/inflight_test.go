package actors

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/inflight"
	"github.com/conclave-ai/conclave/messages"
)

func TestAWorkerDropsAnswersPastTheBoundAndBlamesNobody(t *testing.T) {
	text := strings.Repeat("x", 600)
	gate := make(chan struct{})
	h := newWorkerHarness(t, transportFunc(func(_ context.Context, call providers.Call) (providers.Reply, error) {
		if call.JobID == "r/late" {
			<-gate // its request ends meanwhile
		}
		return providers.Reply{Text: text}, nil
	}))
	h.deps.Inflight = inflight.New(1000)
	acct, _ := h.deps.Inflight.Open("r", 100)
	job := func(id string) {
		h.system.Root.Send(h.pid, &messages.Dispatch{ReplyTo: h.inbox, Job: &messages.Job{JobId: id, RequestId: "r", Kind: providers.KindAnswer,
			Model: "m", Provider: "p", Deadline: ts(time.Now().Add(time.Minute)), TimeoutSeconds: 10}})
	}
	job("r/0")
	if r := h.result(); !r.Ok || r.Text != text || h.deps.Inflight.Total() != 700 {
		t.Fatalf("an answer within the bound: %+v, total %d", r.ErrorKind, h.deps.Inflight.Total())
	}
	job("r/1")
	r := h.result()
	if r.Ok || r.Text != "" || r.ErrorKind != string(resilience.Overloaded) || h.deps.Inflight.Total() != 700 {
		t.Fatalf("an answer past the bound: ok %v, %d bytes, %q, total %d", r.Ok, len(r.Text), r.ErrorKind, h.deps.Inflight.Total())
	}
	if v := resilience.Blame(resilience.Call{Kind: resilience.Kind(r.ErrorKind), FullBudget: true}); v != (resilience.Verdict{}) {
		t.Fatalf("a dropped answer blames %+v", v)
	}
	waitUntil(t, func() bool { return h.ref.Snapshot().Completed == 2 })
	if s := h.ref.Snapshot(); s.Breaker.ErrorsInWindow != 0 || s.Failed != 0 {
		t.Fatalf("the host was blamed for the bound: %+v", s)
	}
	job("r/late")
	<-h.started
	<-h.started
	<-h.started
	acct.Close()
	close(gate)
	job("r/after") // started after its request ended
	for _, id := range []string{"r/late", "r/after"} {
		if r := h.result(); r.JobId != id || r.Ok || r.Text != "" || r.ErrorKind != string(resilience.Cancelled) || h.deps.Inflight.Total() != 0 {
			t.Fatalf("an answer after its request ended: %s %q, total %d", r.JobId, r.ErrorKind, h.deps.Inflight.Total())
		}
	}
}

// streamFunc is a transport that streams.
type streamFunc func(ctx context.Context, onDelta func(providers.Delta)) (providers.Reply, error)

func (f streamFunc) Run(ctx context.Context, _ providers.Call) (providers.Reply, error) {
	return f(ctx, func(providers.Delta) {})
}
func (f streamFunc) Stream(ctx context.Context, _ providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	return f(ctx, onDelta)
}
func (streamFunc) Close() error { return nil }

// streamPieces streams ten pieces of 300 bytes, stopping when its call is cancelled.
func streamPieces(ctx context.Context, onDelta func(providers.Delta)) (providers.Reply, error) {
	piece := strings.Repeat("y", 300)
	var sb strings.Builder
	for i := 0; i < 10; i++ {
		if ctx.Err() != nil {
			return providers.Reply{}, ctx.Err()
		}
		onDelta(providers.Delta{Text: piece})
		sb.WriteString(piece)
	}
	return providers.Reply{Text: sb.String()}, nil
}

// streamJob streams a job of request id through a worker whose in-flight bound is limit, and returns
// its result and the pieces relayed.
func streamJob(t *testing.T, limit int64, id string) (*messages.JobResult, int, *inflight.Inflight, *inflight.Account) {
	h := newWorkerHarness(t, streamFunc(streamPieces))
	h.deps.Inflight = inflight.New(limit)
	acct, _ := h.deps.Inflight.Open(id, 0)
	deltas := make(chan *messages.Delta, 20)
	inbox := h.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.Delta:
			deltas <- m
		case *messages.JobResult:
			h.results <- m
		}
	}))
	h.system.Root.Send(h.pid, &messages.Dispatch{ReplyTo: inbox, Job: &messages.Job{JobId: id + "/0", RequestId: id, Kind: providers.KindAnswer,
		Model: "m", Provider: "p", Deadline: ts(time.Now().Add(time.Minute)), TimeoutSeconds: 10, Stream: true}})
	r := h.result() // the pieces went before it, in order
	return r, len(deltas), h.deps.Inflight, acct
}

func TestAStreamPastTheBoundStops(t *testing.T) {
	r, pieces, in, acct := streamJob(t, 1000, "s")
	if r.Ok || r.Text != "" || r.ErrorKind != string(resilience.Overloaded) {
		t.Fatalf("a stream past the bound: ok %v, %d bytes, %q", r.Ok, len(r.Text), r.ErrorKind)
	}
	if pieces != 3 || in.Total() != 900 {
		t.Fatalf("%d pieces relayed, total %d: want the 3 that fit", pieces, in.Total())
	}
	acct.Close()
	if in.Total() != 0 {
		t.Fatalf("total %d after the request", in.Total())
	}
}

func TestAStreamCountsItsAnswerOnce(t *testing.T) {
	r, pieces, in, acct := streamJob(t, 5000, "t")
	if !r.Ok || len(r.Text) != 3000 || pieces != 10 || in.Total() != 3000 {
		t.Fatalf("a stream within the bound: %q, %d bytes, %d pieces, total %d", r.ErrorKind, len(r.Text), pieces, in.Total())
	}
	acct.Close()
}
