package actors

import (
	"github.com/conclave-ai/conclave/internal/arms"
	"math"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
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

var (
	checkNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	somePID  = actor.NewPID("nonhost", "inbox")
)

func inAMinute() *timestamppb.Timestamp { return timestamppb.New(checkNow.Add(time.Minute)) }

func goodJob() *messages.Job {
	return &messages.Job{JobId: "r/0", RequestId: "r", Kind: providers.KindAnswer, Model: "m", Provider: "groq", MaxTokens: 1024,
		Deadline: inAMinute(), TimeoutSeconds: 30}
}

func goodAcquire() *messages.Acquire {
	return &messages.Acquire{JobId: "r/0", Model: "m", Tokens: 100, Deadline: inAMinute(), ReplyTo: somePID,
		Dispatch: &messages.Dispatch{Job: goodJob(), ReplyTo: somePID}, DispatchTo: somePID}
}

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

func TestCheckAcquire(t *testing.T) {
	cat := checkCatalog(t)
	nan := math.NaN()
	runChecks(t, goodAcquire, []check[*messages.Acquire]{
		{"a well-formed acquisition", nil, ""},
		{"one without its job to dispatch", func(m *messages.Acquire) { m.Dispatch, m.DispatchTo = nil, nil }, ""},
		{"a deadline passed already is the provider's to refuse", func(m *messages.Acquire) { m.Deadline = timestamppb.New(checkNow.Add(-time.Hour)) }, ""},
		{"no reply address", func(m *messages.Acquire) { m.ReplyTo = nil }, DropNoReplyTo},
		{"no job id", func(m *messages.Acquire) { m.JobId = "" }, DropNoJobID},
		{"a job id of a megabyte", func(m *messages.Acquire) { m.JobId = string(make([]byte, 1<<20)) }, DropMalformed},
		{"a model the catalog does not hold", func(m *messages.Acquire) { m.Model, m.Dispatch.Job.Model = "invented", "invented" }, DropUnknownModel},
		{"another provider's model", func(m *messages.Acquire) { m.Model, m.Dispatch.Job.Model = "x", "x" }, DropOtherProvider},
		{"negative tokens", func(m *messages.Acquire) { m.Tokens = -1 }, DropBadCount},
		{"absurd tokens", func(m *messages.Acquire) { m.Tokens = math.MaxInt32 }, DropBadCount},
		{"no deadline", func(m *messages.Acquire) { m.Deadline = nil }, DropNoTime},
		{"an invalid deadline", func(m *messages.Acquire) { m.Deadline = &timestamppb.Timestamp{Nanos: -1} }, DropBadTime},
		{"a deadline a year ahead", func(m *messages.Acquire) { m.Deadline = timestamppb.New(checkNow.AddDate(1, 0, 0)) }, DropBadTime},
		{"a job to dispatch with no worker", func(m *messages.Acquire) { m.DispatchTo = nil }, DropNoReplyTo},
		{"a worker with no job", func(m *messages.Acquire) { m.Dispatch = nil }, DropMalformed},
		{"a job to dispatch of another id", func(m *messages.Acquire) { m.Dispatch.Job.JobId = "r/1" }, DropMalformed},
		{"a job to dispatch without its answer's address", func(m *messages.Acquire) { m.Dispatch.ReplyTo = nil }, DropNoReplyTo},
		{"a job to dispatch with a NaN timeout", func(m *messages.Acquire) { m.Dispatch.Job.TimeoutSeconds = nan }, DropBadNumber},
	}, func(m *messages.Acquire) string { return checkAcquire(m, "groq", cat, checkNow) })
	if got := checkAcquire(nil, "groq", cat, checkNow); got != DropMalformed {
		t.Errorf("a nil acquisition: %q", got)
	}
	if got := checkAcquire(goodAcquire(), "groq", nil, checkNow); got != DropUnknownModel {
		t.Errorf("without a catalog every model is unknown: %q", got)
	}
}

func TestCheckDispatch(t *testing.T) {
	cat := checkCatalog(t)
	good := func() *messages.Dispatch { return &messages.Dispatch{Job: goodJob(), ReplyTo: somePID} }
	inf := math.Inf(1)
	runChecks(t, good, []check[*messages.Dispatch]{
		{"a well-formed job", nil, ""},
		{"an arbiter's job", func(d *messages.Dispatch) { d.Job.Kind = providers.KindArbiter }, ""},
		{"no reply address", func(d *messages.Dispatch) { d.ReplyTo = nil }, DropNoReplyTo},
		{"no job", func(d *messages.Dispatch) { d.Job = nil }, DropMalformed},
		{"no job id", func(d *messages.Dispatch) { d.Job.JobId = "" }, DropNoJobID},
		{"an unknown kind of call", func(d *messages.Dispatch) { d.Job.Kind = "shell" }, DropMalformed},
		{"a model the catalog does not hold", func(d *messages.Dispatch) { d.Job.Model = "invented" }, DropUnknownModel},
		{"a model under another provider", func(d *messages.Dispatch) { d.Job.Provider = "other" }, DropOtherProvider},
		{"negative max tokens", func(d *messages.Dispatch) { d.Job.MaxTokens = -5 }, DropBadCount},
		{"a negative attempt", func(d *messages.Dispatch) { d.Job.Attempt = -1 }, DropBadCount},
		{"an infinite timeout", func(d *messages.Dispatch) { d.Job.TimeoutSeconds = inf }, DropBadNumber},
		{"a negative timeout", func(d *messages.Dispatch) { d.Job.TimeoutSeconds = -1 }, DropBadNumber},
		{"a NaN temperature", func(d *messages.Dispatch) { t := math.NaN(); d.Job.Temperature = &t }, DropBadNumber},
		{"no deadline", func(d *messages.Dispatch) { d.Job.Deadline = nil }, DropNoTime},
	}, func(d *messages.Dispatch) string { return checkDispatch(d, cat, checkNow) })
}

func TestCheckOutcome(t *testing.T) {
	good := func() *messages.Outcome {
		return &messages.Outcome{JobId: "r/0", Model: "m", Tokens: 300, ProviderEffect: messages.Effect_EFFECT_SUCCESS, BlockModelSeconds: 2,
			RateLimit: &messages.RateLimitInfo{LimitRequests: 100, RemainingRequests: -1, ResetRequestsSeconds: 10}}
	}
	runChecks(t, good, []check[*messages.Outcome]{
		{"a well-formed outcome", nil, ""},
		{"no job id", func(o *messages.Outcome) { o.JobId = "" }, DropNoJobID},
		{"negative tokens", func(o *messages.Outcome) { o.Tokens = -1 }, DropBadCount},
		{"an effect that does not exist", func(o *messages.Outcome) { o.ModelEffect = 7 }, DropMalformed},
		{"a NaN block", func(o *messages.Outcome) { o.BlockProviderSeconds = math.NaN() }, DropBadNumber},
		{"a negative block", func(o *messages.Outcome) { o.BlockModelSeconds = -3 }, DropBadNumber},
		{"a block of a century", func(o *messages.Outcome) { o.BlockModelSeconds = 100 * 365 * 86400 }, DropBadNumber},
		{"a negative count of remaining requests", func(o *messages.Outcome) { o.RateLimit.RemainingRequests = -9 }, DropBadCount},
		{"an infinite reset", func(o *messages.Outcome) { o.RateLimit.ResetTokensSeconds = math.Inf(1) }, DropBadNumber},
	}, checkOutcome)
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
	if got := checkArmReward(nil, cat, board); got != DropMalformed {
		t.Errorf("a nil reward: %q", got)
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
		{"absurdly many votes", func(v *messages.Votes) {
			v.Models, v.Groups = make([]string, MaxVotes+1), make([]int32, MaxVotes+1)
		}, DropBadCount},
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
		{"a failure code the coordinator does not answer with", func(r *messages.ConsensusResult) {
			r.Failure, r.FailureCode = "none", string(resilience.InvalidAPIKey)
		}, DropMalformed},
	}, func(r *messages.ConsensusResult) string { return checkConsensusResult(r, 2) })
}

