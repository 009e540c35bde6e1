package actors

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/adapters/store/spool"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/feedback"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// RecorderActor writes execution records and the journal of calls to the store off the request path,
// in batches, and applies callers' feedback. Records it holds but has not written yet answer reads
// too; because a coordinator hands over its record before it answers, a caller that asks for its
// execution right after the answer always finds it.
//
// The journal: a call's intent is written at once and answered when durable (a call is sent only
// then); its settlement comes from the call's meter when it ends. A request's record waits for the
// settlements of its calls still open (a call cancelled as collection ended settles a moment later,
// with what it cost), at most SettleWait, and goes with them in one write: the record and the journal
// agree.
//
// While the store is unreachable the records and calls go to the spool, in order, and the spool is
// written back once the store answers again; the store takes each record and each settlement once, so
// nothing is written or charged twice. Its queue is bounded: records beyond it are dropped, counted and
// logged.
type RecorderActor struct {
	deps     *Deps
	store    store.Store
	spool    *spool.Spool // nil: no spool (the memory store cannot be unreachable)
	log      *zap.Logger
	batch    []*messages.Execution
	calls    []*messages.Call               // journaled calls to write with the next batch
	pending  map[string]*messages.Execution // queued, held for their calls, or being written
	judging  map[string]bool                // feedback being applied, to refuse a concurrent second one
	awaiting map[string][]*feedbackAsk      // feedback on a record still on its way to the store
	durable  map[string][]*actor.PID        // who waits for a record to be written
	// refused holds the records dropped for a full queue until their wait comes (with a spool only:
	// there every answer waits for its record), so the wait hears they are not kept.
	refused map[string]bool
	writing bool
	// down is true while the store is unreachable: records go through the spool.
	down       bool
	lastReplay time.Time
	spoolFull  bool // the spool refused records since it last took some
	tick       func()
	flushers   []*actor.PID
	written    int
	spooled    int
	dropped    int

	// intents are who waits for a call's intent to be durable, by call id.
	intents map[string]*actor.PID
	// open are the calls journaled and not settled yet, by call id (their request's id); openOf counts
	// them by request.
	open   map[string]string
	openOf map[string]int
	// held are records waiting for their open calls to settle; settled are settlements waiting for
	// their record, by request id.
	held    map[string]*heldRecord
	settled map[string]*settlements
	// flushBy is when a flush stops waiting for open calls.
	flushBy time.Time
}

// heldRecord is a record waiting for its calls' settlements, since when.
type heldRecord struct {
	rec   *messages.Execution
	since time.Time
}

// settlements are a request's settled calls waiting for its record, since the first came.
type settlements struct {
	calls []*messages.Call
	since time.Time
}

// SettleWait bounds how long a record waits for its open calls to settle: a cancelled call ends
// within milliseconds; a host that holds one longer is out of the record, and its settlement is
// written alone when it comes (OrphanWait after it, if no record takes it).
const (
	SettleWait = 5 * time.Second
	OrphanWait = 30 * time.Second
	// flushWait bounds how long a flush at shutdown waits for calls still open.
	flushWait = 5 * time.Second
)

// Bounds and pace of the recorder.
const (
	recordBatchSize     = 128
	recordFlushInterval = 50 * time.Millisecond
	// RecorderQueue is the most records the recorder holds before it drops new ones.
	RecorderQueue = 10000
	// replayInterval is how often a store that is down is tried again.
	replayInterval = time.Second
	replayBatch    = 256
)

type flushTick struct{}

// batchWritten is the outcome of one write: to the store, or through the spool while it is down.
type batchWritten struct {
	records []*messages.Execution
	calls   []*messages.Call
	// err is the store's answer to the batch (nil once it went to the spool instead).
	err error
	// spooled says the records and calls went to the spool; spoolErr that the records could not, and
	// callsErr that the calls could not (they have room of their own, so records may go without them).
	spooled  bool
	spoolErr error
	callsErr error
	// down says the store is still unreachable after the write (and any replay); replayed counts the
	// spooled records written back.
	down      bool
	replayed  int
	replayErr error
}

// feedbackAsk is a feedback request and who waits for its answer.
type feedbackAsk struct {
	req    *messages.RecordFeedback
	sender *actor.PID
}

// feedbackDone is the outcome of a feedback request.
type feedbackDone struct {
	ask     *feedbackAsk
	result  *messages.FeedbackResult
	updates []*messages.BanditUpdate
}

