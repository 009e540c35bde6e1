package actors

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/adapters/store/spool"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// write starts what is due and not out yet: without a spool, the batch to the store; with one, the
// batch to the spool, and the spool to the store. Flushes and syncs are answered once nothing they
// wait for is left.
func (r *RecorderActor) write(ctx actor.Context) {
	if r.spool == nil {
		r.writeBatch(ctx)
	} else {
		r.appendSpool(ctx)
		r.writeSpool(ctx)
	}
	r.answerSyncs(ctx)
	r.answerFlushers(ctx, nil)
}

// take empties the batch and the calls into a batch of the store.
func (r *RecorderActor) take() store.Batch {
	b := store.Batch{Records: r.batch, Calls: r.calls}
	r.batch, r.calls = nil, nil
	return b
}

// writeBatch writes the batch to the store, without a spool; while one write is out, what comes
// meanwhile goes together in the next (a group commit).
func (r *RecorderActor) writeBatch(ctx actor.Context) {
	if r.writing || (len(r.batch) == 0 && len(r.calls) == 0) {
		return
	}
	b := r.take()
	r.writing = true
	self, root, st := ctx.Self(), ctx.ActorSystem().Root, r.store
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res := &batchWritten{records: b.Records, calls: b.Calls}
		res.err = safely(func() error { return st.Write(wctx, b) })
		root.Send(self, res)
	}()
}

// applyWrite applies the outcome of a write of a batch without a spool.
func (r *RecorderActor) applyWrite(ctx actor.Context, m *batchWritten) {
	r.writing = false
	ids := requestIDs(m.records)
	var rejected *store.RejectedError
	switch {
	case errors.As(m.err, &rejected):
		r.log.Error("the store refused records", zap.String("event", "record_rejected"), zap.Strings("ids", rejected.IDs[:min(len(rejected.IDs), 20)]),
			zap.Int("refused", len(rejected.IDs)), zap.Error(rejected.Err))
		r.written += max(len(m.records)-len(rejected.IDs), 0)
		r.finished += int64(len(m.records) + len(m.calls))
		r.answerDurable(ctx, ids, true)
		r.forget(ctx, ids, nil)
	case m.err != nil:
		// Write them again on the next tick; the settlements carry money and are kept too.
		r.log.Error("writing execution records failed", zap.String("event", "record_write_failed"), zap.Int("records", len(m.records)), zap.Error(m.err))
		r.batch = append(m.records, r.batch...)
		r.calls = append(m.calls, r.calls...)
		r.answerFlushers(ctx, m.err)
		r.answerSyncs(ctx)
		r.wakeIn(ctx, replayInterval)
		return
	default:
		r.written += len(m.records)
		r.finished += int64(len(m.records) + len(m.calls))
		r.answerDurable(ctx, ids, true)
		r.forget(ctx, ids, nil)
	}
	r.write(ctx)
}

// appendSpool appends the batch to the spool, calls first; while one append is out, what comes
// meanwhile goes together in the next, synced once.
func (r *RecorderActor) appendSpool(ctx actor.Context) {
	records := r.deps.now().After(r.fullUntil)
	if r.appending || ((len(r.batch) == 0 || !records) && len(r.calls) == 0) {
		return
	}
	b := r.take()
	if !records { // the spool had no room for them: they wait for the store to take some of it
		r.batch, b.Records = b.Records, nil
	}
	r.appending = true
	self, root, sp := ctx.Self(), ctx.ActorSystem().Root, r.spool
	go func() {
		res := &appended{records: b.Records, calls: b.Calls}
		if len(b.Calls) > 0 {
			entries := make([]spool.Entry, len(b.Calls))
			for i, c := range b.Calls {
				entries[i].Call = c
			}
			res.callsErr = sp.Append(entries)
		}
		if len(b.Records) > 0 {
			res.recordsErr = sp.Append(spool.Records(b.Records))
		}
		root.Send(self, res)
	}()
}

// applyAppend applies the outcome of an append: what the spool took is durable; intents it refused
// are refused (their calls are not sent), settlements it refused are kept (they carry money), and
// records it refused wait in the queue, as far as it has room, for the spool to have some (their
// answers go out after DurableWait and say so); the rest are lost, counted and logged.
func (r *RecorderActor) applyAppend(ctx actor.Context, m *appended) {
	r.appending = false
	if err := errors.Join(m.callsErr, m.recordsErr); err != nil && !r.spoolFull {
		r.spoolFull = true
		r.log.Error("the spool refused records", zap.String("event", "spool_full"), zap.Int("records", len(m.records)),
			zap.Int("calls", len(m.calls)), zap.Error(err))
	} else if err == nil {
		r.spoolFull = false
	}
	if m.callsErr != nil {
		settled := settledOnly(m.calls)
		r.answerIntents(ctx, m.calls, false)
		r.finished += int64(len(m.calls) - len(settled))
		r.calls = append(settled, r.calls...)
	} else {
		r.answerIntents(ctx, m.calls, true)
	}
	ids := requestIDs(m.records)
	if m.recordsErr != nil {
		r.fullUntil = r.deps.now().Add(replayInterval)
		r.wakeIn(ctx, replayInterval)
		keep := m.records[:min(max(RecorderQueue-len(r.batch), 0), len(m.records))]
		r.batch = append(keep, r.batch...)
		if lost := requestIDs(m.records[len(keep):]); len(lost) > 0 {
			r.drop(len(lost), m.recordsErr)
			r.finished += int64(len(lost))
			r.answerDurable(ctx, lost, false)
			r.forget(ctx, lost, m.recordsErr)
		}
	} else {
		r.answerDurable(ctx, ids, true)
		for _, id := range ids {
			r.spooled[id] = true
		}
		if r.down || len(r.spooled) > RecorderQueue {
			// Reads go to the store, which says it is away, rather than memory holding what the spool does.
			r.forget(ctx, ids, store.ErrUnavailable)
		}
	}
	r.write(ctx)
}

