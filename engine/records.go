package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/bandit"
	"github.com/conclave-ai/conclave/store"
	"github.com/conclave-ai/conclave/store/postgres"
	"github.com/conclave-ai/conclave/store/spool"
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
		e.store = store.NewMemory(cfg.Records, cfg.RecordsMaxBytes)
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
func (e *Engine) loadArms(board *actors.ArmBoard) error {
	l, ok := e.store.(store.Learning)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), StoreOpenTimeout)
	defer cancel()
	arms, err := l.LoadArms(ctx, store.LoadOptions{Prior: bandit.DefaultPrior, Learning: bandit.UpdateConfig{Discount: e.cfg.Discount}})
	if err != nil {
		return fmt.Errorf("load what was learned: %w", err)
	}
	board.Seed(arms)
	var pulls int64
	for _, a := range arms {
		if a.Category != actors.AllCategories {
			pulls += a.Pulls
		}
	}
	e.log.Info("learned arms loaded", zap.String("event", "arms_loaded"), zap.Int("arms", len(arms)), zap.Int64("rewards", pulls))
	return nil
}

func (e *Engine) closeStore() error {
	err := e.store.Close()
	if e.spool != nil {
		err = errors.Join(err, e.spool.Close())
	}
	return err
}

// Executions lists records, newest first.
func (e *Engine) Executions(ctx context.Context, f store.Filter) (store.Page, error) {
	return e.store.List(ctx, f)
}

// Analyst returns the store's analysis, or nil when the store has none (the memory store).
func (e *Engine) Analyst() store.Analyst {
	a, _ := e.store.(store.Analyst)
	return a
}