// NewRecorderActor returns the producer of the recorder; sp may be nil.
func NewRecorderActor(deps *Deps, s store.Store, sp *spool.Spool) actor.Producer {
	return func() actor.Actor { return &RecorderActor{deps: deps, store: s, spool: sp} }
}

// Receive implements actor.Actor.
func (r *RecorderActor) Receive(ctx actor.Context) {
	if why := r.check(ctx); why != "" {
		r.deps.Drop(KindRecorder, why, ctx.Message())
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.log = r.deps.Log.With(zap.String("actor", "recorder"))
		r.pending, r.judging, r.awaiting = map[string]*messages.Execution{}, map[string]bool{}, map[string][]*feedbackAsk{}
		r.durable, r.refused = map[string][]*actor.PID{}, map[string]bool{}
		r.intents, r.open, r.openOf = map[string]*actor.PID{}, map[string]string{}, map[string]int{}
		r.held, r.settled = map[string]*heldRecord{}, map[string]*settlements{}
		if r.spool != nil {
			if n, _ := r.spool.Pending(); n > 0 { // left by a run whose store was down: write it back first
				r.down = true
				r.log.Warn("records left in the spool are written back", zap.String("event", "spool_replay"), zap.Int("records", n),
					zap.String("spool", r.spool.Path()))
				r.wakeIn(ctx, 0)
			}
		}
	case *messages.Execution:
		if len(r.batch) >= RecorderQueue {
			r.drop(1, errors.New("the recorder's queue is full"))
			if r.spool != nil {
				r.refused[m.RequestId] = true
			}
			return
		}
		r.pending[m.RequestId] = m
		if r.openOf[m.RequestId] > 0 {
			r.held[m.RequestId] = &heldRecord{rec: m, since: r.deps.now()}
			r.wakeIn(ctx, recordFlushInterval)
			return
		}
		r.enqueue(ctx, m)
	case *messages.Call:
		r.journal(ctx, m)
	case flushTick:
		r.tick = nil
		r.release(ctx)
		r.write(ctx)
	case *batchWritten:
		r.applyWrite(ctx, m)
	case *messages.GetExecution:
		if rec, ok := r.pending[m.RequestId]; ok {
			ctx.Respond(&messages.ExecutionLookup{Execution: rec, Found: true})
			return
		}
		sender, root, st := ctx.Sender(), ctx.ActorSystem().Root, r.store
		go func() {
			var rec *messages.Execution
			err := safely(func() (err error) { rec, err = st.Get(context.Background(), m.RequestId); return err })
			res := &messages.ExecutionLookup{Execution: rec, Found: err == nil}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				res.Unavailable = err.Error()
			}
			root.Send(sender, res)
		}()
	case *messages.RecordFeedback:
		if r.judging[m.RequestId] {
			ctx.Respond(feedbackTwice)
			return
		}
		r.judging[m.RequestId] = true
		ask := &feedbackAsk{req: m, sender: ctx.Sender()}
		if _, ok := r.pending[m.RequestId]; ok {
			// The store must hold the record before its feedback: write it now rather than at the
			// next tick, and answer once it is written.
			r.awaiting[m.RequestId] = append(r.awaiting[m.RequestId], ask)
			r.write(ctx)
			return
		}
		r.judge(ctx, ask, nil)
	case *feedbackDone:
		delete(r.judging, m.ask.req.RequestId)
		if m.result.Status == http.StatusOK {
			sent := make([]*messages.Reward, len(m.updates))
			for i, u := range m.updates {
				sent[i] = &messages.Reward{Model: u.Model, Category: u.Category, Reward: u.Reward, Reason: u.Reason, RequestId: m.ask.req.RequestId}
			}
			rewards(ctx, r.deps.Dir.Bandit, sent...)
			// The truth also anchors the reliability estimator, whose credit is otherwise the vote's own
			// posterior: where models err together, the posterior follows them and the truth does not.
			if v := TruthVotes(m.ask.req.RequestId, m.ask.req, m.updates); v != nil && r.deps.Reward == feedback.Reliability {
				r.deps.Dir.Arms.VoteSent()
				ctx.Send(r.deps.Dir.Bandit, v)
			}
			r.log.Info("feedback applied", zap.String("event", "feedback"), zap.String("request_id", m.ask.req.RequestId),
				zap.Array("updates", updatesField(m.updates)))
		}
		ctx.Send(m.ask.sender, m.result)
	case *messages.AwaitRecord:
		if r.refused[m.RequestId] {
			delete(r.refused, m.RequestId)
			ctx.Respond(&messages.RecordDurable{RequestId: m.RequestId})
			return
		}
		if _, ok := r.pending[m.RequestId]; !ok { // written already (a record comes before its wait)
			ctx.Respond(&messages.RecordDurable{RequestId: m.RequestId, Stored: true})
			return
		}
		// Written now, not at the next tick: while one write is out, the records that wait meanwhile
		// go together in the next (a group commit).
		r.durable[m.RequestId] = append(r.durable[m.RequestId], ctx.Sender())
		r.write(ctx)
	case *messages.Flush:
		r.flushers = append(r.flushers, ctx.Sender())
		if r.flushBy.IsZero() {
			r.flushBy = r.deps.now().Add(flushWait)
		}
		r.release(ctx)
		r.write(ctx)
	case *actor.Stopping:
		if r.tick != nil {
			r.tick()
		}
	default:
		r.deps.unknown(KindRecorder, m)
	}
}

