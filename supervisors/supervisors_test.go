package supervisors

import (
	"fmt"
	"github.com/conclave-ai/conclave/internal/arms"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// crash makes the test's actors panic.
type crash struct{}

// crashy is an actor that panics on crash and answers anything else it is asked.
func crashy() *actor.Props {
	return actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case crash:
			panic("a bug")
		case string:
			c.Respond("ok")
		}
	})
}

// tree is the root and providers supervisors over one crashy provider, groq, at the directory's paths.
type tree struct {
	system *actor.ActorSystem
	deps   *actors.Deps
	logs   *observer.ObservedLogs
	root   *actor.PID
	groq   *actors.ProviderRef
}

func newTree(t *testing.T) *tree {
	t.Helper()
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop()))
	core, logs := observer.New(zap.InfoLevel)
	cat, err := catalog.New([]catalog.Model{{ID: "m", Provider: "groq", ContextWindow: 8000, Tier: 2}})
	if err != nil {
		t.Fatal(err)
	}
	dir := actors.NewDirectory(system, []fleet.WorkerSpec{}, []string{"groq"}, arms.NewBoard(cat.All(), []string{"general"}, bandit.DefaultPrior, 0),
		[]string{"general"})
	deps := &actors.Deps{Log: zap.New(core), Clock: clock.Real{}, Dir: dir, Timers: scheduler.NewTimerScheduler(system.Root), Catalog: catalog.NewLive(cat)}
	props := Static(deps, []Child{{Name: actors.ProvidersName, Props: Static(deps, []Child{{Name: "groq", Props: crashy()}})}})
	root, err := system.Root.SpawnNamed(props, actors.RootName)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tree{system: system, deps: deps, logs: logs, root: root, groq: dir.Provider("groq")}
	t.Cleanup(system.Shutdown)
	for _, pid := range []*actor.PID{root, actor.NewPID(system.Address(), actors.RootName+"/"+actors.ProvidersName)} {
		if _, err := system.Root.RequestFuture(pid, &Ping{}, 10*time.Second).Result(); err != nil { // its children are spawned
			t.Fatal(err)
		}
	}
	tr.ask(t)
	return tr
}