func TestCheckCoordinatorInputs(t *testing.T) {
	const req = "req-1"
	tests := []struct {
		desc string
		got  string
		want string
	}{
		{"a refusal of one of its jobs", checkPermit(&messages.Permit{JobId: req + "/3", Reason: "breaker_open", RetryAfterSeconds: 5}, req), ""},
		{"a refusal for a stopped provider", checkPermit(&messages.Permit{JobId: req + "/0", Reason: PermitProviderStopped}, req), ""},
		{"a permit of another request's job", checkPermit(&messages.Permit{JobId: "req-2/3", Granted: true}, req), DropWrongTarget},
		{"a permit of a request whose id it extends", checkPermit(&messages.Permit{JobId: req + "0/3", Granted: true}, req), DropWrongTarget},
		{"a permit of no job", checkPermit(&messages.Permit{Granted: true}, req), DropWrongTarget},
		{"a refusal for a reason no provider gives", checkPermit(&messages.Permit{JobId: req + "/0", Reason: "because"}, req), DropMalformed},
		{"a refusal with a NaN wait", checkPermit(&messages.Permit{JobId: req + "/0", Reason: "rate_limited", RetryAfterSeconds: math.NaN()}, req), DropBadNumber},
		{"the arbiter's permit", checkArbiterPermit(&messages.Permit{JobId: req + "/arbiter", Granted: true}, req+"/arbiter"), ""},
		{"another job's permit to the arbiter", checkArbiterPermit(&messages.Permit{JobId: req + "/0", Granted: true}, req+"/arbiter"), DropWrongTarget},
		{"an arbiter's refusal for an invented reason", checkArbiterPermit(&messages.Permit{JobId: req + "/arbiter"}, req+"/arbiter"), DropMalformed},
		{"a start with its budget", checkJobStarted(&messages.JobStarted{JobId: req + "/0", BudgetSeconds: 30}, req), ""},
		{"a start with a negative budget", checkJobStarted(&messages.JobStarted{JobId: req + "/0", BudgetSeconds: -30}, req), DropBadNumber},
		{"a start of an arbiter's job", checkJobStarted(&messages.JobStarted{JobId: req + "/arbiter"}, req), DropWrongTarget},
		{"a queued job of its own", checkJobQueued(&messages.JobQueued{JobId: req + "/1"}, req), ""},
		{"a result", checkJobResult(&messages.JobResult{JobId: req + "/1", Ok: true, LatencyMs: 1200, Usage: &messages.Usage{InputTokens: 9}}, req), ""},
		{"a result with negative tokens", checkJobResult(&messages.JobResult{JobId: req + "/1", Usage: &messages.Usage{OutputTokens: -1}}, req), DropBadCount},
		{"a result with an infinite latency", checkJobResult(&messages.JobResult{JobId: req + "/1", LatencyMs: math.Inf(1)}, req), DropBadNumber},
		{"a result with a missing tool call", checkJobResult(&messages.JobResult{JobId: req + "/1", Ok: true, ToolCalls: []*messages.ToolCall{nil}}, req), DropMalformed},
		{"a result with absurdly many tool calls", checkJobResult(&messages.JobResult{JobId: req + "/1", Ok: true, ToolCalls: make([]*messages.ToolCall, MaxToolCalls+1)}, req), DropBadCount},
		{"a call of a function no tool names still counts", checkJobResult(&messages.JobResult{JobId: req + "/1", Ok: true,
			ToolCalls: []*messages.ToolCall{{Id: "1", Name: "invented", Arguments: "{broken"}}}, req), ""},
		{"a result with a negative cost", checkJobResult(&messages.JobResult{JobId: req + "/1", CostNanos: -1}, req), DropBadNumber},
		{"a result with a huge error kind", checkJobResult(&messages.JobResult{JobId: req + "/1", ErrorKind: string(make([]byte, 100))}, req), DropMalformed},
		{"a result of another request", checkJobResult(&messages.JobResult{JobId: "other/1"}, req), DropWrongTarget},
		{"any job's result, with no id", checkJobResult(&messages.JobResult{}, ""), DropNoJobID},
		{"its caller left", checkCancelRequest(&messages.CancelRequest{RequestId: req, Code: string(resilience.ClientClosed)}, req), ""},
		{"the shutdown stops every request", checkCancelRequest(&messages.CancelRequest{Code: string(resilience.ShuttingDown)}, req), ""},
		{"a cancellation with an invented code", checkCancelRequest(&messages.CancelRequest{RequestId: req, Code: "teapot"}, req), DropMalformed},
		{"another request's cancellation", checkCancelRequest(&messages.CancelRequest{RequestId: "other", Code: string(resilience.ClientClosed)}, req), DropWrongTarget},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.desc, tt.got, tt.want)
		}
	}
}