// check says why the recorder drops a message, or "": a record needs its id; a question needs someone
// to answer (an answer to nobody would be sent to a nil address) and the id it asks about.
func (r *RecorderActor) check(ctx actor.Context) string {
	asker := ctx.Sender() != nil
	switch m := ctx.Message().(type) {
	case *messages.Execution:
		return checkExecution(m)
	case *messages.Call:
		if m.GetCallId() == "" || m.GetRequestId() == "" || (m.State == store.CallOpen && !asker) {
			return DropMalformed
		}
	case *messages.GetExecution:
		return checkAsk(asker, m.GetRequestId(), true)
	case *messages.RecordFeedback:
		return checkAsk(asker, m.GetRequestId(), true)
	case *messages.AwaitRecord:
		return checkAsk(asker, m.GetRequestId(), true)
	case *messages.Flush:
		return checkAsk(asker, "", false)
	}
	return ""
}

// enqueue puts a record in the next batch, with the settlements of its calls written into it and
// beside it.
func (r *RecorderActor) enqueue(ctx actor.Context, rec *messages.Execution) {
	if st := r.settled[rec.RequestId]; st != nil {
		delete(r.settled, rec.RequestId)
		if merged := execution.Settle(rec, st.calls); merged != rec {
			rec = merged
			r.pending[rec.RequestId] = rec
		}
		r.calls = append(r.calls, st.calls...)
	}
	r.batch = append(r.batch, rec)
	if len(r.batch) >= recordBatchSize {
		r.write(ctx)
	} else {
		r.wakeIn(ctx, recordFlushInterval)
	}
}

// journal takes a call of the journal: an intent is written at once (unless the store dies with the
// process anyway) and answered once durable; a settlement goes with its request's record.
func (r *RecorderActor) journal(ctx actor.Context, c *messages.Call) {
	if c.State == store.CallOpen {
		r.open[c.CallId] = c.RequestId
		r.openOf[c.RequestId]++
		if r.spool == nil {
			ctx.Respond(&messages.RecordDurable{RequestId: c.CallId, Stored: true})
			return
		}
		r.calls = append(r.calls, c)
		r.intents[c.CallId] = ctx.Sender()
		r.write(ctx)
		return
	}
	req := c.RequestId
	if _, ok := r.open[c.CallId]; ok {
		delete(r.open, c.CallId)
		if r.openOf[req]--; r.openOf[req] <= 0 {
			delete(r.openOf, req)
		}
	}
	st := r.settled[req]
	if st == nil {
		st = &settlements{since: r.deps.now()}
		r.settled[req] = st
	}
	st.calls = append(st.calls, c)
	if h := r.held[req]; h != nil && r.openOf[req] == 0 {
		delete(r.held, req)
		r.enqueue(ctx, h.rec)
		return
	}
	r.wakeIn(ctx, settleTick)
}

// settleTick is how often records held for their calls, and settlements without a record, are looked at.
const settleTick = 100 * time.Millisecond

