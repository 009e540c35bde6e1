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
	"github.com/conclave-ai/conclave/internal/core/catalog"
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

// observed holds the messages the engine's actors took while recording, and the barriers (a
// ReceiveTimeout the test sends each provider) they passed.
type observed struct {
	mu        sync.Mutex
	got       []delivery
	recording bool
	barriers  int
}

func (o *observed) observe(self *actor.PID, msg any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := msg.(*actor.ReceiveTimeout); ok {
		o.barriers++
	} else if o.recording {
		o.got = append(o.got, delivery{kindOf(self), fmt.Sprintf("%T", msg), actors.Lifecycle(msg)})
	}
}

func (o *observed) locked(f func()) { o.mu.Lock(); defer o.mu.Unlock(); f() }

// protocolEngine starts the embedded default (simulated providers, here at once and without faults)
// with o watching its actors, and returns once its providers' gates are up: before that an
// acquisition goes through the mailbox, which is right but not what the table counts.
func protocolEngine(t *testing.T, o *observed) *Engine {
	t.Helper()
	cfg := config.Default()
	cfg.Sim.LatencyScale, cfg.Sim.Faults = 0, providers.Fault{}
	e, err := New(Options{Config: cfg, Log: zap.NewNop(), Observe: o.observe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, func() bool {
		return !slices.ContainsFunc(e.deps.Dir.Providers, func(p *actors.ProviderRef) bool { return !p.Live() })
	})
	o.locked(func() { o.recording = true })
	return e
}

// drain waits for what a request left on its way: the rewards to the arms, the settlements to the
// providers (sent before the answer: a message every actor leaves alone, sent after it, comes after
// them), the record to the store (a Flush, the test's own, answers once nothing is left to write);
// then, while more is expected (done says so) for at most 10 s. It stops recording and returns what
// was taken, the test's Flush left out.
func (o *observed) drain(t *testing.T, e *Engine, exec *messages.Execution, done func() bool) []delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []string{exec.Classification.GetCategory(), bandit.AllCategories} {
		if err := e.Settle(ctx, c, int64(len(exec.BanditUpdates))); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range e.deps.Dir.Providers {
		e.system.Root.Send(p.PID, &actor.ReceiveTimeout{})
	}
	waitUntil(t, func() (ok bool) {
		_, err := e.store.Get(ctx, exec.RequestId)
		o.locked(func() { ok = err == nil && o.barriers == len(e.deps.Dir.Providers) })
		return ok
	})
	if _, err := e.system.Root.RequestFuture(e.deps.Dir.Recorder, &messages.Flush{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !done() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	var got []delivery
	o.locked(func() {
		o.recording = false
		got = slices.Clone(o.got)
	})
	if i := slices.Index(got, delivery{actors.KindRecorder, "*messages.Flush", false}); i >= 0 {
		got = slices.Delete(got, i, i+1)
	}
	return got
}

// checkRows checks that each delivery has a row naming the kind of actor that took it, and counts the
// deliveries (protoactor's lifecycle and other timers than the request's left out).
func checkRows(t *testing.T, rows map[string]protocolRow, got []delivery) (total int, count map[string]int) {
	t.Helper()
	count, checked := map[string]int{}, map[delivery]bool{}
	for _, d := range got {
		row, ok := rows[d.typ]
		if !d.lifecycle && !row.periodic() {
			count[d.typ]++
			total++
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
	return total, count
}

// checkSays checks that the protocol section states a figure as the test measured it.
func checkSays(t *testing.T, section, says string) {
	t.Helper()
	if !strings.Contains(strings.Join(strings.Fields(section), " "), says) {
		t.Errorf("the paragraph under the protocol table should say %q", says)
	}
}

// TestProtocolTableMatchesASixWayRequest runs one six-way majority request through the engine on the
// simulated providers and checks docs/design.md's protocol table against every message its actors took:
// each has a row naming the kind of actor that took it, and each row was taken unless its `when` says
// "only …" (then it must not have been) or "every …" (a timer of its own). protoactor's lifecycle
// messages need no row; the row of one names the kinds that act on it.
func TestProtocolTableMatchesASixWayRequest(t *testing.T) {
	rows, section := protocolTable(t)
	o := &observed{}
	e := protocolEngine(t, o)
	// missing lists the rows a plain request takes that were not taken yet; took, the rows whose
	// message reached a receiver the row names.
	missing := func(got []delivery) (out []string, took map[string]bool) {
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
	six, majority := int32(6), "majority"
	exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "six", Workers: &six, MinResponses: &six, Strategy: &majority,
		Task: "Which gas makes up most of Earth's atmosphere?\nA) Oxygen\nB) Nitrogen\nC) Argon\nD) Carbon dioxide"})
	if err != nil || exec.StatusCode != 200 || len(exec.Results) != 6 || len(exec.Retries) != 0 {
		t.Fatalf("the six-way request: %v %v, %d calls, %d retries", err, exec.GetError(), len(exec.GetResults()), len(exec.GetRetries()))
	}
	// What the table expects besides comes after the answer (the coordinator's end).
	got := o.drain(t, e, exec, func() (done bool) {
		o.locked(func() { left, _ := missing(o.got); done = len(left) == 0 })
		return done
	})
	total, count := checkRows(t, rows, got)
	left, took := missing(got)
	for _, typ := range left {
		t.Errorf("%s has a row but was not delivered in a plain six-way request (mark its when \"only …\" if it should not be)", typ)
	}
	for typ, row := range rows {
		if row.absent() && took[typ] {
			t.Errorf("%s was delivered in a plain six-way request, and its row says %q", typ, row.when)
		}
	}
	t.Logf("%d rows; a six-way majority request: %d deliveries: %v", len(rows), total, count)
	checkSays(t, section, fmt.Sprintf("makes %d deliveries to actors today, %.1f a model call", total, float64(total)/6))
}

// TestProtocolTableMatchesADirectCall runs one direct call (a catalog model named by the caller)
// through the engine: every message its actors took has a row naming its receiver, and the section
// states how many there were. A direct call spawns no coordinator: its caller runs it.
func TestProtocolTableMatchesADirectCall(t *testing.T) {
	rows, section := protocolTable(t)
	o := &observed{}
	e := protocolEngine(t, o)
	model := ""
	for _, m := range e.Catalog().All() {
		if !m.Has(catalog.Embeddings) {
			model = m.ID
			break
		}
	}
	exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "direct", Direct: true, Models: []string{model},
		Task: "Which gas makes up most of Earth's atmosphere?"})
	if err != nil || exec.StatusCode != 200 || len(exec.Results) != 1 {
		t.Fatalf("the direct call: %v %v, %d calls", err, exec.GetError(), len(exec.GetResults()))
	}
	got := o.drain(t, e, exec, func() bool { return true })
	total, count := checkRows(t, rows, got)
	if slices.ContainsFunc(got, func(d delivery) bool { return d.kind == actors.KindCoordinator || d.kind == actors.KindRequests }) {
		t.Errorf("a direct call went through an actor of its own: %v", got)
	}
	t.Logf("a direct call: %d deliveries: %v", total, count)
	checkSays(t, section, fmt.Sprintf("A direct call makes %d deliveries to actors", total))
}