func TestCheckRequestsInputs(t *testing.T) {
	timeout, nan := 30.0, math.NaN()
	good := func() *messages.RouteRequest {
		return &messages.RouteRequest{RequestId: "0b7c6c1e-5a3a-4cf1-9a57-4f1c3f5c2a10", Task: "Summarize this.", TimeoutSeconds: &timeout,
			ReceivedAt: timestamppb.New(checkNow)}
	}
	runChecks(t, good, []check[*messages.RouteRequest]{
		{"a well-formed request", nil, ""},
		{"no request id", func(r *messages.RouteRequest) { r.RequestId = "" }, DropNoRequestID},
		{"a request id that is a path", func(r *messages.RouteRequest) { r.RequestId = "../providers/groq" }, DropMalformed},
		{"a request id shaped like a generated name", func(r *messages.RouteRequest) { r.RequestId = "$1" }, DropMalformed},
		{"no task", func(r *messages.RouteRequest) { r.Task = "" }, DropMalformed},
		{"a NaN timeout", func(r *messages.RouteRequest) { r.TimeoutSeconds = &nan }, DropBadNumber},
		{"an invalid receipt time", func(r *messages.RouteRequest) { r.ReceivedAt = &timestamppb.Timestamp{Nanos: 2e9} }, DropBadTime},
		{"an output format no request has", func(r *messages.RouteRequest) {
			r.Ask = &messages.Ask{ResponseFormat: &messages.OutputFormat{Type: "xml"}}
		}, DropMalformed},
		{"tools past the consensus input's bound", func(r *messages.RouteRequest) {
			r.Ask = &messages.Ask{Tools: make([]*messages.Tool, MaxTools+1)}
		}, DropBadCount},
	}, func(r *messages.RouteRequest) string { return CheckRouteRequest(r, true) })
	tests := []struct {
		desc string
		got  string
		want string
	}{
		{"a request nobody waits for", CheckRouteRequest(good(), false), DropNoReplyTo},
		{"a caller's cancellation", CheckCancel(&messages.CancelRequest{RequestId: "r", Code: string(resilience.ClientClosed)}), ""},
		{"the shutdown's cancellation of all", CheckCancel(&messages.CancelRequest{Code: string(resilience.ShuttingDown)}), ""},
		{"a caller's cancellation of all", CheckCancel(&messages.CancelRequest{Code: string(resilience.ClientClosed)}), DropNoRequestID},
		{"an invented code", CheckCancel(&messages.CancelRequest{RequestId: "r", Code: "x"}), DropMalformed},
		{"a record", checkExecution(&messages.Execution{RequestId: "r"}), ""},
		{"a record without its id", checkExecution(&messages.Execution{}), DropNoRequestID},
		{"a lookup", checkAsk(true, "r", true), ""},
		{"a lookup nobody waits for", checkAsk(false, "r", true), DropNoReplyTo},
		{"a lookup of no record", checkAsk(true, "", true), DropNoRequestID},
		{"a flush", checkAsk(true, "", false), ""},
		{"a step of its request", checkProgress(&messages.Progress{RequestId: "r", Event: "reply", LatencyMs: 20, Attempt: 1}, "r"), ""},
		{"a step of another request", checkProgress(&messages.Progress{RequestId: "s", Event: "reply"}, "r"), DropWrongTarget},
		{"an invented step", checkProgress(&messages.Progress{RequestId: "r", Event: "exfiltrate"}, "r"), DropMalformed},
		{"a step with a negative time", checkProgress(&messages.Progress{RequestId: "r", Event: "retry", DelayMs: -1}, "r"), DropBadNumber},
		{"a step with a negative attempt", checkProgress(&messages.Progress{RequestId: "r", Event: "dispatched", Attempt: -1}, "r"), DropBadCount},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.desc, tt.got, tt.want)
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