// release lets go of records that waited SettleWait for their calls (or, at a flush, until its
// bound), and writes settlements whose record did not come within OrphanWait (or at a flush) alone.
func (r *RecorderActor) release(ctx actor.Context) {
	now := r.deps.now()
	flushing := !r.flushBy.IsZero()
	for req, h := range r.held {
		if now.Sub(h.since) >= SettleWait || (flushing && !now.Before(r.flushBy)) {
			delete(r.held, req)
			r.log.Warn("a record is written before a call of its request settled", zap.String("event", "record_without_call"),
				zap.String("request_id", req), zap.Int("open_calls", r.openOf[req]))
			r.enqueue(ctx, h.rec)
		}
	}
	for req, st := range r.settled {
		if _, waiting := r.held[req]; waiting {
			continue
		}
		if now.Sub(st.since) >= OrphanWait || flushing {
			delete(r.settled, req)
			r.calls = append(r.calls, st.calls...)
		}
	}
	if len(r.held) > 0 || len(r.settled) > 0 {
		r.wakeIn(ctx, settleTick)
	}
}

// answerIntents tells the meters waiting for intents of calls whether they are durable; a call is
// sent only if its intent is.
func (r *RecorderActor) answerIntents(ctx actor.Context, calls []*messages.Call, stored bool) {
	for _, c := range calls {
		if pid, ok := r.intents[c.CallId]; ok && c.State == store.CallOpen {
			delete(r.intents, c.CallId)
			ctx.Send(pid, &messages.RecordDurable{RequestId: c.CallId, Stored: stored})
		}
	}
}

// wakeIn makes sure a flush tick comes within d.
func (r *RecorderActor) wakeIn(ctx actor.Context, d time.Duration) {
	if r.tick == nil {
		r.tick = r.deps.Timers.SendOnce(d, ctx.Self(), flushTick{})
	}
}

// drop counts records lost and logs it: the first loss, then every thousandth, so that a store that
// stays down cannot flood the log.
func (r *RecorderActor) drop(n int, why error) {
	before := r.dropped
	r.dropped += n
	if before == 0 || before/1000 != r.dropped/1000 {
		r.log.Error("execution records dropped", zap.String("event", "record_dropped"), zap.Int("records", n),
			zap.Int("dropped_total", r.dropped), zap.Error(why))
	}
}

// applyWrite applies the outcome of a write.
func (r *RecorderActor) applyWrite(ctx actor.Context, m *batchWritten) {
	r.writing = false
	wasDown := r.down
	r.down = m.down
	// The store's coming and going is told first: a write can also fail in ways that return early
	// below, and the change of state must be logged all the same.
	switch {
	case r.down && !wasDown:
		n, _ := r.spool.Pending()
		r.log.Error("the record store is unavailable: records go to the spool", zap.String("event", "store_unavailable"),
			zap.String("spool", r.spool.Path()), zap.Int("spooled", n), zap.Error(m.err))
	case wasDown && !r.down:
		r.log.Info("the record store is back: the spool is written", zap.String("event", "store_available"), zap.Int("replayed", m.replayed))
	}
	var rejected *store.RejectedError
	switch {
	case m.spoolErr != nil:
		// Neither the store nor the spool took them: keep what the queue has room for, and try again
		// when the store may be back. Intents the spool refused are refused (their calls are not sent);
		// settlements it refused, which carry money, are kept.
		if m.callsErr != nil {
			r.answerIntents(ctx, m.calls, false)
			r.calls = append(settledOnly(m.calls), r.calls...)
		} else {
			r.answerIntents(ctx, m.calls, true)
		}
		room := max(RecorderQueue-len(r.batch), 0)
		keep := m.records[:min(room, len(m.records))]
		r.batch = append(keep, r.batch...)
		if lost := m.records[len(keep):]; len(lost) > 0 {
			r.forget(ctx, lost, m.spoolErr)
			r.drop(len(lost), m.spoolErr)
		}
		if !r.spoolFull {
			r.spoolFull = true
			r.log.Error("the spool refused records", zap.String("event", "spool_full"), zap.Int("records", len(m.records)), zap.Error(m.spoolErr))
		}
		r.answerFlushers(ctx, m.spoolErr)
		r.wakeIn(ctx, replayInterval)
		return
	case errors.As(m.err, &rejected):
		r.log.Error("the store refused records", zap.String("event", "record_rejected"), zap.Strings("ids", rejected.IDs[:min(len(rejected.IDs), 20)]),
			zap.Int("refused", len(rejected.IDs)), zap.Error(rejected.Err))
		r.written += max(len(m.records)-len(rejected.IDs), 0)
		r.answerIntents(ctx, m.calls, !refusedCalls(m.calls, rejected.IDs))
		r.forget(ctx, m.records, nil)
	case m.err != nil:
		// Unreachable with no spool, or any other failure: write them again on the next tick. An intent
		// is answered at once instead (its call is not sent, and its meter settles it at nothing).
		r.log.Error("writing execution records failed", zap.String("event", "record_write_failed"), zap.Int("records", len(m.records)), zap.Error(m.err))
		r.answerIntents(ctx, m.calls, false)
		r.batch = append(m.records, r.batch...)
		r.calls = append(settledOnly(m.calls), r.calls...)
		r.answerFlushers(ctx, m.err)
		r.wakeIn(ctx, replayInterval)
		return
	case m.spooled:
		r.spooled, r.spoolFull = r.spooled+len(m.records), false
		r.answerIntents(ctx, m.calls, true)
		r.forget(ctx, m.records, store.ErrUnavailable)
	default:
		r.written += len(m.records)
		r.answerIntents(ctx, m.calls, true)
		r.forget(ctx, m.records, nil)
	}
	if m.replayErr != nil && !errors.Is(m.replayErr, store.ErrUnavailable) {
		r.log.Error("writing the spool back failed", zap.String("event", "spool_replay_failed"), zap.Error(m.replayErr))
	}
	r.write(ctx) // which, while the store is down, also leaves the tick for the next replay
}