// writeSpool writes the spool to the store when it is due: every ShipInterval while the store answers
// (at once when a spool's worth of a batch waits, or someone waits for it), every replayInterval
// while it does not.
func (r *RecorderActor) writeSpool(ctx actor.Context) {
	if r.writing {
		return
	}
	entries, _ := r.spool.Pending()
	if entries == 0 {
		return
	}
	every := ShipInterval
	urgent := entries >= replayBatch || len(r.awaiting) > 0 || len(r.syncs) > 0 || len(r.flushers) > 0
	if r.down {
		every, urgent = replayInterval, false
	}
	now := r.deps.now()
	if wait := r.lastWrite.Add(every).Sub(now); wait > 0 && !urgent {
		r.wakeIn(ctx, wait)
		return
	}
	r.lastWrite, r.writing = now, true
	self, root, st, sp := ctx.Self(), ctx.ActorSystem().Root, r.store, r.spool
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		root.Send(self, writeBack(wctx, st, sp, entries))
	}()
}

// writeBack writes up to limit entries of the spool to the store, in order, in batches of
// replayBatch, and takes them off the spool once the store holds them. Records the store refuses for
// their content are taken off too: writing them again cannot help.
func writeBack(ctx context.Context, st store.Store, sp *spool.Spool, limit int) *shipped {
	res := &shipped{}
	for res.entries < limit {
		entries, off, err := sp.Peek(min(replayBatch, limit-res.entries))
		if err != nil {
			res.err, res.down = err, true
			return res
		}
		if len(entries) == 0 {
			return res
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
		switch {
		case errors.As(err, &rejected):
			res.rejected = append(res.rejected, rejected.IDs...)
		case err != nil:
			res.err, res.down = err, true
			return res
		}
		if err := sp.Commit(off, len(entries)); err != nil {
			res.err, res.down = err, true
			return res
		}
		res.entries += len(entries)
		res.records = append(res.records, requestIDs(b.Records)...)
	}
	return res
}

// applyShip applies the outcome of a write of the spool to the store.
func (r *RecorderActor) applyShip(ctx actor.Context, m *shipped) {
	r.writing = false
	wasDown := r.down
	r.down = m.down
	r.finished += int64(m.entries)
	r.written += len(m.records) - len(m.rejected)
	switch {
	case r.down && !wasDown:
		n, _ := r.spool.Pending()
		r.log.Error("the record store is unavailable: records go to the spool", zap.String("event", "store_unavailable"),
			zap.String("spool", r.spool.Path()), zap.Int("spooled", n), zap.Error(m.err))
	case wasDown && !r.down:
		r.log.Info("the record store is back: the spool is written", zap.String("event", "store_available"), zap.Int("replayed", len(m.records)))
	}
	if m.err != nil && !errors.Is(m.err, store.ErrUnavailable) {
		r.log.Error("writing the spool back failed", zap.String("event", "spool_replay_failed"), zap.Error(m.err))
	}
	if len(m.rejected) > 0 {
		r.log.Error("the store refused records", zap.String("event", "record_rejected"), zap.Strings("ids", m.rejected[:min(len(m.rejected), 20)]),
			zap.Int("refused", len(m.rejected)))
	}
	if m.entries > 0 {
		r.fullUntil = time.Time{} // the spool has room again
	}
	r.forget(ctx, m.records, nil)
	if r.down && !wasDown {
		r.forget(ctx, mapKeys(r.spooled), m.err)
	}
	r.write(ctx)
}

// answerSyncs answers the syncs whose records and calls are all in the store, and, while the store is
// down, every sync.
func (r *RecorderActor) answerSyncs(ctx actor.Context) {
	if len(r.syncs) == 0 {
		return
	}
	var err error
	if r.down {
		err = store.ErrUnavailable
	}
	kept := r.syncs[:0]
	for _, s := range r.syncs {
		if err != nil || r.finished >= s.upTo {
			ctx.Send(s.pid, &Synced{Err: err})
			continue
		}
		kept = append(kept, s)
	}
	r.syncs = kept
}

// answerFlushers answers the flushes once nothing is left to write (or err says why it cannot be):
// the batch, the calls still settling (up to the flush's bound), and, while the store answers, the
// spool.
func (r *RecorderActor) answerFlushers(ctx actor.Context, err error) {
	if len(r.flushers) == 0 {
		return
	}
	if err == nil {
		if r.unwritten() {
			return
		}
		if len(r.held) > 0 || len(r.settled) > 0 || (len(r.open) > 0 && r.deps.now().Before(r.flushBy)) {
			r.wakeIn(ctx, settleTick) // calls still settling: they go with the flush
			return
		}
	}
	f := &messages.Flushed{Written: int32(r.written)}
	if r.spool != nil {
		n, _ := r.spool.Pending()
		f.Spooled = int32(n)
	}
	if err != nil {
		f.Error = err.Error()
	}
	for _, p := range r.flushers {
		ctx.Send(p, f)
	}
	r.flushers = nil
}

// unwritten reports whether anything handed over is still to be written: a write out, the batch, the
// calls, or (while the store answers) the spool.
func (r *RecorderActor) unwritten() bool {
	if r.writing || r.appending || len(r.batch) > 0 || len(r.calls) > 0 {
		return true
	}
	if r.spool != nil && !r.down {
		if n, _ := r.spool.Pending(); n > 0 {
			return true
		}
	}
	return false
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
