package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/testenv"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// protocolSection is the heading of the table of the actors' messages in docs/design.md.
const protocolSection = "## The protocol [messages, actors, supervisors]"

// protocolRow is one row of the table: the kinds of actor that take the message, and when.
type protocolRow struct {
	receivers []string
	when      string
}

// absent says the row's message does not come in a plain six-way request; periodic that a timer whose
// moment is not the request's sends it (it may or may not fall within one).
func (r protocolRow) absent() bool   { return strings.HasPrefix(r.when, "only ") }
func (r protocolRow) periodic() bool { return strings.HasPrefix(r.when, "every ") }

// protocolTable reads the table, one row per message type named as %T prints it, and its section.
func protocolTable(t *testing.T) (map[string]protocolRow, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n"+protocolSection+"\n")
	if !ok {
		t.Fatalf("docs/design.md has no section %q", protocolSection)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]protocolRow{}
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(line, "| `") || len(cells) != 5 {
			continue // prose, the header, the rule
		}
		typ := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if _, twice := rows[typ]; twice {
			t.Errorf("the protocol table has two rows for %s", typ)
		}
		row := protocolRow{when: strings.TrimSpace(cells[4])}
		for r := range strings.SplitSeq(cells[2], ",") {
			row.receivers = append(row.receivers, strings.TrimSpace(r))
		}
		rows[typ] = row
	}
	if len(rows) == 0 {
		t.Fatal("the protocol table has no rows")
	}
	return rows, section
}

// kindOf is the kind of the actor at pid, as the table names receivers.
func kindOf(pid *actor.PID) string { return actors.ActorKind(pid.Id) }

// delivery is one message an actor took; lifecycle marks protoactor's own (actors.Lifecycle).
type delivery struct {
	kind, typ string
	lifecycle bool
}

// TestProtocolTableMatchesASixWayRequest runs one six-way majority request through the engine on the
// simulated providers and checks docs/design.md's protocol table against every message its actors took:
// each has a row naming the kind of actor that took it, and each row was taken unless its `when` says
// "only …" (then it must not have been) or "every …" (a timer of its own). protoactor's lifecycle
// messages need no row; the row of one names the kinds that act on it.
func TestProtocolTableMatchesASixWayRequest(t *testing.T) {
	rows, section := protocolTable(t)
	var mu sync.Mutex
	got, recording, barriers := []delivery(nil), false, 0
	observe := func(self *actor.PID, msg any) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := msg.(*actor.ReceiveTimeout); ok {
			barriers++
		} else if recording {
			got = append(got, delivery{kindOf(self), fmt.Sprintf("%T", msg), actors.Lifecycle(msg)})
		}
	}
	locked := func(f func()) { mu.Lock(); defer mu.Unlock(); f() }
	// missing lists the rows a plain request takes that were not taken yet; took, the rows whose
	// message reached a receiver the row names.
	missing := func() (out []string, took map[string]bool) {
		took = map[string]bool{}
		for _, d := range got {
			if row, ok := rows[d.typ]; ok && slices.Contains(row.receivers, d.kind) {
				took[d.typ] = true
			}
		}
		for typ, row := range rows {
			if !row.absent() && !row.periodic() && !took[typ] {
				out = append(out, typ)
			}
		}
		return out, took
	}
	cfg := config.Default() // the embedded default: simulated providers, here at once and without faults
	cfg.Sim.LatencyScale, cfg.Sim.Faults = 0, providers.Fault{}
	e, err := New(Options{Config: cfg, Log: zap.NewNop(), Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})

	// The providers' actors go live once they have started, a moment after the engine: before that an
	// acquisition goes through the mailbox, which is right but not what the table counts.
	waitUntil(t, func() bool {
		return !slices.ContainsFunc(e.deps.Dir.Providers, func(p *actors.ProviderRef) bool { return !p.Live() })
	})
	locked(func() { recording = true })
	six, majority := int32(6), "majority"
	exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "six", Workers: &six, MinResponses: &six, Strategy: &majority,
		Task: "Which gas makes up most of Earth's atmosphere?\nA) Oxygen\nB) Nitrogen\nC) Argon\nD) Carbon dioxide"})
	if err != nil || exec.StatusCode != 200 || len(exec.Results) != 6 || len(exec.Retries) != 0 {
		t.Fatalf("the six-way request: %v %v, %d calls, %d retries", err, exec.GetError(), len(exec.GetResults()), len(exec.GetRetries()))
	}
	// What the request left on its way: the rewards to the arms, the settlements to the providers (sent
	// before the answer: a message every actor leaves alone, sent after it, comes after them), the record
	// to the store (a Flush, the test's own, answers once nothing is left to write); then, for at most
	// 10 s, what the table expects besides (the coordinator's end comes after its answer).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []string{exec.Classification.Category, bandit.AllCategories} {
		if err := e.Settle(ctx, c, int64(len(exec.BanditUpdates))); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range e.deps.Dir.Providers {
		e.system.Root.Send(p.PID, &actor.ReceiveTimeout{})
	}
	waitUntil(t, func() (done bool) {
		_, err := e.store.Get(ctx, exec.RequestId)
		locked(func() { done = err == nil && barriers == len(e.deps.Dir.Providers) })
		return done
	})
	if _, err := e.system.Root.RequestFuture(e.deps.Dir.Recorder, &messages.Flush{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for left := []string{""}; len(left) > 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		locked(func() { left, _ = missing() })
	}
	locked(func() { recording = false })
	if i := slices.Index(got, delivery{actors.KindRecorder, "*messages.Flush", false}); i >= 0 {
		got = slices.Delete(got, i, i+1)
	}

	count, checked := map[string]int{}, map[delivery]bool{}
	for _, d := range got {
		row, ok := rows[d.typ]
		if !d.lifecycle && !row.periodic() {
			count[d.typ]++
		}
		if d.lifecycle || checked[d] { // protoactor's lifecycle needs no row; a row names who acts on it
			continue
		}
		checked[d] = true
		switch {
		case !ok:
			t.Errorf("%s was delivered to a %s, and the protocol table has no row for it", d.typ, d.kind)
		case !slices.Contains(row.receivers, d.kind):
			t.Errorf("%s was delivered to a %s, and its row names %v", d.typ, d.kind, row.receivers)
		}
	}
	left, took := missing()
	for _, typ := range left {
		t.Errorf("%s has a row but was not delivered in a plain six-way request (mark its when \"only …\" if it should not be)", typ)
	}
	for typ, row := range rows {
		if row.absent() && took[typ] {
			t.Errorf("%s was delivered in a plain six-way request, and its row says %q", typ, row.when)
		}
	}
	total := 0
	for _, n := range count {
		total += n
	}
	t.Logf("%d rows; a six-way majority request: %d deliveries: %v", len(rows), total, count)
	says := fmt.Sprintf("makes %d deliveries to actors today, %.1f a model call", total, float64(total)/6)
	if !strings.Contains(strings.Join(strings.Fields(section), " "), says) {
		t.Errorf("the paragraph under the protocol table should say %q", says)
	}
}
