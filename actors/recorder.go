package actors

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
// in batches, and applies callers' feedback. Records it holds but has not written to the store yet
// answer reads too; because a coordinator hands over its record before it answers, a caller that asks
// for its execution right after the answer always finds it, and reads of the store can wait for what
// was handed over before them (Sync).
//
// With a spool (a store that outlives the process), the spool is the write-ahead log: intents, records
// and settlements are appended to it, and synced, before they count as durable (a call is sent, an
// answer given, only then), and the spool is written to the store every ShipInterval, in order, in
// transactions of up to replayBatch entries. The store's cost per request is then that of a batch,
// however few requests are in flight. While the store is unreachable the spool grows and is written
// back once a second; the store takes each record and each settlement once, so nothing is written or
// charged twice, even when a spool is written back again after a crash. Without a spool (the memory
// store), batches go to the store directly.
//
// The journal: a call's intent is written at once and answered when durable; its settlement comes
// from the call's meter when it ends. A request's record waits for the settlements of its calls still
// open (a call cancelled as collection ended settles a moment later, with what it cost), at most
// SettleWait, and goes with them: the record and the journal agree.
//
// Its queue is bounded: records beyond it are dropped, counted and logged; records the spool has no
// room for wait in it.
type RecorderActor struct {
	deps     *Deps
	store    store.Store
	spool    *spool.Spool // nil: no spool (the memory store cannot be unreachable)
	log      *zap.Logger
	batch    []*messages.Execution
	calls    []*messages.Call               // journaled calls to write with the next batch
	pending  map[string]*messages.Execution // queued, held for their calls, or not in the store yet
	judging  map[string]bool                // feedback being applied, to refuse a concurrent second one
	awaiting map[string][]*feedbackAsk      // feedback on a record still on its way to the store
	durable  map[string][]*Answer           // the answers that wait for their record to be durable

	// spooled are the records appended to the spool and not written to the store yet, kept in pending
	// for reads while the store answers.
	spooled map[string]bool
	// appending is true while an append to the spool is out; writing while a write to the store is.
	appending, writing bool
	// down is true while the store is unreachable: the spool is written back once a second.
	down      bool
	lastWrite time.Time // when the last write of the spool to the store began
	spoolFull bool      // the spool refused entries since it last took some
	fullUntil time.Time // records wait until then to be appended again: the spool had no room
	tick      func()
	tickAt    time.Time
	flushers  []*actor.PID
	// handed counts the entries (records and calls) handed to the recorder for writing, finished those
	// in the store or given up on; a Sync waits for finished to reach handed as it was.
	handed, finished int64
	syncs            []syncWait
	written          int
	dropped          int

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
	// ShipInterval is how often the spool is written to the store while it answers: what came in
	// meanwhile goes in one transaction.
	ShipInterval = 50 * time.Millisecond
	// RecorderQueue is the most records the recorder holds before it drops new ones.
	RecorderQueue = 10000
	// replayInterval is how often a store that is down is tried again.
	replayInterval = time.Second
	replayBatch    = 256
)

type flushTick struct{}

// Sync asks the recorder to answer (with Synced) once the records and calls handed to it before are in
// the store, or the store is found unreachable: a read of the store after it sees them.
type Sync struct{}

// Synced answers Sync; Err says why the store does not hold them yet.
type Synced struct{ Err error }

type syncWait struct {
	upTo int64
	pid  *actor.PID
}

// batchWritten is the outcome of a write of a batch to the store, without a spool.
type batchWritten struct {
	records []*messages.Execution
	calls   []*messages.Call
	err     error
}

// appended is the outcome of an append to the spool: callsErr says the calls could not go, recordsErr
// the records (calls have room of their own, so records may fail alone).
type appended struct {
	records              []*messages.Execution
	calls                []*messages.Call
	callsErr, recordsErr error
}

// shipped is the outcome of a write of the spool to the store: the entries taken off the spool, the
// records among them, those the store refused for their content, and whether the store is down.
type shipped struct {
	entries  int
	records  []string
	rejected []string
	down     bool
	err      error
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

// Answer is a request's record and its answer, handed to the recorder by the coordinator when answers
// wait for their records (a spool): the recorder gives Exec to To, the caller's address, once the
// record is durable. A reply address in a message, since the recorder answers on the coordinator's
// behalf: one round trip instead of a second question from the caller. In-process only.
type Answer struct {
	Exec  *messages.Execution
	To    *actor.PID
	since time.Time // when the recorder took it (wall clock)
}

// DurableWait bounds how long an answer waits for its record to be written; past it the answer goes
// out anyway, and the record follows when the store takes it.
const DurableWait = 5 * time.Second

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
		r.started(ctx)
	case *messages.Execution:
		r.record(ctx, m)
	case *messages.Call:
		r.journal(ctx, m)
	case flushTick:
		r.tick = nil
		r.release(ctx)
		r.overdueAnswers(ctx)
		r.write(ctx)
	case *batchWritten:
		r.applyWrite(ctx, m)
	case *appended:
		r.applyAppend(ctx, m)
	case *shipped:
		r.applyShip(ctx, m)
	case *Sync:
		r.syncs = append(r.syncs, syncWait{upTo: r.handed + int64(len(r.batch)+len(r.calls)), pid: ctx.Sender()})
		r.write(ctx)
	case *messages.GetExecution:
		r.lookup(ctx, m)
	case *messages.RecordFeedback:
		r.feedback(ctx, m)
	case *feedbackDone:
		r.feedbackDone(ctx, m)
	case *Answer:
		r.answer(ctx, m)
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
		for id := range r.durable { // nobody will write their records now
			r.answerDurable(ctx, []string{id}, false)
		}
	default:
		r.deps.unknown(KindRecorder, m)
	}
}

