package actors

import (
	"github.com/conclave-ai/conclave/internal/arms"
	"math"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// checkCatalog holds m and n of groq, and x of another provider.
func checkCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	c, err := catalog.New([]catalog.Model{
		{ID: "m", Provider: "groq", ContextWindow: 8000, Tier: 2},
		{ID: "n", Provider: "groq", ContextWindow: 8000, Tier: 2},
		{ID: "x", Provider: "other", ContextWindow: 8000, Tier: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var checkNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func inAMinute() *timestamppb.Timestamp { return timestamppb.New(checkNow.Add(time.Minute)) }

// check is one row of a table of input checks: a message changed from a good one, and the reason it is
// dropped ("" when it is fine).
type check[M any] struct {
	desc   string
	change func(M)
	want   string
}

func runChecks[M any](t *testing.T, good func() M, rows []check[M], verdict func(M) string) {
	t.Helper()
	for _, tt := range rows {
		m := good()
		if tt.change != nil {
			tt.change(m)
		}
		if got := verdict(m); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.desc, got, tt.want)
		}
	}
}

// A provider and its workers take only their own catalog models: what an acquisition and a dispatch
// are checked for.
func TestCheckModel(t *testing.T) {
	cat := checkCatalog(t)
	tests := []struct {
		desc            string
		provider, model string
		want            string
	}{
		{"the provider's catalog model", "groq", "m", ""},
		{"a model the catalog does not hold", "groq", "invented", DropUnknownModel},
		{"no model", "groq", "", DropUnknownModel},
		{"another provider's model", "groq", "x", DropOtherProvider},
	}
	for _, tt := range tests {
		if got := checkModel(cat, tt.provider, tt.model); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.desc, got, tt.want)
		}
	}
	if got := checkModel(nil, "groq", "m"); got != DropUnknownModel {
		t.Errorf("without a catalog every model is unknown: %q", got)
	}
}

func TestCheckPeerOpened(t *testing.T) {
	good := func() *messages.PeerBreakerOpened {
		return &messages.PeerBreakerOpened{Provider: "groq", OpenUntil: inAMinute(), Node: "b"}
	}
	runChecks(t, good, []check[*messages.PeerBreakerOpened]{
		{"a well-formed opening", nil, ""},
		{"another provider's", func(m *messages.PeerBreakerOpened) { m.Provider = "other" }, DropWrongTarget},
		{"no time", func(m *messages.PeerBreakerOpened) { m.OpenUntil = nil }, DropNoTime},
		{"an invalid time", func(m *messages.PeerBreakerOpened) { m.OpenUntil = &timestamppb.Timestamp{Seconds: math.MaxInt64} }, DropBadTime},
	}, func(m *messages.PeerBreakerOpened) string { return checkPeerOpened(m, "groq") })
}

func TestCheckRewards(t *testing.T) {
	cat := checkCatalog(t)
	board := arms.NewBoard(cat.All(), []string{"general"}, bandit.DefaultPrior, 0)
	good := func() *messages.Reward {
		return &messages.Reward{Model: "m", Category: "general", Reward: 1, Reason: "contributed"}
	}
	rows := []check[*messages.Reward]{
		{"a well-formed reward", nil, ""},
		{"a reward to the all-categories arm", func(r *messages.Reward) { r.Category = bandit.AllCategories }, ""},
		{"zero is a reward", func(r *messages.Reward) { r.Reward = 0 }, ""},
		{"an invented model", func(r *messages.Reward) { r.Model = "invented-0001" }, DropUnknownModel},
		{"no model", func(r *messages.Reward) { r.Model = "" }, DropUnknownModel},
		{"an invented category", func(r *messages.Reward) { r.Category = "invented" }, DropUnknownCategory},
		{"no category", func(r *messages.Reward) { r.Category = "" }, DropUnknownCategory},
		{"a NaN reward", func(r *messages.Reward) { r.Reward = math.NaN() }, DropBadReward},
		{"an infinite reward", func(r *messages.Reward) { r.Reward = math.Inf(-1) }, DropBadReward},
		{"a reward above one", func(r *messages.Reward) { r.Reward = 1.5 }, DropBadReward},
		{"a negative reward", func(r *messages.Reward) { r.Reward = -0.1 }, DropBadReward},
	}
	runChecks(t, good, rows, func(r *messages.Reward) string { return checkArmReward(r, cat, board) })
	if got := checkArmReward(nil, cat, board); got == "" {
		t.Error("a nil reward teaches an arm")
	}
}

