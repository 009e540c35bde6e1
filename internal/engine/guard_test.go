package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/actors"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/supervisors"
	"go.uber.org/zap"
)

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

// pingBandit returns once the bandit supervisor handled everything sent to it before.
func pingBandit(t *testing.T, e *Engine) {
	t.Helper()
	if _, err := e.system.Root.RequestFuture(e.deps.Dir.Bandit, &supervisors.Ping{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
}

// Rewards for 100,000 invented model names once spawned an arm actor each; now the arms are bounded
// by the catalog times the categories, the board does not change, and no actor is spawned for them.
func TestRewardsForInventedNamesSpawnNoArm(t *testing.T) {
	e := newEngine(t, 1)
	run(t, e, 3) // some arms exist
	board := e.deps.Dir.Arms
	arms, published, slots := actors.Processes(e.system, actors.RootName+"/"+actors.BanditName+"/"), fmt.Sprint(board.Published()), board.Slots()
	dropped, votesDropped := e.deps.Dir.Dropped(actors.KindArm, actors.DropUnknownModel), e.deps.Dir.Dropped(actors.KindBandit, actors.DropUnknownModel)
	const invented = 10000
	for i := range invented {
		name := fmt.Sprintf("invented-model-%05d", i)
		actors.Reward(e.system.Root, e.deps.Dir.Bandit, &messages.Reward{Model: name, Category: "general", Reward: 1, Reason: "contributed"})
		board.Arm("general", name) // reading an unknown arm adds nothing either
	}
	// A real model in invented categories, and impossible votes, spawn nothing either.
	model := e.Catalog().All()[0].ID
	for i := range 100 {
		e.system.Root.Send(e.deps.Dir.Bandit, &messages.Reward{Model: model, Category: fmt.Sprint("invented-category-", i), Reward: 1})
	}
	board.VoteSent()
	e.system.Root.Send(e.deps.Dir.Bandit, &messages.Votes{Category: "general", Models: []string{"invented-model-00001"}, Groups: []int32{0}})
	pingBandit(t, e)

	if got := actors.Processes(e.system, actors.RootName+"/"+actors.BanditName+"/"); got != arms {
		t.Fatalf("%d actors under the bandit after the invented rewards, %d before", got, arms)
	}
	if got := fmt.Sprint(board.Published()); got != published || board.Slots() != slots {
		t.Fatalf("the board changed: %d slots, %d before", board.Slots(), slots)
	}
	// Each reward went to its arm and to the model's all-categories arm: the arms' writer dropped both;
	// the bandit dropped the vote.
	waitUntil(t, func() bool {
		return e.deps.Dir.Dropped(actors.KindArm, actors.DropUnknownModel)-dropped == 2*invented &&
			e.deps.Dir.Dropped(actors.KindArm, actors.DropUnknownCategory) == 100
	})
	if got := e.deps.Dir.Dropped(actors.KindBandit, actors.DropUnknownModel) - votesDropped; got != 1 {
		t.Fatalf("%d votes counted as of unknown models, want 1", got)
	}
	if board.VotesPending() {
		t.Fatal("a dropped vote keeps Settle waiting")
	}
	// The bandit still learns.
	run(t, e, 1)
}

// gated holds every call until open is closed.
type gated struct {
	providers.Backend
	open chan struct{}
}

func (g gated) Complete(ctx context.Context, call providers.Call) (providers.Reply, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return providers.Reply{}, ctx.Err()
	}
	return g.Backend.Complete(ctx, call)
}

// A coordinator takes only what concerns its own request's jobs, and keeps serving after the rest.
func TestACoordinatorDropsWhatIsNotItsOwn(t *testing.T) {
	cfg := config.Default()
	for p := range cfg.RateLimits.Providers {
		cfg.RateLimits.Providers[p] = ratelimit.Limits{RequestsPerMinute: 5000, Concurrency: 128}
	}
	cfg.Sim.LatencyScale, cfg.Sim.Faults = 0, providers.Fault{}
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sim := providers.NewSim(cat.All(), cfg.Sim)
	open := make(chan struct{})
	e, err := New(Options{Config: cfg, Log: zap.NewNop(), Backend: gated{Backend: sim, open: open}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	done := make(chan *messages.Execution, 1)
	go func() {
		exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "held", Category: "general",
			Task: "Which is larger?\nA) 2\nB) 3\nC) 1\nD) 0"})
		if err != nil {
			t.Error(err)
		}
		done <- exec
	}()
	inFlight := func() bool {
		n := 0
		for _, w := range e.Workers() {
			n += w.InFlight
		}
		return n > 0
	}
	waitUntil(t, inFlight)
	coordinator := actor.NewPID(e.system.Address(), actors.RootName+"/"+actors.RequestsName+"/held")
	rows := []struct {
		desc   string
		msg    any
		reason string
	}{
		{"another request's refusal", &messages.Permit{JobId: "other/0", Reason: "breaker_open"}, actors.DropWrongTarget},
		{"a refusal of a job it never made", &messages.Permit{JobId: "held/99", Reason: "breaker_open"}, actors.DropWrongTarget},
		{"a result of another model", &messages.JobResult{JobId: "held/0", Model: "not-the-job's", Ok: true, Text: "A"}, actors.DropWrongTarget},
		{"a consensus it did not ask for", &messages.ConsensusResult{Answer: "A"}, actors.DropUnexpected},
		{"a nil result", (*messages.JobResult)(nil), actors.DropWrongTarget},
		{"a message it does not take", &messages.Votes{}, actors.DropUnknownMessage},
	}
	want := map[string]int64{}
	for _, row := range rows {
		e.system.Root.Send(coordinator, row.msg)
		want[row.reason]++
	}
	waitUntil(t, func() bool {
		for reason, n := range want {
			if e.deps.Dir.Dropped(actors.KindCoordinator, reason) != n {
				return false
			}
		}
		return true
	})
	close(open)
	select {
	case exec := <-done:
		if exec.GetStatusCode() != 200 {
			t.Fatalf("the request after the dropped messages: %d %v", exec.GetStatusCode(), exec.GetError())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
	}
}

func TestTheRequestSupervisorDropsMalformedRequests(t *testing.T) {
	e := newEngine(t, 1)
	// Without a reply address nobody would hear the answer, and the coordinator would answer a nil one.
	e.system.Root.Send(e.deps.Dir.Requests, &messages.RouteRequest{RequestId: "nobody", Task: "Summarize: x."})
	waitUntil(t, func() bool { return e.deps.Dir.Dropped(actors.KindRequests, actors.DropNoReplyTo) == 1 })
	tests := []struct {
		desc   string
		req    *messages.RouteRequest
		reason string
	}{
		{"a request id that is a path", &messages.RouteRequest{RequestId: "../recorder", Task: "Summarize: x."}, actors.DropMalformed},
		{"no request id", &messages.RouteRequest{Task: "Summarize: x."}, actors.DropNoRequestID},
	}
	for _, tt := range tests {
		before := e.deps.Dir.Dropped(actors.KindRequests, tt.reason)
		res, err := e.system.Root.RequestFuture(e.deps.Dir.Requests, tt.req, 10*time.Second).Result()
		if err != nil {
			t.Fatalf("%s: %v", tt.desc, err)
		}
		if exec := res.(*messages.Execution); exec.StatusCode != 400 || exec.Error.Code != string(resilience.MalformedRequest) {
			t.Fatalf("%s: answered %d %v", tt.desc, exec.StatusCode, exec.Error)
		}
		if e.deps.Dir.Dropped(actors.KindRequests, tt.reason) != before+1 {
			t.Fatalf("%s: not counted as %s", tt.desc, tt.reason)
		}
	}
	if exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: "good", Category: "general", Task: "Summarize: the cache ran out of memory."}); err != nil || exec.StatusCode != 200 {
		t.Fatalf("a good request after the malformed ones: %v %v", exec.GetError(), err)
	}
}