// settledOnly are the settlements among calls.
func settledOnly(calls []*messages.Call) []*messages.Call {
	var out []*messages.Call
	for _, c := range calls {
		if store.Settled(c) {
			out = append(out, c)
		}
	}
	return out
}

// refusedCalls reports whether the store refused the calls of a batch (their ids among those refused).
func refusedCalls(calls []*messages.Call, ids []string) bool {
	for _, c := range calls {
		if slices.Contains(ids, c.CallId) {
			return true
		}
	}
	return false
}

// forget lets go of records that left the queue, and answers the feedback that waited on them: with
// the store's answer once it holds them, or with why it does not.
func (r *RecorderActor) forget(ctx actor.Context, records []*messages.Execution, failed error) {
	for _, rec := range records {
		if r.pending[rec.RequestId] == rec {
			delete(r.pending, rec.RequestId)
		}
		// In the spool (failed is ErrUnavailable then) a record survives a crash as well as in the store.
		stored := failed == nil || errors.Is(failed, store.ErrUnavailable)
		for _, pid := range r.durable[rec.RequestId] {
			ctx.Send(pid, &messages.RecordDurable{RequestId: rec.RequestId, Stored: stored})
		}
		delete(r.durable, rec.RequestId)
		asks := r.awaiting[rec.RequestId]
		delete(r.awaiting, rec.RequestId)
		for _, ask := range asks {
			if failed != nil {
				delete(r.judging, ask.req.RequestId)
				ctx.Send(ask.sender, feedbackResult(http.StatusServiceUnavailable, "the record store is unavailable; try again later"))
				continue
			}
			r.judge(ctx, ask, rec)
		}
	}
}