func TestCheckVotes(t *testing.T) {
	cat := checkCatalog(t)
	board := arms.NewBoard(cat.All(), []string{"general"}, bandit.DefaultPrior, 0)
	good := func() *messages.Votes {
		return &messages.Votes{Category: "general", Models: []string{"m", "n", "x"}, Groups: []int32{0, 0, -1}}
	}
	runChecks(t, good, []check[*messages.Votes]{
		{"well-formed votes", nil, ""},
		{"an invented category", func(v *messages.Votes) { v.Category = "invented" }, DropUnknownCategory},
		{"the all-categories arm is no category of prompts", func(v *messages.Votes) { v.Category = bandit.AllCategories }, DropUnknownCategory},
		{"an invented model", func(v *messages.Votes) { v.Models[1] = "invented" }, DropUnknownModel},
		{"fewer groups than models", func(v *messages.Votes) { v.Groups = v.Groups[:2] }, DropMalformed},
		{"a group past the answers", func(v *messages.Votes) { v.Groups[0] = math.MaxInt32 }, DropMalformed},
		{"a group below none", func(v *messages.Votes) { v.Groups[0] = -2 }, DropMalformed},
		{"later marks for every model", func(v *messages.Votes) { v.Later = []bool{false, false, true} }, ""},
		{"later marks for some models only", func(v *messages.Votes) { v.Later = []bool{false, true} }, DropMalformed},
		{"a truth for some models only", func(v *messages.Votes) { v.Right = []bool{true} }, DropMalformed},
	}, func(v *messages.Votes) string { return CheckVotes(v, cat, board) })
}

func TestCheckConsensus(t *testing.T) {
	goodOut := func() *messages.ConsensusResult {
		return &messages.ConsensusResult{Answer: "A", Contributed: []bool{true, true}, Weighted: []float64{0.5, 0.5},
			Decision: &messages.ArbiterDecision{Chosen: 1, Scores: []float64{1, 1}}}
	}
	runChecks(t, goodOut, []check[*messages.ConsensusResult]{
		{"a decision on both answers", nil, ""},
		{"a failure", func(r *messages.ConsensusResult) { r.Failure, r.Decision, r.Contributed = "internal", nil, nil }, ""},
		{"no decision", func(r *messages.ConsensusResult) { r.Decision = nil }, DropMalformed},
		{"a verdict short of an answer", func(r *messages.ConsensusResult) { r.Contributed = r.Contributed[:1] }, DropMalformed},
		{"a score short of an answer", func(r *messages.ConsensusResult) { r.Decision.Scores = nil }, DropMalformed},
		{"a chosen answer that does not exist", func(r *messages.ConsensusResult) { r.Decision.Chosen = 2 }, DropMalformed},
		{"groups for some answers only", func(r *messages.ConsensusResult) { r.Groups = []int32{0} }, DropMalformed},
		{"a NaN weight", func(r *messages.ConsensusResult) { r.Weighted[0] = math.NaN() }, DropBadNumber},
		{"a ballot for each answer", func(r *messages.ConsensusResult) { r.Decision.Ballots = []*messages.Ballot{{Valid: true}, {Group: -1}} }, ""},
		{"ballots for some answers only", func(r *messages.ConsensusResult) { r.Decision.Ballots = []*messages.Ballot{{Valid: true}} }, DropMalformed},
		{"no valid answer, with each ballot", func(r *messages.ConsensusResult) {
			r.Failure, r.FailureCode, r.Contributed = "none", string(resilience.NoValidAnswer), nil
			r.Decision = &messages.ArbiterDecision{Chosen: -1, Ballots: []*messages.Ballot{{Group: -1}, {Group: -1}}}
		}, ""},
		{"no valid answer, without the ballots", func(r *messages.ConsensusResult) {
			r.Failure, r.FailureCode, r.Decision = "none", string(resilience.NoValidAnswer), nil
		}, DropMalformed},
		{"an infinite score", func(r *messages.ConsensusResult) { r.Decision.Scores[1] = math.Inf(1) }, DropBadNumber},
	}, func(r *messages.ConsensusResult) string { return checkConsensusResult(r, 2) })
	if got := checkConsensusResult(nil, 2); got != DropMalformed {
		t.Errorf("no result: %q", got)
	}
}

// A coordinator's machine indexes by the number of a job of its own request: the id of any other
// names no job.
func TestJobOf(t *testing.T) {
	const req = "req-1"
	tests := []struct {
		desc  string
		jobID string
		seq   int
		ok    bool
	}{
		{"one of its jobs", req + "/3", 3, true},
		{"its first job", req + "/0", 0, true},
		{"another request's job", "req-2/3", 0, false},
		{"a job of a request whose id it extends", req + "0/3", 0, false},
		{"no job", "", 0, false},
		{"its request's id alone", req + "/", 0, false},
		{"its arbiter's call", req + "/arbiter", 0, false},
		{"a job under one of its jobs", req + "/3/1", 0, false},
	}
	for _, tt := range tests {
		if seq, ok := jobOf(tt.jobID, req); seq != tt.seq || ok != tt.ok {
			t.Errorf("%s: %d %v, want %d %v", tt.desc, seq, ok, tt.seq, tt.ok)
		}
	}
}

func TestActorKind(t *testing.T) {
	tests := []struct{ path, want string }{
		{"conclave", KindSupervisor},
		{"conclave/providers", KindSupervisor},
		{"conclave/providers/groq", KindProvider},
		{"conclave/fleet/worker-1", KindWorker},
		{"conclave/bandit", KindBandit},
		{"conclave/bandit/general|meta-llama/llama-3-70b", KindArm},
		{"conclave/bandit/reliability", KindReliability},
		{"conclave/recorder", KindRecorder},
		{"conclave/requests", KindRequests},
		{"conclave/requests/0b7c", KindCoordinator},
		{"conclave/requests/0b7c/$3", KindConsensus},
		{"elsewhere/x", KindOther},
	}
	for _, tt := range tests {
		if got := ActorKind(tt.path); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.path, got, tt.want)
		}
	}
}
