package fleet_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// BenchmarkDispatch measures one host's transport over a real sshd running the project's worker: a
// persistent agent session against one exec per job, one job at a time (the latency a dispatch adds
// to the provider call, which is the in-process simulated one's, measured first in the same run)
// and 8 jobs in flight (jobs per second over the one connection). CONCLAVE_BIN names a built binary;
// without it the benchmark builds one.
func BenchmarkDispatch(b *testing.B) {
	bin := os.Getenv("CONCLAVE_BIN")
	if bin == "" {
		bin = sshtest.BuildConclave(b, b.TempDir())
	}
	d := sshtest.StartSSHD(b, bin+" worker")
	direct := directCost(b)
	for _, mode := range []string{fleet.ModeAgent, fleet.ModeExec} {
		tr := sshdTransport(b, d, mode)
		b.Run(mode+"/sequential", func(b *testing.B) {
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				dispatch(b, tr, i)
			}
			per := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(per-direct)/1e3, "added-µs/job")
		})
		b.Run(mode+"/parallel-8", func(b *testing.B) {
			var n atomic.Int64
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					dispatch(b, tr, int(n.Add(1)))
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
		tr.Close()
	}
}

// directCost is the mean time of the simulated provider's call in this process, the part of a
// dispatch that is not the transport's.
func directCost(b *testing.B) time.Duration {
	cat, err := catalog.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	sim := providers.NewSim(cat.All(), providers.SimConfig{Seed: 7})
	const n = 2000
	start := time.Now()
	for i := range n {
		if _, err := sim.Complete(context.Background(), call(i)); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / n
}

func dispatch(b *testing.B, tr *fleet.SSH, i int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if reply, err := tr.Run(ctx, call(i)); err != nil || reply.Text == "" {
		b.Errorf("job %d: %+v %v", i, reply, err)
	}
}

func sshdTransport(b *testing.B, d *sshtest.SSHD, mode string) *fleet.SSH {
	known, err := fleet.KnownHosts(d.KnownHosts)
	if err != nil {
		b.Fatal(err)
	}
	sim, _ := json.Marshal(providers.SimConfig{Seed: 7})
	host, port, _ := net.SplitHostPort(d.Addr)
	p, _ := strconv.Atoi(port)
	tr, err := fleet.NewSSH(fleet.Host{Name: "bench-01", Address: host, Port: p, User: d.User, KeyFile: d.Client.File, Tier: 1,
		Slots: 8, Mode: mode, Command: fleet.DefaultCommand, MaxSessions: 10},
		fleet.SSHOptions{HostKeys: known, Router: router{}, Setup: &messages.AgentSetup{Sim: string(sim)}, Log: zap.NewNop(),
			DialTimeout: 2 * time.Second, HandshakeTimeout: 2 * time.Second, SessionTimeout: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	dispatch(b, tr, -1) // connect before timing
	return tr
}
