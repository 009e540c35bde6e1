package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/books"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/execution"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// IntentWait bounds the wait for a call's intent to be durable: past it, the call is not sent.
const IntentWait = 10 * time.Second

// recorderJournal is the journal of calls through the recorder, which writes intents at once and
// settlements with their records.
type recorderJournal struct {
	system   *actor.ActorSystem
	recorder *actor.PID
	// durable says intents are written to a spool before a call is sent; without one (the memory
	// store) an intent is handed over and the call goes at once: no store outlives the process.
	durable bool
	// settled hears each settlement at once (the embedded default charges its memory key store).
	settled func(*messages.Call)
}

// Open implements books.Journal.
func (j recorderJournal) Open(ctx context.Context, c *messages.Call) error {
	if !j.durable {
		// A copy: the meter writes the settlement into its entry while the recorder may still read this.
		j.system.Root.Send(j.recorder, proto.Clone(c).(*messages.Call))
		return nil
	}
	res, err := askActor(ctx, j.system, j.recorder, c, IntentWait)
	if err != nil {
		return fmt.Errorf("journal %s: %w", c.CallId, err)
	}
	if d, ok := res.(*messages.RecordDurable); !ok || !d.Stored {
		return errors.New("neither the database nor the spool took the intent")
	}
	return nil
}

// Settle implements books.Journal.
func (j recorderJournal) Settle(c *messages.Call) {
	if j.settled != nil && c.KeyId != "" {
		j.settled(c)
	}
	j.system.Root.Send(j.recorder, c)
}

// openBooks makes the keys' budget ledger: in Redis, shared by every controller, with this process's
// memory while Redis is lost; in memory alone without Redis.
func (e *Engine) openBooks() {
	e.runID = uuid.NewString()
	local := books.NewLocal(e.deps.Clock)
	e.budgets = local
	if e.redis != nil {
		shared := books.NewShared(e.redis, e.cfg.RedisPrefix)
		e.budgets = books.NewFailover(shared, local, e.deps.Clock, func(sharedNow bool, err error) {
			if sharedNow {
				e.log.Info("keys' budgets are held in Redis again", zap.String("event", "budgets_shared"))
			} else {
				e.log.Warn("Redis lost: keys' budgets are held in this controller's memory", zap.String("event", "budgets_local"), zap.Error(err))
			}
		})
	}
	if d, ok := e.cfg.Pricing.Default(); ok {
		e.keys.defaultPrice = &d
	}
	e.books = e.meter(nil)
}

// meter puts the books around a worker's transport (nil: the engine's own calls, which use Open and
// Close).
func (e *Engine) meter(t fleet.Transport) *books.Meter {
	journal := recorderJournal{system: e.system, recorder: e.deps.Dir.Recorder, durable: e.spool != nil}
	if e.keys.memory != nil {
		// Charged as the call settles, so that the key's spend shows it before the answer: the memory
		// store writes records a moment later.
		journal.settled = e.keys.charge
	}
	return &books.Meter{Transport: t, Budgets: e.budgets, Journal: journal,
		Accounts: e.keys, Pricing: books.Pricing{Models: func(id string) (catalog.Model, bool) { return e.catalog.Load().Get(id) },
			Default: e.keys.defaultPrice}, Clock: e.deps.Clock, Node: e.cfg.NodeID, RunID: e.runID}
}

// runBooks keeps the books' background work going until ctx ends: the renewal of this controller's
// holds in Redis, the key and team caches' refresh, and the word of keys changed on other controllers.
func (e *Engine) runBooks(ctx context.Context, keyRefresh time.Duration) {
	if r, ok := e.budgets.(interface{ Run(context.Context) }); ok {
		e.background.Go(func() { r.Run(ctx) })
	}
	failing := false
	if j, ok := e.store.(store.Journal); ok {
		e.background.Go(func() { e.recoverCalls(ctx, j) })
	}
	e.background.Go(func() {
		e.keys.cache.Run(ctx, keyRefresh, func(err error) {
			if err == nil { // the teams with the keys: they are few, and read whole
				err = e.keys.refreshTeams(ctx)
			}
			switch {
			case err != nil && !failing:
				e.log.Warn("the keys could not be read again: this controller serves the keys it has", zap.String("event", "keys_stale"), zap.Error(err))
			case err == nil && failing:
				e.log.Info("the keys are read again", zap.String("event", "keys_fresh"))
			}
			failing = err != nil
		})
	})
}

// Leases of controllers' runs in the journal: a controller renews the lease of its run every
// NodeRenew while it runs; once NodeLease has passed without a renewal, another controller (or a later
// run of the same one) settles the calls it left open, at their reservations, and records their
// requests as interrupted.
const (
	NodeLease = 20 * time.Second
	NodeRenew = 5 * time.Second
	// recoverBatch bounds the calls settled in one write.
	recoverBatch = 1000
)

// recoverCalls holds this run's lease and settles the calls dead runs left open, until ctx ends. It
// settles only once this run has held its lease without a break for NodeLease (after an outage of the
// database, every live controller renews its lease first), and once what its spool held at the start
// is in the store (it may hold the settlements of an earlier run's calls).
func (e *Engine) recoverCalls(ctx context.Context, j store.Journal) {
	var since time.Time // when this run's lease was last taken after a failure
	caughtUp := e.spool == nil
	t := time.NewTicker(NodeRenew)
	defer t.Stop()
	for {
		now := time.Now()
		if err := j.Lease(ctx, e.cfg.NodeID, e.runID, NodeLease); err != nil {
			since = time.Time{}
		} else {
			if since.IsZero() {
				since = now
			}
			if !caughtUp {
				caughtUp = e.Sync(ctx) == nil
			}
			if caughtUp && now.Sub(since) >= NodeLease {
				e.settleInterrupted(ctx, j)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// settleInterrupted settles what dead runs left open.
func (e *Engine) settleInterrupted(ctx context.Context, j store.Journal) {
	for {
		open, err := j.Unsettled(ctx, e.runID, recoverBatch)
		if err != nil || len(open) == 0 {
			return
		}
		calls, records := execution.Interrupted(open, time.Now())
		if err := e.store.Write(ctx, store.Batch{Calls: calls, Records: records}); err != nil {
			e.log.Warn("the calls a stopped controller left open could not be settled", zap.String("event", "calls_recovery_failed"), zap.Error(err))
			return
		}
		var held money.USD
		nodes := map[string]bool{}
		for _, c := range open {
			held += money.USD(c.ReservedNanos)
			nodes[c.NodeId] = true
		}
		e.log.Warn("calls a stopped controller left open are settled at their reservations", zap.String("event", "calls_interrupted"),
			zap.Int("calls", len(open)), zap.Int("requests", len(records)), zap.Strings("nodes", slices.Sorted(maps.Keys(nodes))),
			zap.Stringer("charged", held))
		if len(open) < recoverBatch {
			return
		}
	}
}
