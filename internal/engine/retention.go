package engine

import (
	"context"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"go.uber.org/zap"
)

// UpkeepEvery is how often a store that keeps records in partitions by time is looked after: the
// partitions of the weeks ahead made, and with records.retention_days the weeks older than it
// dropped. Weeks are its unit; an hour is soon enough, and each controller doing it costs a query.
const UpkeepEvery = time.Hour

// keepRecords looks after the store's partitions, once at start and then every UpkeepEvery, until ctx
// ends.
func (e *Engine) keepRecords(ctx context.Context) {
	p, ok := e.store.(store.Partitioned)
	if !ok {
		return
	}
	keep := e.cfg.Records.Retention()
	e.background.Go(func() {
		t := time.NewTicker(UpkeepEvery)
		defer t.Stop()
		for {
			up, err := p.Upkeep(ctx, time.Now(), keep)
			switch {
			case err != nil && ctx.Err() == nil:
				e.log.Warn("the records' partitions could not be looked after; the next try is in an hour", zap.String("event", "records_upkeep_failed"),
					zap.Int("created", up.Created), zap.Strings("dropped", up.Dropped), zap.Error(err))
			case up.Created > 0 || len(up.Dropped) > 0 || up.Deleted > 0:
				e.log.Info("records' partitions looked after", zap.String("event", "records_upkeep"), zap.Int("created", up.Created),
					zap.Strings("dropped", up.Dropped), zap.Int64("deleted", up.Deleted), zap.Int("retention_days", e.cfg.Records.RetentionDays))
			}
			if len(up.Kept) > 0 {
				e.log.Warn("old weeks of the journal are kept for the calls they hold that are not settled", zap.String("event", "journal_kept"),
					zap.Strings("partitions", up.Kept))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}
