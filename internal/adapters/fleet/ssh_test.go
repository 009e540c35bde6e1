package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/fleet/agent"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const key = secret.String("sk-fleet-KEY-must-never-show")

// router sends every provider to the simulated one, with a key that must not leak.
type router struct{}

func (router) Route(string) (string, string, secret.String, bool) {
	return providers.KindSimulated, "", key, true
}
func (router) Price(string, providers.Usage) (money.USD, bool) { return money.Dollar / 2, true }

// host is an in-process SSH server running the agent, and a transport to it.
type host struct {
	server *sshtest.Server
	execs  atomic.Int32
	client sshtest.Key
	logs   *observer.ObservedLogs
}

func newHost(t *testing.T, hang bool) *host {
	h := &host{client: sshtest.NewKey(t, t.TempDir(), "client")}
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	h.server = sshtest.NewServer(t, h.client, func(_ string, in io.Reader, out io.Writer) {
		h.execs.Add(1)
		if hang { // an agent that reads its jobs and never answers
			io.Copy(io.Discard, in)
			return
		}
		agent.New("test", zap.New(core)).Serve(context.Background(), in, out)
	})
	return h
}

func (h *host) spec(mode string) fleet.Host {
	addr, port, _ := net.SplitHostPort(h.server.Addr)
	p, _ := strconv.Atoi(port)
	return fleet.Host{Name: "gpu-01", Address: addr, Port: p, User: "conclave", KeyFile: h.client.File, Tier: 1, Slots: 8, Mode: mode,
		Command: fleet.DefaultCommand, MaxSessions: 10}
}

func (h *host) transport(t *testing.T, mode string, change ...func(*fleet.SSHOptions)) (*fleet.SSH, *observer.ObservedLogs) {
	t.Helper()
	known, err := fleet.KnownHosts(sshtest.KnownHosts(t, t.TempDir(), h.server.Addr, h.server.HostKey.Signer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	sim, _ := json.Marshal(providers.SimConfig{Seed: 7})
	o := fleet.SSHOptions{HostKeys: known, Router: router{}, Setup: &messages.AgentSetup{Sim: string(sim)}, Log: zap.New(core),
		DialTimeout: time.Second, HandshakeTimeout: 500 * time.Millisecond, SessionTimeout: time.Second}
	for _, c := range change {
		c(&o)
	}
	tr, err := fleet.NewSSH(h.spec(mode), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, logs
}

func call(i int) providers.Call {
	return providers.Call{RequestID: "r", JobID: fmt.Sprint("j", i), Kind: providers.KindAnswer, Provider: "groq", Model: "llama-3.1-8b-instant",
		Messages: providers.UserPrompt(fmt.Sprintf("Which is right? (%d)\nA) one\nB) two", i)), Task: "Which is right?", Category: "general"}
}

func assertNoKey(t *testing.T, written ...string) {
	t.Helper()
	for _, w := range written {
		if strings.Contains(w, key.Reveal()) {
			t.Fatalf("the key was written: %.200s", w)
		}
	}
}

func logText(logs *observer.ObservedLogs) string {
	var b strings.Builder
	for _, e := range logs.All() {
		raw, _ := json.Marshal(e.ContextMap())
		b.WriteString(e.Message + string(raw) + "\n")
	}
	return b.String()
}

// recordHealth keeps what tr reports of its connection; the function it returns reads the reports so far.
func recordHealth(tr *fleet.SSH) func() []fleet.Health {
	var mu sync.Mutex
	var health []fleet.Health
	tr.OnHealth(func(s fleet.Health, _ error) { mu.Lock(); health = append(health, s); mu.Unlock() })
	return func() []fleet.Health {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(health)
	}
}

// inParallel runs n jobs on tr at once, each within 10 s, and fails t for each that errs or whose reply
// is not ok.
func inParallel(t *testing.T, tr *fleet.SSH, n int, ok func(providers.Reply) bool) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if reply, err := tr.Run(ctx, call(i)); err != nil || !ok(reply) {
				t.Errorf("job %d: %+v %v", i, reply, err)
			}
		})
	}
	wg.Wait()
}

