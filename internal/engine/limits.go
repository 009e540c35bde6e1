package engine

import (
	"context"
	"time"

	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit/redislimit"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"go.uber.org/zap"
)

// sharedLimits makes the providers' limiters count in the Redis of REDIS_URL, each with a local
// limiter that counts while Redis is lost. A concurrency slot's lease outlasts the longest call a
// blueprint allows, so only a dead controller's slots ever expire.
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
		shared := redislimit.New(client, provider, l, redislimit.Options{Prefix: e.cfg.RedisPrefix, Lease: lease})
		return ratelimit.NewFailover(shared, local, clk, func(sharedNow bool, err error) {
			if sharedNow {
				log.Info("rate limits are shared again", zap.String("event", "limiter_shared"))
			} else {
				log.Warn("Redis lost: rate limits are counted locally", zap.String("event", "limiter_fallback"), zap.Error(err))
			}
		})
	}, nil
}
