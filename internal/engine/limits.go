package engine

import (
	"context"
	"slices"
	"time"

	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit/redislimit"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"go.uber.org/zap"
)

// sharedLimits makes the providers' (and keys') limiters count in the Redis of REDIS_URL, each with a
// local limiter that counts while Redis is lost. A concurrency slot in Redis is a short lease this
// controller renews while its call runs (renewSlots), so a dead controller's slots are free again
// within redislimit.SlotLease.
func (e *Engine) sharedLimits(clk clock.Clock) (ratelimit.Factory, error) {
	client, err := redislimit.Open(e.cfg.RedisURL.Reveal())
	if err != nil {
		return nil, err
	}
	e.redis = client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		e.log.Warn("Redis does not answer: each provider counts its limits locally until it does", zap.String("event", "limiter_fallback"),
			zap.String("redis", client.Options().Addr), zap.Error(err))
	} else {
		e.log.Info("rate limits are shared in Redis", zap.String("event", "limits_shared"), zap.String("redis", client.Options().Addr))
	}
	lease := e.longestBound + actors.DefaultLeaseGrace
	return func(provider string, l ratelimit.Limits) ratelimit.Limiter {
		local := ratelimit.NewLocal(l, clk, lease)
		if l == (ratelimit.Limits{}) {
			return local // nothing to count
		}
		log := e.log.With(zap.String("provider", provider))
		shared := redislimit.New(client, provider, l, redislimit.Options{Prefix: e.cfg.RedisPrefix})
		if l.Concurrency > 0 {
			e.slotsMu.Lock()
			e.slots = append(e.slots, shared)
			e.slotsMu.Unlock()
		}
		return ratelimit.NewFailover(shared, local, clk, func(sharedNow bool, err error) {
			if sharedNow {
				log.Info("rate limits are shared again", zap.String("event", "limiter_shared"))
			} else {
				log.Warn("Redis lost: rate limits are counted locally", zap.String("event", "limiter_fallback"), zap.Error(err))
			}
		})
	}, nil
}

// renewSlots renews the leases of the concurrency slots this controller holds in Redis until ctx ends.
func (e *Engine) renewSlots(ctx context.Context) {
	t := time.NewTicker(redislimit.SlotRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.slotsMu.Lock()
			limiters := slices.Clone(e.slots)
			e.slotsMu.Unlock()
			for _, l := range limiters {
				rctx, cancel := context.WithTimeout(ctx, redislimit.SlotRenew)
				_ = l.Renew(rctx) // a failed renewal is made again at the next tick
				cancel()
			}
		}
	}
}
