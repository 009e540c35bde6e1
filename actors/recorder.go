package actors

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/resilience"
	"github.com/conclave-ai/conclave/store"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// RecorderActor batches execution records into the store off the request path. Records it holds but
// has not yet written answer reads too, and because a coordinator hands over its record before it
// answers the caller, a caller that asks for its execution right after the answer always finds it.
type RecorderActor struct {
	deps     *Deps
	store    store.Store
	log      *zap.Logger
	batch    []*messages.Execution
	pending  map[string]*messages.Execution // buffered or being written
	judging  map[string]bool                // feedback being applied, to refuse a concurrent second one
	writing  bool
	tick     func()
	flushers []*actor.PID // waiting for a Flush to complete
	written  int
}

// Batching of the recorder.
const (
	recordBatchSize     = 128
	recordFlushInterval = 50 * time.Millisecond
)

type flushTick struct{}

type batchWritten struct {
	records []*messages.Execution
	err     error
}

// feedbackLoaded brings back a record read from the store for a feedback request.
type feedbackLoaded struct {
	req    *messages.RecordFeedback
	rec    *messages.Execution
	err    error
	sender *actor.PID
}

// NewRecorderActor returns the producer of the recorder.
func NewRecorderActor(deps *Deps, s store.Store) actor.Producer {
	return func() actor.Actor { return &RecorderActor{deps: deps, store: s} }
}

// Receive implements actor.Actor.
func (r *RecorderActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.log = r.deps.Log.With(zap.String("actor", "recorder"))
		r.pending = map[string]*messages.Execution{}
		r.judging = map[string]bool{}
	case *messages.Execution:
		r.batch = append(r.batch, m)
		r.pending[m.RequestId] = m
		if len(r.batch) >= recordBatchSize {
			r.write(ctx)
		} else if r.tick == nil {
			r.tick = r.deps.Timers.SendOnce(recordFlushInterval, ctx.Self(), flushTick{})
		}
	case flushTick:
		r.tick = nil
		r.write(ctx)
	case *batchWritten:
		r.writing = false
		if m.err != nil {
			// Keep what the store refused: it stays readable here and is written again on the next tick.
			r.log.Error("writing execution records failed", zap.String("event", "record_write_failed"), zap.Int("records", len(m.records)), zap.Error(m.err))
			r.batch = append(m.records, r.batch...)
			for _, f := range r.flushers {
				ctx.Send(f, &messages.Flushed{Written: int32(r.written), Error: m.err.Error()})
			}
			r.flushers = nil
			if r.tick == nil {
				r.tick = r.deps.Timers.SendOnce(time.Second, ctx.Self(), flushTick{})
			}
			return
		}
		r.written += len(m.records)
		for _, rec := range m.records {
			if r.pending[rec.RequestId] == rec {
				delete(r.pending, rec.RequestId)
			}
		}
		r.write(ctx)
	case *messages.GetExecution:
		if rec, ok := r.pending[m.RequestId]; ok {
			ctx.Respond(&messages.ExecutionLookup{Execution: rec, Found: true})
			return
		}
		sender, root, st := ctx.Sender(), ctx.ActorSystem().Root, r.store
		go func() {
			var rec *messages.Execution
			err := safely(func() (err error) { rec, err = st.Get(context.Background(), m.RequestId); return err })
			root.Send(sender, &messages.ExecutionLookup{Execution: rec, Found: err == nil})
		}()
	case *messages.RecordFeedback:
		if r.judging[m.RequestId] {
			ctx.Respond(feedbackTwice)
			return
		}
		r.judging[m.RequestId] = true
		if rec, ok := r.pending[m.RequestId]; ok {
			r.applyFeedback(ctx, m, rec, ctx.Sender())
			return
		}
		sender, self, root, st := ctx.Sender(), ctx.Self(), ctx.ActorSystem().Root, r.store
		go func() {
			var rec *messages.Execution
			err := safely(func() (err error) { rec, err = st.Get(context.Background(), m.RequestId); return err })
			if errors.Is(err, store.ErrNotFound) {
				err = nil
			}
			root.Send(self, &feedbackLoaded{req: m, rec: rec, err: err, sender: sender})
		}()
	case *feedbackLoaded:
		if m.err != nil {
			delete(r.judging, m.req.RequestId)
			ctx.Send(m.sender, feedbackResult(http.StatusServiceUnavailable, "the record store is unavailable: "+m.err.Error()))
			return
		}
		r.applyFeedback(ctx, m.req, m.rec, m.sender)
	case *messages.Flush:
		r.flushers = append(r.flushers, ctx.Sender())
		r.write(ctx)
	case *actor.Stopping:
		if r.tick != nil {
			r.tick()
		}
	}
}

// applyFeedback rewards the models of one execution once and records the feedback with it.
func (r *RecorderActor) applyFeedback(ctx actor.Context, fb *messages.RecordFeedback, rec *messages.Execution, replyTo *actor.PID) {
	delete(r.judging, fb.RequestId)
	switch {
	case rec == nil:
		ctx.Send(replyTo, feedbackNotFound)
		return
	case len(rec.Feedback) > 0:
		ctx.Send(replyTo, feedbackTwice)
		return
	}
	updates, err := FeedbackUpdates(rec, fb, r.deps.Dir.Arms)
	if err != nil {
		ctx.Send(replyTo, feedbackResult(http.StatusBadRequest, err.Error()))
		return
	}
	for _, u := range updates {
		reward(ctx, r.deps.Dir.Bandit, &messages.Reward{Model: u.Model, Category: u.Category, Reward: u.Reward, Reason: u.Reason, RequestId: fb.RequestId})
	}
	// Records are immutable once sent: store a copy with the feedback, which replaces the original.
	updated := proto.Clone(rec).(*messages.Execution)
	updated.Feedback = updates
	updated.FeedbackAt = ts(r.deps.now())
	r.batch = append(r.batch, updated)
	r.pending[updated.RequestId] = updated
	r.write(ctx)
	r.log.Info("feedback applied", zap.String("event", "feedback"), zap.String("request_id", fb.RequestId),
		zap.Array("updates", updatesField(updates)))
	ctx.Send(replyTo, &messages.FeedbackResult{Status: http.StatusOK, Updates: updates})
}

// write starts writing the batch when no write is in flight, and answers flushes once nothing is left.
func (r *RecorderActor) write(ctx actor.Context) {
	if r.writing {
		return
	}
	if len(r.batch) == 0 {
		for _, f := range r.flushers {
			ctx.Send(f, &messages.Flushed{Written: int32(r.written)})
		}
		r.flushers = nil
		return
	}
	records := r.batch
	r.batch = nil
	r.writing = true
	self, root, st := ctx.Self(), ctx.ActorSystem().Root, r.store
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		root.Send(self, &batchWritten{records: records, err: safely(func() error { return st.Save(wctx, records) })})
	}()
}

// safely runs a store call, turning a panic in it into an error: a broken store must not take the
// process down with it.
func safely(call func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%s: the store panicked: %v", resilience.Internal, v)
		}
	}()
	return call()
}
