// Package exactcache owns the decisions of the exact answer cache: the identity by which an identical
// request finds an answer, how long an answer is kept, and what of a request's record a later one
// answered from the cache carries. Storing the answers is an adapter's (internal/adapters/answercache).
package exactcache

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
)

// MaxTTL bounds how long an answer is kept, whatever asks for longer.
const MaxTTL = 30 * 24 * time.Hour

// Choice is how a request uses the cache: whether it reads it, and how long its own answer is kept
// (0: not kept).
type Choice struct {
	Read bool
	TTL  time.Duration
}

// Choose decides a request's use of the cache from the caller's choice, else its key's time to live,
// else its blueprint's: no_cache neither reads nor writes; a time to live reads and keeps the answer
// that long. byBlueprint says that some blueprint keeps answers, so a request whose blueprint is
// chosen later (classified) reads the cache too; its answer's time to live is then its blueprint's
// (KeepFor).
func Choose(caller *messages.CacheChoice, keyTTL time.Duration, byBlueprint bool) Choice {
	switch {
	case caller.GetNoCache():
		return Choice{}
	case caller.GetTtlSeconds() > 0:
		return Choice{Read: true, TTL: min(time.Duration(caller.GetTtlSeconds())*time.Second, MaxTTL)}
	case keyTTL > 0:
		return Choice{Read: true, TTL: min(keyTTL, MaxTTL)}
	}
	return Choice{Read: byBlueprint}
}

// KeepFor is how long an answer is kept: the request's choice, else its blueprint's time to live. Only
// a whole answer (200) is kept.
func KeepFor(c Choice, exec *messages.Execution, blueprintTTL time.Duration) time.Duration {
	if exec.GetStatusCode() != 200 || exec.GetCachedFrom() != "" || (c.TTL == 0 && !c.Read) {
		return 0
	}
	if c.TTL > 0 {
		return c.TTL
	}
	return min(blueprintTTL, MaxTTL)
}

// Key is the identity of a request's answer within scope (the caller's team, else its key, else the
// admin token's ""): what the models are asked (the task, the conversation, the tools, the output
// format, the sampling parameters) and whom (the models named, the fallbacks, a direct call or the
// blueprint, strategy and quorum of a panel, and the models its key lets a panel choose among). Ids,
// times, the caller's other limits and where progress goes are not part of it.
func Key(req *messages.RouteRequest, scope string) string {
	view := &messages.RouteRequest{Task: req.Task, Category: req.Category, Models: req.Models, Strategy: req.Strategy, Workers: req.Workers,
		MinResponses: req.MinResponses, QuorumGraceSeconds: req.QuorumGraceSeconds, Quorum: req.Quorum, QuorumTau: req.QuorumTau, Ask: req.Ask,
		StrictParameters: req.StrictParameters, Fallbacks: req.Fallbacks, Direct: req.Direct, AllowedModels: req.AllowedModels, PricedOnly: req.PricedOnly}
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(view) // a message of ours always marshals
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil))
}

// Kept is what the cache keeps of a whole answer's record: what a later request's record carries of it
// (Hit), and no more.
func Kept(exec *messages.Execution) *messages.Execution {
	return &messages.Execution{RequestId: exec.RequestId, Answer: exec.Answer, ToolCalls: exec.ToolCalls, FinishReason: exec.FinishReason,
		Decision: exec.Decision, Classification: exec.Classification, Blueprint: exec.Blueprint}
}

// Hit is the record of a request answered from the cache with the answer of original: the answer,
// its tool calls, its finish, the decision that chose it and the plan that asked for it, under the
// request's own id; no call, no usage, no cost, and cached_from naming the original.
func Hit(req *messages.RouteRequest, original *messages.Execution, node string) *messages.Execution {
	return &messages.Execution{RequestId: req.RequestId, ClientRequestId: req.ClientRequestId, ReceivedAt: req.ReceivedAt, Task: req.Task,
		Metadata: req.Metadata, TimeoutSeconds: req.TimeoutSeconds, KeyId: req.KeyId, TeamId: req.TeamId, NodeId: node, StatusCode: 200,
		Answer: original.Answer, ToolCalls: original.ToolCalls, FinishReason: original.FinishReason, Decision: original.Decision,
		Classification: original.Classification, Blueprint: original.Blueprint, CachedFrom: original.RequestId,
		Phases: &messages.Phases{}, Retries: []*messages.Retry{}}
}
