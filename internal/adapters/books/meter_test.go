package books

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/ledger"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/tokens"
	"github.com/conclave-ai/conclave/messages"
)

func TestUsageOfACall(t *testing.T) {
	s := tokens.For("openai/gpt-4o-mini", "gpt")
	cut := &resilience.Error{Kind: resilience.Cancelled}
	for _, c := range []struct {
		desc  string
		reply providers.Reply
		err   error
		sent  string
		want  providers.Usage
	}{
		{"the provider's usage wins", providers.Reply{Text: "hello world", Usage: providers.Usage{InputTokens: 9, OutputTokens: 4}}, nil, "",
			providers.Usage{InputTokens: 9, OutputTokens: 4}},
		{"an answer without usage is counted", providers.Reply{Text: "hello world"}, nil, "", providers.Usage{InputTokens: 20, OutputTokens: 2, Estimated: true}},
		{"a cut stream pays for what it had sent", providers.Reply{}, cut, "hello world", providers.Usage{InputTokens: 20, OutputTokens: 2, Estimated: true}},
		{"a call cut before anything came pays for its prompt", providers.Reply{}, &resilience.Error{Kind: resilience.UpstreamTimeout}, "",
			providers.Usage{InputTokens: 20, Estimated: true}},
		{"the caller's leaving is a cut", providers.Reply{}, context.Canceled, "", providers.Usage{InputTokens: 20, Estimated: true}},
		{"a refusal costs nothing", providers.Reply{}, &resilience.Error{Kind: resilience.ProviderUnavailable, Status: 503}, "", providers.Usage{}},
		{"a refused connection costs nothing", providers.Reply{}, &resilience.Error{Kind: resilience.ConnectionRefused}, "", providers.Usage{}},
		{"a stream broken after it began pays for what came", providers.Reply{}, &resilience.Error{Kind: resilience.ProviderUnavailable}, "hello",
			providers.Usage{InputTokens: 20, OutputTokens: 1, Estimated: true}},
	} {
		if got := Usage(c.reply, c.err, 20, c.sent, s); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.desc, got, c.want)
		}
	}
}

// journal is the test's journal: what it was given, and whether it takes intents.
type journal struct {
	mu       sync.Mutex
	opened   []*messages.Call
	settled  []*messages.Call
	refusing bool
}

func (j *journal) Open(_ context.Context, c *messages.Call) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.refusing {
		return errors.New("the database and the spool are gone")
	}
	j.opened = append(j.opened, c)
	return nil
}

func (j *journal) Settle(c *messages.Call) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.settled = append(j.settled, c)
}

// accounts is the test's keys and teams.
type accounts struct {
	keys  map[string]keys.Key
	teams map[string]keys.Team
}

func (a accounts) Key(id string) (keys.Key, bool)   { k, ok := a.keys[id]; return k, ok }
func (a accounts) Team(id string) (keys.Team, bool) { t, ok := a.teams[id]; return t, ok }
func (a accounts) Spent(context.Context, string, keys.Allowance, time.Time) (money.USD, error) {
	return 0, nil
}
func (a accounts) TokensPerMinute(string, keys.Allowance) ratelimit.Limiter { return nil }

// transport answers every call with usage, and counts its calls.
type transport struct {
	calls int
	err   error
}

func (t *transport) Run(context.Context, providers.Call) (providers.Reply, error) {
	t.calls++
	return providers.Reply{Text: "B", Usage: providers.Usage{InputTokens: 100, OutputTokens: 10}}, t.err
}
func (t *transport) Close() error { return nil }

