// Package alerts owns the telling of budget alerts beyond the log: the claim that makes each alert
// once however many controllers see it, and the webhook that receives it, signed and retried.
package alerts

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/redis/go-redis/v9"
)

// Alert is what the webhook receives of a budget alert.
type Alert struct {
	Event     string     `json:"event"` // budget_alert
	KeyID     string     `json:"key_id,omitempty"`
	TeamID    string     `json:"team_id,omitempty"`
	Threshold float64    `json:"threshold"`
	SpendUSD  money.USD  `json:"spend_usd"`
	BudgetUSD money.USD  `json:"budget_usd"`
	PeriodEnd *time.Time `json:"period_end"` // null for a budget of the key's whole life
}

// Claims make an alert once: the first to claim its name tells it.
type Claims interface {
	// Claim reports whether this caller is the first to claim name within ttl.
	Claim(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// Memory are the claims of one controller.
type Memory struct {
	now  func() time.Time
	mu   sync.Mutex
	seen map[string]time.Time // name: until when it is claimed
}

// NewMemory returns empty claims on a clock (nil: the wall's).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, seen: map[string]time.Time{}}
}

// Claim implements Claims; claims past their time are forgotten as it goes.
func (m *Memory) Claim(_ context.Context, name string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for n, until := range m.seen {
		if !now.Before(until) {
			delete(m.seen, n)
		}
	}
	if _, ok := m.seen[name]; ok {
		return false, nil
	}
	m.seen[name] = now.Add(ttl)
	return true, nil
}

// Redis are the claims every controller sharing the Redis (and the prefix) shares.
type Redis struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedis returns the claims in c under prefix ("conclave" makes conclave:alerts:...).
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix + ":alerts:"}
}

// Claim implements Claims.
func (r *Redis) Claim(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := r.c.SetNX(ctx, r.prefix+name, 1, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("alert claim: %w", err)
	}
	return ok, nil
}

// SignatureHeader carries the webhook body's signature: sha256= and the hex of its HMAC-SHA256 under
// the alerts' secret.
const SignatureHeader = "X-Conclave-Signature"

// Sign is a body's signature under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Webhook posts alerts to a URL, signed, trying again with backoff and jitter while it fails.
type Webhook struct {
	URL    string
	Secret secret.String
	Client *http.Client
	// Attempts bounds the tries of one alert; Backoff is the first wait, doubling after each failure.
	Attempts int
	Backoff  time.Duration
	// Seed seeds the waits' jitter: each alert's source is PCG(Seed, the alert's number).
	Seed  uint64
	sends atomic.Uint64
}

// Defaults of a webhook.
const (
	DefaultAttempts = 5
	DefaultBackoff  = time.Second
	sendTimeout     = 10 * time.Second
)

// Send posts body until the receiver answers 2xx or the attempts are spent; it returns the last
// failure. It blocks: call it on a goroutine of its own.
func (w *Webhook) Send(ctx context.Context, body []byte) error {
	attempts, wait := max(w.Attempts, 1), w.Backoff
	rng := rand.New(rand.NewPCG(w.Seed, w.sends.Add(1))) // an alert's own: alerts are sent at once
	var err error
	for i := range attempts {
		if err = w.post(ctx, body); err == nil {
			return nil
		}
		if i == attempts-1 {
			break
		}
		d := wait + time.Duration(rng.Int64N(int64(wait/2)+1))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		wait *= 2
	}
	return err
}

func (w *Webhook) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("alerts webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign([]byte(w.Secret.Reveal()), body))
	resp, err := w.Client.Do(req)
	if err != nil {
		return fmt.Errorf("alerts webhook: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("alerts webhook: %s", resp.Status)
	}
	return nil
}
