// Package redisbus owns what controllers tell each other through Redis, the engine built for it: a
// provider breaker that opened, published on a channel so every controller stops calling that provider
// within a second (each still half-opens on its own); an API key that changed (revoked, its limits or
// budget), so every controller reads it again at once; and the rotating arbiter's turn, one counter per
// blueprint, so rotation holds across controllers. It is an adapter: it moves messages, and the engine
// and the actors decide what they mean.
package redisbus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Client is the part of a Redis client the bus uses.
type Client interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Incr(ctx context.Context, key string) *redis.IntCmd
}

// Opened says that a controller's breaker for a provider opened, and until when it stays open.
type Opened struct {
	Provider string    `json:"provider"`
	Until    time.Time `json:"until"`
	Node     string    `json:"node"`
}

// Bus is one controller's side of the channel.
type Bus struct {
	client Client
	prefix string
	node   string
	log    *zap.Logger
}

// New returns the bus of the controller named node, on keys and channels under prefix.
func New(client Client, prefix, node string, log *zap.Logger) *Bus {
	return &Bus{client: client, prefix: prefix, node: node, log: log}
}

func (b *Bus) channel() string { return b.prefix + ":breakers" }

func (b *Bus) keysChannel() string { return b.prefix + ":keys" }

// keyChanged is the message of a key that changed.
type keyChanged struct {
	Key  string `json:"key"`
	Node string `json:"node"`
}

// PublishKeyChanged tells the other controllers that a key changed.
func (b *Bus) PublishKeyChanged(id string) error {
	raw, err := json.Marshal(keyChanged{Key: id, Node: b.node})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if err := b.client.Publish(ctx, b.keysChannel(), raw).Err(); err != nil {
		return fmt.Errorf("publish key %s: %w", id, err)
	}
	return nil
}

// Handlers hear what other controllers said.
type Handlers struct {
	Opened     func(Opened)
	KeyChanged func(id string)
}

// publishTimeout bounds one publication: a Redis that does not answer must not hold a breaker's news.
const publishTimeout = time.Second

// PublishOpened tells the other controllers that this one's breaker for provider is open until then.
func (b *Bus) PublishOpened(provider string, until time.Time) error {
	raw, err := json.Marshal(Opened{Provider: provider, Until: until, Node: b.node})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if err := b.client.Publish(ctx, b.channel(), raw).Err(); err != nil {
		return fmt.Errorf("publish breaker of %s: %w", provider, err)
	}
	return nil
}

// Listen hands every other controller's word to its handler until ctx ends. The client resubscribes by
// itself when Redis comes back; what was published meanwhile is lost: each controller's own breaker
// still opens on its own faults, and reads changed keys again at its next refresh.
func (b *Bus) Listen(ctx context.Context, h Handlers) {
	sub := b.client.Subscribe(ctx, b.channel(), b.keysChannel())
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if msg.Channel == b.keysChannel() {
				var k keyChanged
				if err := json.Unmarshal([]byte(msg.Payload), &k); err != nil || k.Key == "" {
					b.log.Warn("a key message that is not one", zap.String("event", "cluster_message_invalid"), zap.Int("bytes", len(msg.Payload)))
					continue
				}
				if k.Node != b.node && h.KeyChanged != nil {
					h.KeyChanged(k.Key)
				}
				continue
			}
			var o Opened
			if err := json.Unmarshal([]byte(msg.Payload), &o); err != nil || o.Provider == "" {
				b.log.Warn("a breaker message that is not one", zap.String("event", "cluster_message_invalid"), zap.Int("bytes", len(msg.Payload)))
				continue
			}
			if o.Node != b.node && h.Opened != nil {
				h.Opened(o)
			}
		}
	}
}

// Turn takes the next turn of a rotation shared by every controller: 0, 1, 2, … across all of them.
func (b *Bus) Turn(ctx context.Context, rotation string) (uint64, error) {
	n, err := b.client.Incr(ctx, b.prefix+":rotation:{"+rotation+"}").Result()
	if err != nil {
		return 0, fmt.Errorf("rotation %s: %w", rotation, err)
	}
	return uint64(n - 1), nil
}