func TestTheMeter(t *testing.T) {
	models := map[string]catalog.Model{
		"m-priced":   {ID: "m-priced", Provider: "p", Family: "gpt", InputPricePerMTok: money.PerMillionDollar, OutputPricePerMTok: 2 * money.PerMillionDollar},
		"m-unpriced": {ID: "m-unpriced", Provider: "p", Unpriced: true},
	}
	budget, tiny := money.Dollar, money.NanoDollar
	created := time.Now().Add(-time.Hour)
	allow := func(b *money.USD) keys.Allowance { return keys.Allowance{Budget: b, PeriodOrigin: created} }
	ks := accounts{keys: map[string]keys.Key{"rich": {ID: "rich", Allowance: allow(&budget)}, "poor": {ID: "poor", Allowance: allow(&tiny)},
		"free": {ID: "free", Allowance: allow(nil)}, "in-poor-team": {ID: "in-poor-team", TeamID: "team_poor", Allowance: allow(&budget)},
		"in-rich-team": {ID: "in-rich-team", TeamID: "team_rich", Allowance: allow(nil)}, "teamless": {ID: "teamless", TeamID: "team_gone", Allowance: allow(nil)}},
		teams: map[string]keys.Team{"team_poor": {ID: "team_poor", Allowance: allow(&tiny)}, "team_rich": {ID: "team_rich", Allowance: allow(&budget)}}}
	newMeter := func() (*Meter, *journal, *transport) {
		j, tr := &journal{}, &transport{}
		return &Meter{Transport: tr, Budgets: NewLocal(nil), Journal: j, Accounts: ks, Node: "n", RunID: "r",
			Pricing: Pricing{Models: func(id string) (catalog.Model, bool) { m, ok := models[id]; return m, ok }}}, j, tr
	}
	call := func(key, model string) providers.Call {
		return providers.Call{RequestID: "req", JobID: "req/0", KeyID: key, Model: model, Provider: "p", MaxTokens: 50,
			Messages: providers.UserPrompt("Which is larger? A) 2 B) 3")}
	}
	for _, c := range []struct {
		desc       string
		key, model string
		refusing   bool
		kind       resilience.Kind
		sent       bool
		cost       money.USD
		journaled  bool
	}{
		{"a keyed call, priced and charged", "rich", "m-priced", false, "", true, money.Rates{In: money.PerMillionDollar, Out: 2 * money.PerMillionDollar}.Cost(100, 10), true},
		{"the admin token's call, journaled too", "", "m-priced", false, "", true, 120_000, true},
		{"a budget without room: never sent", "poor", "m-priced", false, resilience.BudgetExceeded, false, 0, false},
		{"an unpriced model on a budget: never sent", "rich", "m-unpriced", false, resilience.ModelNotPriced, false, 0, false},
		{"an unpriced model without a budget: free", "free", "m-unpriced", false, "", true, 0, true},
		{"a revoked key: never sent", "gone", "m-priced", false, resilience.KeyRevoked, false, 0, false},
		{"an intent the journal cannot keep: never sent, settled at nothing", "rich", "m-priced", true, resilience.Internal, false, 0, false},
		{"a key with room in a team without: never sent", "in-poor-team", "m-priced", false, resilience.BudgetExceeded, false, 0, false},
		{"a team with room: charged", "in-rich-team", "m-priced", false, "", true, money.Rates{In: money.PerMillionDollar, Out: 2 * money.PerMillionDollar}.Cost(100, 10), true},
		{"a team gone: never sent", "teamless", "m-priced", false, resilience.KeyRevoked, false, 0, false},
	} {
		m, j, tr := newMeter()
		j.refusing = c.refusing
		reply, err := m.Run(context.Background(), call(c.key, c.model))
		if resilience.KindOf(err) != c.kind && !(c.kind == "" && err == nil) {
			t.Errorf("%s: error %v, want %s", c.desc, err, c.kind)
			continue
		}
		if (tr.calls == 1) != c.sent || reply.Cost != c.cost || (len(j.opened) == 1) != c.journaled {
			t.Errorf("%s: sent %d, cost %s (want %s), %d intents", c.desc, tr.calls, reply.Cost, c.cost, len(j.opened))
		}
		if c.sent && (len(j.settled) != 1 || j.settled[0].State != store.CallSettled || j.settled[0].CostNanos != int64(c.cost) ||
			j.settled[0].ReservedNanos < j.settled[0].CostNanos) {
			t.Errorf("%s: settlements %v", c.desc, j.settled)
		}
		if c.refusing && (len(j.settled) != 1 || j.settled[0].CostNanos != 0) {
			t.Errorf("%s: an unjournaled call must be settled at nothing: %v", c.desc, j.settled)
		}
		if c.key == "rich" && c.sent {
			a, _, _ := m.Budgets.Account(context.Background(), ledger.AccountID{Key: "rich", Period: j.settled[0].PeriodStart})
			if a.Held != 0 || a.Spent != c.cost {
				t.Errorf("%s: the account after the call: %+v", c.desc, a)
			}
		}
		if c.key == "in-rich-team" {
			a, _, _ := m.Budgets.Account(context.Background(), ledger.AccountID{Key: "team_rich", Period: j.settled[0].TeamPeriodStart})
			if a.Held != 0 || a.Spent != c.cost || j.settled[0].TeamId != "team_rich" {
				t.Errorf("%s: the team's account after the call: %+v, %v", c.desc, a, j.settled[0])
			}
		}
		if c.key == "in-poor-team" {
			a, _, _ := m.Budgets.Account(context.Background(), ledger.AccountID{Key: "in-poor-team", Period: created.UnixMicro()})
			if a.Held != 0 || a.Spent != 0 || !strings.Contains(err.Error(), "the team's budget") {
				t.Errorf("%s: the key's hold must be given back, and the refusal name the team: %+v, %v", c.desc, a, err)
			}
		}
	}
}