// ask waits for groq to answer, so that everything sent before is handled.
func (tr *tree) ask(t *testing.T) {
	t.Helper()
	if _, err := tr.system.Root.RequestFuture(tr.groq.PID, "ping", 10*time.Second).Result(); err != nil {
		t.Fatalf("groq does not answer: %v", err)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAChildPastItsRestartLimitIsStoppedAndRecorded(t *testing.T) {
	tests := []struct {
		desc    string
		crashes int
		stopped bool
	}{
		{"crashes within the limit are restarts", MaxRestarts, false},
		{"one more stops it for good", MaxRestarts + 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			tr := newTree(t)
			for range tt.crashes {
				tr.system.Root.Send(tr.groq.PID, crash{})
			}
			if !tt.stopped {
				tr.ask(t) // restarted, it answers
				if s := tr.deps.Dir.Stopped(); len(s) != 0 || tr.groq.Snapshot().Stopped != "" {
					t.Fatalf("stopped %v after %d crashes", s, tt.crashes)
				}
				return
			}
			waitUntil(t, func() bool { return len(tr.deps.Dir.Stopped()) == 1 })
			s := tr.deps.Dir.Stopped()[0]
			if s.Path != "conclave/providers/groq" || s.Kind != actors.KindProvider || s.Reason != "a bug" {
				t.Fatalf("recorded %+v", s)
			}
			if snap := tr.groq.Snapshot(); snap.Stopped != "a bug" || !snap.Status(time.Now()).Stopped {
				t.Fatalf("snapshot %+v: the provider does not say it is stopped", snap)
			}
			lines := tr.logs.FilterField(zap.String("event", "actor_stopped")).All()
			if len(lines) != 1 || lines[0].ContextMap()["actor"] != "conclave/providers/groq" || lines[0].ContextMap()["reason"] != "a bug" {
				t.Fatalf("actor_stopped lines %v", lines)
			}
			if got := tr.deps.Dir.StoppedCounts(); fmt.Sprint(got) != "map[provider:1]" {
				t.Fatalf("counts %v", got)
			}
			// Stopped means stopped: it answers nothing any more.
			if _, err := tr.system.Root.RequestFuture(tr.groq.PID, "ping", 200*time.Millisecond).Result(); err == nil {
				t.Fatal("the stopped provider answered")
			}
		})
	}
}

// A shutdown stops every actor, and records none as stopped for good.
func TestAShutdownRecordsNothing(t *testing.T) {
	tr := newTree(t)
	if err := tr.system.Root.PoisonFuture(tr.root).Wait(); err != nil {
		t.Fatal(err)
	}
	if s := tr.deps.Dir.Stopped(); len(s) != 0 || tr.groq.Snapshot().Stopped != "" {
		t.Fatalf("stopped %v after a shutdown", s)
	}
	if n := tr.logs.FilterField(zap.String("event", "actor_stopped")).Len(); n != 0 {
		t.Fatalf("%d actor_stopped lines after a shutdown", n)
	}
}

// The bandit supervisor spawns one writer for every arm and one reliability estimator, drops what is
// for neither, and does not spawn the writer again once it is stopped for good.
func TestTheBanditSpawnsOneWriterForTheArms(t *testing.T) {
	tr := newTree(t)
	crashOn := func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if _, ok := env.Message.(crash); ok {
				panic("an arm's bug")
			}
			next(c, env)
		}
	}
	tr.deps.Middleware = []actor.ReceiverMiddleware{crashOn}
	banditPID, err := tr.system.Root.SpawnNamed(Bandit(tr.deps), "bandit")
	if err != nil {
		t.Fatal(err)
	}
	ping := func() {
		t.Helper()
		if _, err := tr.system.Root.RequestFuture(banditPID, &Ping{}, 10*time.Second).Result(); err != nil {
			t.Fatal(err)
		}
	}
	children := func() int { return actors.Processes(tr.system, "bandit/") }
	tests := []struct {
		desc   string
		msg    any
		kind   string // where it is dropped
		reason string
		spawns int
	}{
		{"votes of an invented model", &messages.Votes{Category: "general", Models: []string{"invented"}, Groups: []int32{0}},
			actors.KindBandit, actors.DropUnknownModel, 0},
		{"a message it does not route", "hello", actors.KindBandit, actors.DropUnknownMessage, 0},
		{"a known arm's reward spawns the writer", &messages.Reward{Model: "m", Category: "general", Reward: 1}, "", "", 1},
		{"an invented model's reward reaches the writer, which drops it", &messages.Reward{Model: "invented", Category: "general", Reward: 1},
			actors.KindArm, actors.DropUnknownModel, 0},
		{"a batch of invented names", &messages.Rewards{Rewards: []*messages.Reward{{Model: "a", Category: "general"}, {Model: "b", Category: "general"}}},
			actors.KindArm, actors.DropUnknownModel, 0},
		{"another arm's reward", &messages.Reward{Model: "m", Category: bandit.AllCategories, Reward: 1}, "", "", 0},
	}
	for _, tt := range tests {
		before, dropped := children(), tr.deps.Dir.Dropped(tt.kind, tt.reason)
		tr.system.Root.Send(banditPID, tt.msg)
		ping()
		if tt.reason != "" {
			waitUntil(t, func() bool { return tr.deps.Dir.Dropped(tt.kind, tt.reason) > dropped })
		}
		if got := children() - before; got != tt.spawns {
			t.Fatalf("%s: %d actors spawned, want %d", tt.desc, got, tt.spawns)
		}
	}
	// A writer stopped for good stays stopped: rewards are dropped, not given to a new writer.
	arms := actor.NewPID(tr.system.Address(), "bandit/"+actors.ArmsName)
	for range MaxRestarts + 1 {
		tr.system.Root.Send(arms, crash{})
	}
	waitUntil(t, func() bool { return len(tr.deps.Dir.Stopped()) == 1 && children() == 0 })
	before := tr.deps.Dir.Dropped(actors.KindBandit, actors.DropActorStopped)
	tr.system.Root.Send(banditPID, &messages.Rewards{Rewards: []*messages.Reward{{Model: "m", Category: "general", Reward: 1}}})
	ping()
	if children() != 0 || tr.deps.Dir.Dropped(actors.KindBandit, actors.DropActorStopped) != before+1 {
		t.Fatalf("%d actors; the stopped writer's rewards were not dropped", children())
	}
	_ = tr.system.Root.PoisonFuture(banditPID).Wait()
}