func TestJobsShareOneAgentSession(t *testing.T) {
	h := newHost(t, false)
	tr, logs := h.transport(t, fleet.ModeAgent)
	health := recordHealth(tr)
	inParallel(t, tr, 20, func(r providers.Reply) bool { return r.Text != "" && r.Cost == money.Dollar/2 })
	if n := h.execs.Load(); n != 1 {
		t.Fatalf("%d sessions for 20 jobs, want one", n)
	}
	if got := health(); len(got) != 1 || got[0] != fleet.Connected {
		t.Fatalf("health %v", got)
	}
	assertNoKey(t, logText(logs), logText(h.logs))
}

func TestExecModeRunsEachJobInItsOwnSession(t *testing.T) {
	h := newHost(t, false)
	tr, _ := h.transport(t, fleet.ModeExec)
	for i := range 3 {
		if reply, err := tr.Run(context.Background(), call(i)); err != nil || reply.Text == "" {
			t.Fatalf("job %d: %+v %v", i, reply, err)
		}
	}
	if n := h.execs.Load(); n != 3 {
		t.Fatalf("%d sessions for 3 jobs", n)
	}
}

// A streamed job's pieces come back over SSH as the agent's provider writes them, before its result,
// in both modes; joined they are the answer.
func TestAStreamedJobsPiecesComeBackOverSSH(t *testing.T) {
	h := newHost(t, false)
	for _, mode := range []string{fleet.ModeAgent, fleet.ModeExec} {
		t.Run(mode, func(t *testing.T) {
			tr, _ := h.transport(t, mode)
			var pieces []string
			reply, err := tr.Stream(context.Background(), call(1), func(d providers.Delta) { pieces = append(pieces, d.Text) })
			if err != nil || len(pieces) < 2 || strings.Join(pieces, "") != reply.Text {
				t.Fatalf("%d pieces %q, reply %+v, %v", len(pieces), pieces, reply, err)
			}
			plain, err := tr.Run(context.Background(), call(1))
			if err != nil || plain.Text != reply.Text {
				t.Fatalf("unstreamed %+v %v", plain, err)
			}
		})
	}
}

// A host that refuses a session for a while (sshd counts a session until its command has ended) gets
// the job again on the same connection: the refusal fails no other job in flight.
func TestARefusedSessionIsAskedAgainOnTheSameConnection(t *testing.T) {
	h := newHost(t, false)
	h.server.MaxSessions.Store(2)
	tr, _ := h.transport(t, fleet.ModeExec)
	health := recordHealth(tr)
	inParallel(t, tr, 8, func(r providers.Reply) bool { return r.Text != "" })
	if h.server.Refused.Load() == 0 {
		t.Fatal("no session was refused: the test asked for too few at once")
	}
	if got := health(); len(got) != 1 || got[0] != fleet.Connected {
		t.Fatalf("health %v: a refused session dropped the connection", got)
	}
}

