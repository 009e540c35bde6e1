package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/arms"
	"os"
	"path/filepath"
	"time"

	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/adapters/store/postgres"
	"github.com/conclave-ai/conclave/internal/adapters/store/spool"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// StoreOpenTimeout bounds connecting to the database and loading what was learned at start.
const StoreOpenTimeout = 30 * time.Second

// openStore opens the store the configuration names: PostgreSQL with its spool when DATABASE_URL is
// set, else the memory store (unless Options gave one).
func (e *Engine) openStore() error {
	cfg := e.cfg
	switch {
	case e.store != nil:
		return nil
	case !cfg.DatabaseURL.Set():
		e.store = store.NewMemory(cfg.Records.Max, cfg.Records.MaxBytes)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), StoreOpenTimeout)
	defer cancel()
	pg, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{})
	if err != nil {
		return err
	}
	path := cfg.SpoolPath
	if path == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			pg.Close()
			return fmt.Errorf("spool: no spool_path and no cache directory: %w", err)
		}
		path = filepath.Join(dir, "conclave", "spool-"+cfg.NodeID+".records")
	}
	sp, err := spool.Open(path, cfg.SpoolMaxBytes)
	if err != nil {
		pg.Close()
		return err
	}
	e.store, e.spool = pg, sp
	e.log.Info("records go to PostgreSQL", zap.String("event", "store_opened"), zap.String("store", "postgres"),
		zap.String("database", pg.Where()), zap.String("spool", path))
	return nil
}

// loadArms publishes on the board what the store learned before this start.
func (e *Engine) loadArms(board *arms.Board) error {
	l, ok := e.store.(store.Learning)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), StoreOpenTimeout)
	defer cancel()
	learned, err := l.LoadArms(ctx, store.LoadOptions{Prior: bandit.DefaultPrior, Learning: bandit.UpdateConfig{Discount: e.cfg.Discount},
		Lookback: peerLookback})
	if err != nil {
		return fmt.Errorf("load what was learned: %w", err)
	}
	arms := learned.Arms
	board.Seed(arms)
	e.peers = newPeerCursor(learned.Through, learned.Recent)
	var pulls int64
	for _, a := range arms {
		if a.Category != bandit.AllCategories {
			pulls += a.Pulls
		}
	}
	e.log.Info("learned arms loaded", zap.String("event", "arms_loaded"), zap.Int("arms", len(arms)), zap.Int64("rewards", pulls))
	return nil
}

// peerRewardsBatch bounds one read of the other controllers' rewards; a full batch is followed by the
// next at once.
const peerRewardsBatch = 5000

// peerLookback is how far below the highest reward read each read looks again: rewards are numbered
// when their transaction starts and seen when it commits, so a batch still committing holds numbers
// below ones already read. A batch is at most a few hundred rewards.
const peerLookback = 2000

// peerCursor is where the reading of other controllers' rewards stands: the highest reward read and
// the ones read within peerLookback below it, so none is folded twice and none is skipped.
type peerCursor struct {
	high int64
	seen map[int64]bool
}

func newPeerCursor(through int64, recent []int64) *peerCursor {
	c := &peerCursor{high: through, seen: make(map[int64]bool, len(recent))}
	for _, id := range recent {
		c.seen[id] = true
	}
	return c
}

// from is the position the next read starts after.
func (c *peerCursor) from() int64 { return max(c.high-peerLookback, 0) }

// take keeps the rewards not read before, and moves the cursor past them.
func (c *peerCursor) take(rs []store.Reward) []store.Reward {
	fresh := rs[:0:0]
	for _, r := range rs {
		if !c.seen[r.ID] {
			c.seen[r.ID] = true
			fresh = append(fresh, r)
		}
		c.high = max(c.high, r.ID)
	}
	for id := range c.seen {
		if id <= c.from() {
			delete(c.seen, id)
		}
	}
	return fresh
}