// started makes the recorder's maps and writes back first what an earlier run left in the spool.
func (r *RecorderActor) started(ctx actor.Context) {
	r.log = r.deps.Log.With(zap.String("actor", "recorder"))
	r.pending, r.judging, r.awaiting = map[string]*messages.Execution{}, map[string]bool{}, map[string][]*feedbackAsk{}
	r.durable = map[string][]*Answer{}
	r.intents, r.open, r.openOf = map[string]*actor.PID{}, map[string]string{}, map[string]int{}
	r.held, r.settled, r.spooled = map[string]*heldRecord{}, map[string]*settlements{}, map[string]bool{}
	if r.spool == nil {
		return
	}
	if n, _ := r.spool.Pending(); n > 0 { // left by an earlier run: written back first, and waited for by a Sync
		r.handed = int64(n)
		r.log.Warn("records left in the spool are written back", zap.String("event", "spool_replay"), zap.Int("entries", n),
			zap.String("spool", r.spool.Path()))
		r.wakeIn(ctx, 0)
	}
}

// record takes a request's record: queued for the store, or held while calls of its request are still
// open; dropped when the queue is full. It reports whether it took it.
func (r *RecorderActor) record(ctx actor.Context, m *messages.Execution) bool {
	if len(r.batch) >= RecorderQueue {
		r.drop(1, errors.New("the recorder's queue is full"))
		return false
	}
	r.pending[m.RequestId] = m
	if r.openOf[m.RequestId] > 0 {
		r.held[m.RequestId] = &heldRecord{rec: m, since: r.deps.now()}
		r.wakeIn(ctx, recordFlushInterval)
		return true
	}
	r.enqueue(ctx, m)
	return true
}

// answer takes a request's record and its answer, and gives the answer to its caller once the record
// is durable (in the spool or the store): at once when the queue refused it, and at the latest after
// DurableWait, saying so.
func (r *RecorderActor) answer(ctx actor.Context, a *Answer) {
	if !r.record(ctx, a.Exec) {
		r.deliver(ctx, a, false)
		return
	}
	a.since = time.Now()
	r.durable[a.Exec.RequestId] = append(r.durable[a.Exec.RequestId], a)
	r.wakeIn(ctx, DurableWait)
	// Written now, not at the next tick: while one write is out, the records that wait meanwhile go
	// together in the next (a group commit).
	r.write(ctx)
}

// deliver gives an answer to its caller; one whose record is not durable is logged.
func (r *RecorderActor) deliver(ctx actor.Context, a *Answer, durable bool) {
	if !durable {
		r.log.Warn("an answer goes out before its record is written", zap.String("event", "record_not_durable"),
			zap.String("request_id", a.Exec.RequestId))
	}
	ctx.Send(a.To, a.Exec)
}

// overdueAnswers gives the answers that waited DurableWait for their records to their callers.
func (r *RecorderActor) overdueAnswers(ctx actor.Context) {
	now := time.Now()
	for id, waiting := range r.durable {
		kept := waiting[:0]
		for _, a := range waiting {
			if now.Sub(a.since) >= DurableWait {
				r.deliver(ctx, a, false)
			} else {
				kept = append(kept, a)
			}
		}
		if len(kept) == 0 {
			delete(r.durable, id)
		} else {
			r.durable[id] = kept
			r.wakeIn(ctx, DurableWait-now.Sub(kept[0].since))
		}
	}
}

// lookup answers a record asked for by id: from what the recorder holds, else from the store, off the
// actor.
func (r *RecorderActor) lookup(ctx actor.Context, m *messages.GetExecution) {
	if rec, ok := r.pending[m.RequestId]; ok {
		ctx.Respond(&messages.ExecutionLookup{Execution: rec, Found: true})
		return
	}
	sender, root, st, shared := ctx.Sender(), ctx.ActorSystem().Root, r.store, r.spool != nil
	go func() {
		rec, err := getRecord(context.Background(), st, m.RequestId, shared)
		res := &messages.ExecutionLookup{Execution: rec, Found: err == nil}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			res.Unavailable = err.Error()
		}
		root.Send(sender, res)
	}()
}