func TestAJobPastItsDeadlineEnds(t *testing.T) {
	h := newHost(t, false)
	tr, _ := h.transport(t, fleet.ModeAgent, func(o *fleet.SSHOptions) {
		sim, _ := json.Marshal(providers.SimConfig{Seed: 7, LatencyScale: 100}) // minutes per answer
		o.Setup = &messages.AgentSetup{Sim: string(sim)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// The controller gives up at the deadline, or the agent's answer that it ran out of time comes first.
	if _, err := tr.Run(ctx, call(1)); !errors.Is(err, context.DeadlineExceeded) && resilience.KindOf(err) != resilience.UpstreamTimeout {
		t.Fatalf("a job past its deadline: %v", err)
	}
	if h.execs.Load() != 1 {
		t.Fatal("no session")
	}
}

func TestHostFaultsAreTheHosts(t *testing.T) {
	h := newHost(t, false)
	other := sshtest.NewKey(t, t.TempDir(), "other")
	tests := []struct {
		desc string
		spec func(fleet.Host) fleet.Host
		keys func(t *testing.T) fleet.SSHOptions
		kind resilience.Kind
		says string
	}{
		{"an unknown host key", nil, func(t *testing.T) fleet.SSHOptions {
			cb, _ := fleet.KnownHosts(sshtest.KnownHosts(t, t.TempDir(), "127.0.0.9:22", other.Signer.PublicKey()))
			return fleet.SSHOptions{HostKeys: cb}
		}, resilience.SSHRefused, "host key is unknown"},
		{"a changed host key", nil, func(t *testing.T) fleet.SSHOptions {
			cb, _ := fleet.KnownHosts(sshtest.KnownHosts(t, t.TempDir(), h.server.Addr, other.Signer.PublicKey()))
			return fleet.SSHOptions{HostKeys: cb}
		}, resilience.SSHRefused, "host key changed"},
		{"a refused connection", func(s fleet.Host) fleet.Host {
			_, p, _ := net.SplitHostPort(sshtest.Refused(t))
			s.Port, _ = strconv.Atoi(p)
			return s
		}, nil, resilience.SSHRefused, "connection refused"},
		{"a handshake that never ends", func(s fleet.Host) fleet.Host {
			_, p, _ := net.SplitHostPort(sshtest.Silent(t))
			s.Port, _ = strconv.Atoi(p)
			return s
		}, nil, resilience.HostTimeout, "handshake"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			spec := h.spec(fleet.ModeAgent)
			if tt.spec != nil {
				spec = tt.spec(spec)
			}
			o := fleet.SSHOptions{InsecureIgnoreHostKey: true}
			if tt.keys != nil {
				o = tt.keys(t)
			}
			o.Router, o.HandshakeTimeout = router{}, 300*time.Millisecond
			tr, err := fleet.NewSSH(spec, o)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			var down error
			tr.OnHealth(func(s fleet.Health, err error) { down = err })
			_, err = tr.Run(context.Background(), call(1))
			var re *resilience.Error
			if !errors.As(err, &re) || re.Kind != tt.kind || !strings.Contains(err.Error(), tt.says) || down == nil {
				t.Fatalf("error %v (health %v), want %s saying %q", err, down, tt.kind, tt.says)
			}
			// Until its backoff has passed the host is not dialled again: the next job fails at once.
			start := time.Now()
			if _, err := tr.Run(context.Background(), call(2)); err == nil || time.Since(start) > 200*time.Millisecond {
				t.Fatalf("a second job: %v after %v", err, time.Since(start))
			}
		})
	}
}

func TestALostConnectionFailsItsJobsAndTheNextDials(t *testing.T) {
	h := newHost(t, false)
	tr, _ := h.transport(t, fleet.ModeAgent, func(o *fleet.SSHOptions) {
		sim, _ := json.Marshal(providers.SimConfig{Seed: 7, LatencyScale: 100})
		o.Setup = &messages.AgentSetup{Sim: string(sim)}
	})
	health := recordHealth(tr)
	done := make(chan error, 1)
	go func() { _, err := tr.Run(context.Background(), call(1)); done <- err }()
	for h.execs.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	h.server.Drop()
	err := <-done
	var re *resilience.Error
	if !errors.As(err, &re) || re.Kind != resilience.SSHRefused {
		t.Fatalf("a job on a lost connection: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tr.Run(ctx, call(2)) // dials again (and times out on the slow model)
	if got := fmt.Sprint(health()); got != "[connected reconnecting connected]" {
		t.Fatalf("health %s", got)
	}
}

func TestNoKnownHostsIsRefused(t *testing.T) {
	h := newHost(t, false)
	if _, err := fleet.NewSSH(h.spec(fleet.ModeAgent), fleet.SSHOptions{Router: router{}}); err == nil || !strings.Contains(err.Error(), "known_hosts") {
		t.Fatalf("a transport without known_hosts: %v", err)
	}
}