// judge applies feedback through the store's conditional update, off the actor; rec is the record when
// the recorder has it already.
func (r *RecorderActor) judge(ctx actor.Context, ask *feedbackAsk, rec *messages.Execution) {
	self, root, st, arms, now, node := ctx.Self(), ctx.ActorSystem().Root, r.store, r.deps.Dir.Arms, r.deps.now(), r.deps.NodeID
	go func() {
		done := &feedbackDone{ask: ask}
		defer func() { root.Send(self, done) }()
		bgctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rec == nil {
			err := safely(func() (err error) { rec, err = st.Get(bgctx, ask.req.RequestId); return err })
			switch {
			case errors.Is(err, store.ErrNotFound):
				done.result = feedbackNotFound
				return
			case err != nil:
				done.result = feedbackResult(http.StatusServiceUnavailable, "the record store is unavailable: "+err.Error())
				return
			}
		}
		if len(rec.Feedback) > 0 {
			done.result = feedbackTwice
			return
		}
		updates, err := FeedbackUpdates(rec, ask.req, arms)
		if err != nil {
			done.result = feedbackResult(http.StatusBadRequest, err.Error())
			return
		}
		var applied bool
		err = safely(func() (err error) {
			applied, err = st.SetFeedback(bgctx, ask.req.RequestId, store.Feedback{Updates: updates, At: now, NodeID: node})
			return err
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			done.result = feedbackNotFound
		case err != nil:
			done.result = feedbackResult(http.StatusServiceUnavailable, "the record store is unavailable: "+err.Error())
		case !applied:
			done.result = feedbackTwice
		default:
			done.result, done.updates = &messages.FeedbackResult{Status: http.StatusOK, Updates: updates}, updates
		}
	}()
}

// write starts the next write when none is in flight: the batch to the store, or, while the store is
// down, the batch to the spool and (at most once a second) the spool back to the store. Flushes are
// answered once nothing is left to write.
func (r *RecorderActor) write(ctx actor.Context) {
	if r.writing {
		return
	}
	now := r.deps.now()
	replay := r.down && now.Sub(r.lastReplay) >= replayInterval
	if r.down && !replay {
		// Every write while the store is down must leave a tick for the next replay: without one, a
		// recorder that receives nothing more would never try the store again.
		r.wakeIn(ctx, r.lastReplay.Add(replayInterval).Sub(now))
	}
	if len(r.batch) == 0 && len(r.calls) == 0 && !replay {
		r.answerFlushers(ctx, nil)
		return
	}
	if replay {
		r.lastReplay = now
	}
	b := store.Batch{Records: r.batch, Calls: r.calls}
	r.batch, r.calls = nil, nil
	r.writing = true
	self, root, st, sp, down := ctx.Self(), ctx.ActorSystem().Root, r.store, r.spool, r.down
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res := &batchWritten{records: b.Records, calls: b.Calls, down: down}
		defer func() { root.Send(self, res) }()
		some := len(b.Records) > 0 || len(b.Calls) > 0
		if !down && some {
			res.err = safely(func() error { return st.Write(wctx, b) })
			if sp == nil || !errors.Is(res.err, store.ErrUnavailable) {
				return
			}
			res.down = true
		}
		if replay {
			// The spool first, so the order holds; once it is empty, the batch goes straight to the store.
			res.replayed, res.down, res.replayErr = replaySpool(wctx, st, sp)
			if !res.down && some {
				res.err = safely(func() error { return st.Write(wctx, b) })
				if !errors.Is(res.err, store.ErrUnavailable) {
					return
				}
				res.down = true
			}
		}
		if some {
			// The calls first, on their own: a spool too full for records still has room for them.
			if len(b.Calls) > 0 {
				calls := make([]spool.Entry, len(b.Calls))
				for i, c := range b.Calls {
					calls[i].Call = c
				}
				res.callsErr = sp.Append(calls)
			}
			if len(b.Records) > 0 {
				if err := sp.Append(spool.Records(b.Records)); err != nil {
					res.spoolErr = err
					return
				}
			}
			res.err, res.spooled = nil, res.callsErr == nil
			if res.callsErr != nil {
				res.spoolErr = res.callsErr
			}
		}
	}()
}

// replaySpool writes the spool back to the store in order, and reports whether the store is still down.
// Records the store refuses for their content are skipped: writing them again cannot help.
func replaySpool(ctx context.Context, st store.Store, sp *spool.Spool) (int, bool, error) {
	n := 0
	for {
		entries, off, err := sp.Peek(replayBatch)
		if err != nil {
			return n, true, err
		}
		if len(entries) == 0 {
			return n, false, nil
		}
		var b store.Batch
		for _, e := range entries {
			if e.Call != nil {
				b.Calls = append(b.Calls, e.Call)
			} else {
				b.Records = append(b.Records, e.Record)
			}
		}
		err = safely(func() error { return st.Write(ctx, b) })
		var rejected *store.RejectedError
		if err != nil && !errors.As(err, &rejected) {
			return n, true, err
		}
		if err := sp.Commit(off, len(entries)); err != nil {
			return n, true, err
		}
		n += len(b.Records)
	}
}

func (r *RecorderActor) answerFlushers(ctx actor.Context, err error) {
	if len(r.flushers) == 0 || (err == nil && (r.writing || len(r.batch) > 0 || len(r.calls) > 0)) {
		return
	}
	if err == nil && (len(r.held) > 0 || len(r.settled) > 0 || (len(r.open) > 0 && r.deps.now().Before(r.flushBy))) {
		r.wakeIn(ctx, settleTick) // calls still settling: they go with the flush
		return
	}
	f := &messages.Flushed{Written: int32(r.written), Spooled: int32(r.spooled)}
	if err != nil {
		f.Error = err.Error()
	}
	for _, p := range r.flushers {
		ctx.Send(p, f)
	}
	r.flushers = nil
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