// feedback takes a caller's feedback on a request, once.
func (r *RecorderActor) feedback(ctx actor.Context, m *messages.RecordFeedback) {
	if r.judging[m.RequestId] {
		ctx.Respond(feedbackTwice)
		return
	}
	r.judging[m.RequestId] = true
	ask := &feedbackAsk{req: m, sender: ctx.Sender()}
	if _, ok := r.pending[m.RequestId]; ok {
		// The store must hold the record before its feedback: write it now rather than at the next
		// tick, and answer once it is written.
		r.awaiting[m.RequestId] = append(r.awaiting[m.RequestId], ask)
		r.write(ctx)
		return
	}
	r.judge(ctx, ask, nil)
}

// feedbackDone teaches the arms what a feedback the store took says, and answers its caller.
func (r *RecorderActor) feedbackDone(ctx actor.Context, m *feedbackDone) {
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
}

// check says why the recorder drops a message, or "": a record and a call of the journal need the
// ids the recorder keeps them by (a record its request's, a call its own and its request's).
func (r *RecorderActor) check(ctx actor.Context) string {
	switch m := ctx.Message().(type) {
	case *messages.GetExecution, *messages.RecordFeedback, *messages.Flush, *Sync:
		if ctx.Sender() == nil {
			return DropNoReplyTo // its answer would go to no address
		}
	case *messages.Execution:
		if m.GetRequestId() == "" {
			return DropNoRequestID
		}
	case *messages.Call:
		if m.GetCallId() == "" || m.GetRequestId() == "" {
			return DropMalformed
		}
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
		r.handed += int64(len(st.calls))
	}
	r.batch = append(r.batch, rec)
	r.handed++
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
			if ctx.Sender() != nil { // nothing outlives the process: an intent counts as held at once
				ctx.Respond(&messages.RecordDurable{RequestId: c.CallId, Stored: true})
			}
			return
		}
		r.calls = append(r.calls, c)
		r.handed++
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
			r.handed += int64(len(st.calls))
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
	at := r.deps.now().Add(d)
	if r.tick != nil {
		if !r.tickAt.After(at) {
			return
		}
		r.tick()
	}
	r.tick, r.tickAt = r.deps.Timers.SendOnce(d, ctx.Self(), flushTick{}), at
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

// answerDurable gives the answers that waited for these records to their callers: the records are
// durable (in the store or the spool), or will not be.
func (r *RecorderActor) answerDurable(ctx actor.Context, ids []string, stored bool) {
	for _, id := range ids {
		for _, a := range r.durable[id] {
			r.deliver(ctx, a, stored)
		}
		delete(r.durable, id)
	}
}

// forget lets go of records that are in the store (failed nil) or will not be held here any longer,
// and answers the feedback that waited on them: with the store's answer once it holds them, or with
// why it does not.
func (r *RecorderActor) forget(ctx actor.Context, ids []string, failed error) {
	for _, id := range ids {
		rec := r.pending[id]
		delete(r.pending, id)
		delete(r.spooled, id)
		asks := r.awaiting[id]
		delete(r.awaiting, id)
		for _, ask := range asks {
			if failed != nil {
				delete(r.judging, id)
				ctx.Send(ask.sender, feedbackResult(http.StatusServiceUnavailable, "the record store is unavailable; try again later"))
				continue
			}
			r.judge(ctx, ask, rec)
		}
	}
}

// requestIDs are the ids of records.
func requestIDs(records []*messages.Execution) []string {
	ids := make([]string, len(records))
	for i, r := range records {
		ids[i] = r.RequestId
	}
	return ids
}

// judge applies feedback through the store's conditional update, off the actor; rec is the record when
// the recorder has it already.
func (r *RecorderActor) judge(ctx actor.Context, ask *feedbackAsk, rec *messages.Execution) {
	self, root, st, arms, now, node := ctx.Self(), ctx.ActorSystem().Root, r.store, r.deps.Dir.Arms, r.deps.now(), r.deps.NodeID
	shared := r.spool != nil
	go func() {
		done := &feedbackDone{ask: ask}
		defer func() { root.Send(self, done) }()
		bgctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rec == nil {
			var err error
			rec, err = getRecord(bgctx, st, ask.req.RequestId, shared)
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

// PeerWriteWait is how long a read that does not find a record asks again: another controller writes
// the records of the requests it answered to the store within its ShipInterval and the write's time.
const PeerWriteWait = 4 * ShipInterval

// getRecord reads a record from the store; from a store other controllers write too (shared), it
// asks again once after PeerWriteWait when the record is not there.
func getRecord(ctx context.Context, st store.Store, id string, shared bool) (*messages.Execution, error) {
	var rec *messages.Execution
	err := safely(func() (err error) { rec, err = st.Get(ctx, id); return err })
	if !shared || !errors.Is(err, store.ErrNotFound) {
		return rec, err
	}
	select {
	case <-ctx.Done():
		return nil, err
	case <-time.After(PeerWriteWait):
	}
	err = safely(func() (err error) { rec, err = st.Get(ctx, id); return err })
	return rec, err
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
