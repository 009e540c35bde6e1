package engine

import (
	"context"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
)

// partitionedStore is the memory store with the upkeep of a partitioned one, which it reports.
type partitionedStore struct {
	*store.Memory
	kept chan time.Duration
}

func (p partitionedStore) Upkeep(_ context.Context, _ time.Time, keep time.Duration) (store.Upkeep, error) {
	p.kept <- keep
	return store.Upkeep{}, nil
}

// A store kept in partitions is looked after from the start, with records.retention_days.
func TestTheEngineKeepsRecordsForTheirRetention(t *testing.T) {
	cfg := config.Default()
	cfg.NodeID, cfg.Records.RetentionDays = "node-a", 30
	s := partitionedStore{Memory: store.NewMemory(0, 0), kept: make(chan time.Duration, 1)}
	e, err := New(Options{Config: cfg, Log: zap.NewNop(), Store: s})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	select {
	case keep := <-s.kept:
		if keep != 30*24*time.Hour {
			t.Fatalf("records kept %v, want 30 days", keep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no upkeep at start")
	}
}
