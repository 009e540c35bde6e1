package engine

import (
	"context"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/answercache"
	"github.com/conclave-ai/conclave/internal/core/exactcache"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// answers is the exact answer cache around routing: a request its caller, its key or its blueprint
// lets read the cache is answered from it when an identical one was answered within its time to live
// (exactcache decides what is identical and for how long), and a whole answer is kept for the next.
// A hit calls no model and costs nothing; its record names the request it came from and is handed to
// the recorder without waiting for it to be durable (it holds no money). The store fails open: a
// cache that cannot be read or written is a miss, logged, never a failed request.
type answers struct {
	e     *Engine
	store answercache.Store
	// byBlueprint says some blueprint keeps its answers, so every request reads the cache.
	byBlueprint bool
	log         *zap.Logger
}

// openAnswers makes the cache: in Redis when the engine shares one, else in memory.
func (e *Engine) openAnswers() {
	a := answers{e: e, log: e.log}
	if e.redis != nil {
		a.store = answercache.NewRedis(e.redis, e.cfg.RedisPrefix, e.cfg.Cache.MaxBytes)
	} else {
		a.store = answercache.NewMemory(e.cfg.Cache.MaxBytes, e.deps.Clock.Now)
	}
	for _, b := range e.blueprints.All() {
		a.byBlueprint = a.byBlueprint || b.CacheTTLSeconds > 0
	}
	e.answers = a
}

// choose decides the request's use of the cache and the key its answer is kept under: within its
// key's team, else its key (the admin token's scope is its own), so that the keys of a team share
// their answers and no answer crosses teams.
func (a answers) choose(req *messages.RouteRequest, key *pass) (exactcache.Choice, string) {
	var keyTTL time.Duration
	scope := "admin"
	if key != nil {
		keyTTL, scope = time.Duration(key.key.CacheTTLSeconds)*time.Second, "key:"+key.key.ID
		if key.teamID != "" {
			scope = "team:" + key.teamID
		}
	}
	c := exactcache.Choose(req.Cache, keyTTL, a.byBlueprint)
	if !c.Read && c.TTL == 0 {
		return c, ""
	}
	return c, exactcache.Key(req, scope)
}

// lookup answers the request from the cache, or returns nil on a miss.
func (a answers) lookup(ctx context.Context, req *messages.RouteRequest, c exactcache.Choice, key string) *messages.Execution {
	if !c.Read || a.store == nil {
		return nil
	}
	raw, found, err := a.store.Get(ctx, key)
	if err != nil {
		a.log.Warn("the answer cache could not be read", zap.String("event", "answer_cache_failed"), zap.String("request_id", req.RequestId), zap.Error(err))
		return nil
	}
	original := &messages.Execution{}
	if !found || original.UnmarshalVT(raw) != nil {
		return nil
	}
	e := a.e
	if req.ReceivedAt == nil {
		req.ReceivedAt = timestamppb.New(e.deps.Clock.Now())
	}
	exec := exactcache.Hit(req, original, e.cfg.NodeID)
	exec.CompletedAt = timestamppb.New(e.deps.Clock.Now())
	e.deps.Metrics.Execution(exec)
	e.system.Root.Send(e.deps.Dir.Recorder, exec)
	if ce := a.log.Check(zap.InfoLevel, "request finished"); ce != nil {
		ce.Write(zap.String("event", "request_completed"), zap.String("request_id", req.RequestId), zap.Int32("status", exec.StatusCode),
			zap.String("key_id", req.KeyId), zap.String("cached_from", original.RequestId))
	}
	return exec
}

// keep keeps a whole answer for as long as the request, or its blueprint, says.
func (a answers) keep(c exactcache.Choice, key string, exec *messages.Execution) {
	if key == "" || exec == nil || a.store == nil {
		return
	}
	ttl := exactcache.KeepFor(c, exec, a.blueprintTTL(exec))
	if ttl <= 0 {
		return
	}
	raw, err := exactcache.Kept(exec).MarshalVT()
	if err == nil {
		// Its own moment: the caller's leaving must not stop the answer being kept.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = a.store.Put(ctx, key, raw, ttl)
	}
	if err != nil {
		a.log.Warn("the answer cache could not be written", zap.String("event", "answer_cache_failed"), zap.String("request_id", exec.RequestId), zap.Error(err))
	}
}

// blueprintTTL is how long the blueprint that answered keeps its answers.
func (a answers) blueprintTTL(exec *messages.Execution) time.Duration {
	if b, err := a.e.blueprints.Get(exec.GetBlueprint().GetName()); err == nil {
		return time.Duration(b.CacheTTLSeconds) * time.Second
	}
	return 0
}
