// Package redistest gives tests the Redis the services script provides (scripts/services.sh), with a
// key prefix of their own so that tests sharing it do not meet; tests skip with a message where no
// Redis answers.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv"
	"github.com/conclave-ai/conclave/internal/testenv/netproxy"
	"github.com/redis/go-redis/v9"
)

// DefaultURL is the Redis of scripts/services.sh; CONCLAVE_TEST_REDIS_URL overrides it.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns the Redis tests use.
func URL() string {
	if u := os.Getenv("CONCLAVE_TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// New returns a client of the test Redis and a key prefix unique to the test; the prefix's keys are
// deleted when the test ends.
func New(t testing.TB) (*redis.Client, string) {
	t.Helper()
	o, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		testenv.Missing(t, "Redis is not reachable at %s (run scripts/services.sh, or set CONCLAVE_TEST_REDIS_URL): %v", o.Addr, err)
	}
	var b [6]byte
	rand.Read(b[:])
	prefix := "conclave-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return c, prefix
}

// NewProxy starts a proxy to the test Redis and returns it with a URL through it.
func NewProxy(t testing.TB) (*netproxy.Proxy, string) {
	t.Helper()
	o, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	p := netproxy.New(t, o.Addr)
	return p, "redis://" + p.Addr() + "/" + strconv.Itoa(o.DB)
}