// foldPeerRewards gives the arms, every interval, the rewards other controllers sharing the database
// wrote since the last read, in the order they were written. A failed read is logged once and retried
// at the next interval.
func (e *Engine) foldPeerRewards(ctx context.Context, l store.Learning, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			rs, err := l.RewardsSince(ctx, e.peers.from(), e.cfg.NodeID, peerRewardsBatch)
			if err != nil {
				if !failing && ctx.Err() == nil {
					e.log.Warn("other controllers' rewards could not be read", zap.String("event", "peer_rewards_failed"), zap.Error(err))
				}
				failing = true
				break
			}
			failing = false
			fresh := e.peers.take(rs)
			for _, r := range fresh {
				actors.Reward(e.system.Root, e.deps.Dir.Bandit, &messages.Reward{Model: r.Model, Category: r.Category, Reward: r.Reward,
					Reason: r.Reason, RequestId: r.RequestID})
			}
			if len(fresh) > 0 {
				if ce := e.log.Check(zap.DebugLevel, "peer rewards folded"); ce != nil {
					ce.Write(zap.String("event", "peer_rewards"), zap.Int("rewards", len(fresh)), zap.Int64("through", e.peers.high))
				}
			}
			// A full batch of rewards new to the cursor may have more behind it.
			if len(rs) < peerRewardsBatch || len(fresh) == 0 {
				break
			}
		}
	}
}

func (e *Engine) closeStore() error {
	err := e.store.Close()
	if e.spool != nil {
		err = errors.Join(err, e.spool.Close())
	}
	return err
}

// SyncWait bounds how long a read of the store waits for the records and calls handed to the
// recorder before it to be written.
const SyncWait = 5 * time.Second

// Sync returns once the records and calls of the requests answered before it are in the store (read
// your writes: the recorder writes them in batches, every actors.ShipInterval), or says why not.
func (e *Engine) Sync(ctx context.Context) error {
	res, err := askActor(ctx, e.system, e.deps.Dir.Recorder, &actors.Sync{}, SyncWait)
	if err != nil {
		return err
	}
	if s, ok := res.(*actors.Synced); ok {
		return s.Err
	}
	return fmt.Errorf("sync: unexpected reply %T", res)
}

// askActor asks an actor a question and returns its answer, waiting at most wait and never past ctx's
// deadline.
func askActor(ctx context.Context, system *actor.ActorSystem, pid *actor.PID, question any, wait time.Duration) (any, error) {
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	if wait <= 0 {
		return nil, context.DeadlineExceeded
	}
	return system.Root.RequestFuture(pid, question, wait).Result()
}

// Executions lists records, newest first, the ones answered before among them.
func (e *Engine) Executions(ctx context.Context, f store.Filter) (store.Page, error) {
	_ = e.Sync(ctx) // a store that is away answers the list with why
	return e.store.List(ctx, f)
}

// Analyst returns the store's analysis, or nil when the store has none (the memory store). Each of
// its reads comes after the records of the requests answered before it are written.
func (e *Engine) Analyst() store.Analyst {
	a, ok := e.store.(store.Analyst)
	if !ok {
		return nil
	}
	return syncedAnalyst{a: a, sync: e.Sync}
}

// syncedAnalyst is a store's analysis read after a Sync.
type syncedAnalyst struct {
	a    store.Analyst
	sync func(context.Context) error
}

func (s syncedAnalyst) Models(ctx context.Context, category string, limit int) ([]store.ModelPerformance, error) {
	_ = s.sync(ctx)
	return s.a.Models(ctx, category, limit)
}

func (s syncedAnalyst) Cost(ctx context.Context, since, until time.Time) ([]store.ProviderCost, []store.RequestCost, error) {
	_ = s.sync(ctx)
	return s.a.Cost(ctx, since, until)
}

func (s syncedAnalyst) Trace(ctx context.Context, requestID string) ([]store.TraceStep, error) {
	_ = s.sync(ctx)
	return s.a.Trace(ctx, requestID)
}

func (s syncedAnalyst) Latency(ctx context.Context) ([]store.PhaseLatency, []store.ProviderTimeouts, error) {
	_ = s.sync(ctx)
	return s.a.Latency(ctx)
}
