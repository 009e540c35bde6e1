package remotedoor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit/redislimit"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Two nodes share the token and a Redis: the same captured request, delivered to both at once, is
// answered by one of them only; the other refuses it as replayed, without an answer. A node on
// another prefix shares nothing.
func TestACapturedRequestIsAnsweredOnceByTheNodesOfARedis(t *testing.T) {
	client, prefix := redistest.New(t)
	pa, pb, pc := &pipeline{}, &pipeline{}, &pipeline{}
	sysA, pidA, refusedA := keyedGateway(t, pa, 8, gateKey, newReplays(client, prefix, nil))
	sysB, pidB, refusedB := keyedGateway(t, pb, 8, gateKey, newReplays(client, prefix, nil))
	auth, err := Sign(gateKey, time.Now(), Addressed{Node: here, Target: RouteActor, Sender: caller}, routeMsg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	answers := make([]*messages.Execution, 2)
	for i, send := range []func() (*messages.Execution, error){
		func() (*messages.Execution, error) { return sendAuthenticated(sysA, pidA, auth) },
		func() (*messages.Execution, error) { return sendAuthenticated(sysB, pidB, auth) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], _ = send()
		}()
	}
	wg.Wait()
	answered := 0
	for _, a := range answers {
		if a != nil {
			answered++
		}
	}
	if answered != 1 || len(pa.reached())+len(pb.reached()) != 1 {
		t.Fatalf("%d answers, the pipelines got %q and %q: want one", answered, pa.reached(), pb.reached())
	}
	if refusedA.get(RefusedReplayed)+refusedB.get(RefusedReplayed) != 1 {
		t.Fatalf("replays refused: %d and %d", refusedA.get(RefusedReplayed), refusedB.get(RefusedReplayed))
	}
	// Redis forgets it when no node would take it anyway.
	sum := sha256.Sum256([]byte(auth))
	ttl, err := client.PTTL(context.Background(), prefix+":remote:seen:"+hex.EncodeToString(sum[:])).Result()
	if err != nil || ttl <= 2*MaxSkew-time.Minute || ttl > 2*MaxSkew {
		t.Fatalf("the key lives %v (%v): want %v", ttl, err, 2*MaxSkew)
	}
	sysC, pidC, _ := keyedGateway(t, pc, 8, gateKey, newReplays(client, prefix+"-other", nil))
	if exec, err := sendAuthenticated(sysC, pidC, auth); err != nil || exec.StatusCode != 200 {
		t.Fatalf("a node on another prefix: %v %v", exec, err)
	}
}

// While Redis is lost a node remembers alone, says so once, and says once that it shares again when
// Redis is back; what it took meanwhile it still refuses.
func TestReplaysFallBackToTheNodeWhileRedisIsLost(t *testing.T) {
	direct, prefix := redistest.New(t)
	proxy, url := redistest.NewProxy(t)
	through, err := redislimit.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { through.Close() })
	core, logs := observer.New(zap.InfoLevel)
	a := newReplays(through, prefix, zap.New(core))
	b := newReplays(direct, prefix, nil) // another node, whose Redis stays
	now := time.Now()
	if !a.first("r1", now) || b.first("r1", now) {
		t.Fatal("shared: a request taken by one node was taken by the other")
	}

	proxy.Cut()
	if !a.first("r2", now) || a.first("r2", now) || !a.first("r3", now) {
		t.Fatal("without Redis the node does not remember alone")
	}
	if !b.first("r2", now) {
		t.Fatal("the other node knew of a request taken without Redis")
	}
	local := logs.FilterField(zap.String("event", "remote_replays_local"))
	if local.Len() != 1 || local.All()[0].Level != zap.WarnLevel {
		t.Fatalf("%d remote_replays_local lines: want one warning", local.Len())
	}

	proxy.Restore()
	later := now.Add(replayRetries[0])
	if !a.first("r4", later) || b.first("r4", later) {
		t.Fatal("shared again: a request taken by one node was taken by the other")
	}
	if a.first("r3", later) {
		t.Fatal("a request taken while Redis was lost was taken again")
	}
	if n := logs.FilterField(zap.String("event", "remote_replays_shared")).Len(); n != 1 {
		t.Fatalf("%d remote_replays_shared lines: want one", n)
	}
	if n := logs.FilterField(zap.String("event", "remote_replays_local")).Len(); n != 1 {
		t.Fatalf("%d remote_replays_local lines in all: want one", n)
	}
}
