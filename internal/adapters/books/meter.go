package books

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/ledger"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/clock"
	"github.com/conclave-ai/conclave/internal/platform/tokens"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Journal keeps the journal of calls: an intent is durable when Open returns (else the call is not
// sent), and a settlement is handed over to be written with its request's record.
type Journal interface {
	Open(ctx context.Context, c *messages.Call) error
	Settle(c *messages.Call)
}

// Account is what the meter needs of a call's key and of its team: nothing for the admin token. A
// key's and a team's ids never meet (keys.TeamPrefix), so one id names either.
type Account interface {
	// Key returns the key the call is charged to, or false when it is gone (revoked meanwhile, or
	// unknown to this controller).
	Key(id string) (keys.Key, bool)
	// Team returns a key's team, or false when it is gone.
	Team(id string) (keys.Team, bool)
	// Spent reads what the key or team of id, holding a, spent in the period that began at start,
	// for its account's opening.
	Spent(ctx context.Context, id string, a keys.Allowance, start time.Time) (money.USD, error)
	// TokensPerMinute is the limiter of the tpm of the key or team of id, or nil when it has none.
	TokensPerMinute(id string, a keys.Allowance) ratelimit.Limiter
}

// Pricing says what a model costs: its prices, output bound and family from the catalog, and the
// configured default for a model without a price.
type Pricing struct {
	Models  func(id string) (catalog.Model, bool)
	Default *money.Rates
}

// Rates are a model's prices, and whether it has any (a model nobody priced has none, unless there is a
// default).
func (p Pricing) Rates(m catalog.Model) (money.Rates, bool) {
	switch {
	case !m.Unpriced:
		return m.Rates(), true
	case p.Default != nil:
		return *p.Default, true
	}
	return money.Rates{}, false
}

// Meter is a worker's transport with the books around each call: the call's worst case is held
// against its key's budget and tokens per minute, its intent made durable in the journal, then it is
// sent; its usage prices it (a call cut short, without the provider's usage, is counted by the
// tokenizer: its prompt and what the provider had sent, marked estimated), its hold is settled with
// that cost and the rest released, and its settlement goes to the journal. Every call that leaves is
// journaled, the admin token's too. A call refused by its key's limits is never sent.
type Meter struct {
	Transport fleet.Transport
	Budgets   Budgets
	Journal   Journal
	Accounts  Account
	Pricing   Pricing
	Clock     clock.Clock
	// Node and RunID name this controller and its run in the journal.
	Node, RunID string
}

// Run implements fleet.Transport.
func (m *Meter) Run(ctx context.Context, call providers.Call) (providers.Reply, error) {
	return m.call(ctx, call, nil)
}

// Stream implements fleet.Streamer.
func (m *Meter) Stream(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	return m.call(ctx, call, onDelta)
}

// Close implements fleet.Transport.
func (m *Meter) Close() error { return m.Transport.Close() }

// OnHealth passes the transport's health on, when it reports one (SSH).
func (m *Meter) OnHealth(f func(fleet.Health, error)) {
	if h, ok := m.Transport.(interface {
		OnHealth(func(fleet.Health, error))
	}); ok {
		h.OnHealth(f)
	}
}

// settleTimeout bounds a settlement's way to the ledger, which runs after the call, when its caller
// may have gone.
const settleTimeout = 5 * time.Second

func (m *Meter) call(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	c, err := m.Open(ctx, Spec{CallID: call.JobID, RequestID: call.RequestID, KeyID: call.KeyID, Model: call.Model, Provider: call.Provider,
		Prompt: func(s tokens.Scheme) int { return PromptTokens(call, s) }, MaxTokens: call.MaxTokens})
	if err != nil {
		return providers.Reply{}, err
	}
	var sent strings.Builder // what the provider had sent, for a call cut before its usage came
	relay := onDelta
	if onDelta != nil {
		relay = func(d providers.Delta) {
			if sent.Len() < maxCounted {
				sent.WriteString(d.Text)
				for _, t := range d.ToolCalls {
					sent.WriteString(t.Name)
					sent.WriteString(t.Arguments)
				}
			}
			onDelta(d)
		}
	}
	reply, callErr := m.send(ctx, call, relay)
	reply.Usage = Usage(reply, callErr, c.prompt, sent.String(), c.scheme)
	reply.Cost = c.Close(reply.Usage)
	return reply, callErr
}

// Spec is a call as the books see it.
type Spec struct {
	CallID, RequestID, KeyID, Model, Provider string
	// Prompt counts the call's prompt under a tokenizer's scheme; MaxTokens is its output bound (0:
	// the model's, else ledger.DefaultOutputBound; an embeddings call, which writes none, gives -1).
	Prompt    func(tokens.Scheme) int
	MaxTokens int
}

// Metered is a call opened on the books: held against its key and journaled, to be closed once.
type Metered struct {
	m      *Meter
	held   *holding
	entry  *messages.Call
	rates  money.Rates
	priced bool
	prompt int
	scheme tokens.Scheme
}

// Prompt is the call's prompt as the tokenizer counts it, for an estimate of its usage.
func (c *Metered) Prompt() int { return c.prompt }

// Scheme is how the call's tokens are counted.
func (c *Metered) Scheme() tokens.Scheme { return c.scheme }

// Open holds a call's worst case against its key and makes its intent durable: after it returns nil,
// the call may be sent, and must be closed. An error refuses the call, which is not to be sent.
func (m *Meter) Open(ctx context.Context, s Spec) (*Metered, error) {
	model, known := m.Pricing.Models(s.Model)
	if !known {
		model = catalog.Model{ID: s.Model, Provider: s.Provider, Unpriced: true}
	}
	c := &Metered{m: m, scheme: tokens.For(s.Model, model.Family)}
	c.rates, c.priced = m.Pricing.Rates(model)
	c.prompt = s.Prompt(c.scheme)
	bound := 0
	if s.MaxTokens >= 0 {
		bound = ledger.OutputBound(s.MaxTokens, model.MaxOutputTokens)
	}
	now := clock.Or(m.Clock).Now()
	c.entry = &messages.Call{CallId: s.CallID, RequestId: s.RequestID, KeyId: s.KeyID, Model: s.Model, Provider: s.Provider,
		NodeId: m.Node, RunId: m.RunID, OpenedAt: timestamppb.New(now), Deadline: timestamppb.New(deadlineOf(ctx, now)),
		ReservedNanos: int64(min(ledger.WorstCase(c.rates, c.prompt, bound), ledger.MaxHold)), ReservedTokens: int64(c.prompt + bound),
		State: store.CallOpen}
	held, err := m.hold(ctx, s, c.entry, c.priced)
	if err != nil {
		return nil, err
	}
	c.held = held
	if err := m.Journal.Open(ctx, c.entry); err != nil {
		// Settled at nothing, should the intent have been written after all.
		held.release(0, -1)
		m.settle(c.entry, 0, providers.Usage{})
		return nil, &resilience.Error{Kind: resilience.Internal, Provider: s.Provider, Model: s.Model,
			Err: fmt.Errorf("the call's intent could not be journaled, so it was not sent: %w", err)}
	}
	return c, nil
}

// Close prices a call's usage, settles its holds with the cost and journals its settlement; it
// returns the cost.
func (c *Metered) Close(u providers.Usage) money.USD {
	var cost money.USD
	if c.priced {
		cost = c.rates.Charge(u.Tokens())
	}
	c.held.release(cost, u.InputTokens+u.OutputTokens)
	c.m.settle(c.entry, cost, u)
	return cost
}

// settle hands a call's settlement to the journal.
func (m *Meter) settle(entry *messages.Call, cost money.USD, u providers.Usage) {
	entry.State, entry.SettledAt, entry.CostNanos = store.CallSettled, timestamppb.New(clock.Or(m.Clock).Now()), int64(cost)
	entry.Usage = &messages.Usage{InputTokens: int32(min(u.InputTokens, maxInt32)), OutputTokens: int32(min(u.OutputTokens, maxInt32)),
		CacheReadTokens: int32(min(u.CacheReadTokens, maxInt32)), CacheWriteTokens: int32(min(u.CacheWriteTokens, maxInt32)), Estimated: u.Estimated}
	m.Journal.Settle(entry)
}

const maxInt32 = 1<<31 - 1

// maxCounted bounds the text of a cut stream kept for counting: past it, the bytes are counted a
// token each (a token is never shorter than a byte).
const maxCounted = 8 << 20

// send makes the call; a panic in the transport is the call's internal error, so that the call is
// still settled.
func (m *Meter) send(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (reply providers.Reply, err error) {
	defer func() {
		if v := recover(); v != nil {
			reply, err = providers.Reply{}, &resilience.Error{Kind: resilience.Internal, Model: call.Model, Err: fmt.Errorf("panic in the call: %v", v)}
		}
	}()
	if onDelta != nil {
		return fleet.Stream(ctx, m.Transport, call, onDelta)
	}
	return m.Transport.Run(ctx, call)
}

// holding is a call's holds on its key and its key's team: their budgets' and their tokens per minute's.
type holding struct {
	m       *Meter
	budgets []budgetHold
	tpm     []ratelimit.Limiter
	call    string
}

// budgetHold is a hold on one budget: its account, under the name the ledger knows the hold by.
type budgetHold struct {
	account ledger.AccountID
	name    string
}

// release settles the holds: the budgets' with the call's cost, the tokens' with what it used (< 0:
// nothing was sent, the tokens are given back).
func (h *holding) release(cost money.USD, used int) {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	for _, b := range h.budgets {
		_ = h.m.Budgets.Settle(ctx, b.account, b.name, cost) // unsettled, the hold lapses at its amount
	}
	for _, l := range h.tpm {
		_, _ = l.Release(ctx, h.call, max(used, 0))
	}
}

// hold takes the call's holds on its key and its key's team, or refuses the call for their limits.
func (m *Meter) hold(ctx context.Context, call Spec, entry *messages.Call, priced bool) (*holding, error) {
	if call.KeyID == "" {
		return nil, nil
	}
	key, ok := m.Accounts.Key(call.KeyID)
	if !ok {
		return nil, &resilience.Error{Kind: resilience.KeyRevoked, Provider: call.Provider, Model: call.Model, Err: errors.New("the API key cannot be used any more")}
	}
	now := clock.Or(m.Clock).Now()
	entry.PeriodStart = key.PeriodStart(now).UnixMicro() // the period its cost counts in
	var team *keys.Team
	if key.TeamID != "" {
		t, ok := m.Accounts.Team(key.TeamID)
		if !ok {
			return nil, &resilience.Error{Kind: resilience.KeyRevoked, Provider: call.Provider, Model: call.Model, Err: errors.New("the API key's team is gone")}
		}
		team = &t
		entry.TeamId, entry.TeamPeriodStart = t.ID, t.PeriodStart(now).UnixMicro()
	}
	h := &holding{m: m, call: call.CallID}
	for _, p := range keys.Holders(key, team) {
		if err := m.take(ctx, h, p, call, entry, priced, now); err != nil {
			h.release(0, -1)
			return nil, err
		}
	}
	return h, nil
}

// take holds the call's worst case against one payer's budget and tokens per minute, adding the holds
// to h, or refuses the call.
func (m *Meter) take(ctx context.Context, h *holding, p keys.Holder, call Spec, entry *messages.Call, priced bool, now time.Time) error {
	refuse := func(kind resilience.Kind, format string, args ...any) error {
		return &resilience.Error{Kind: kind, Provider: call.Provider, Model: call.Model, Err: fmt.Errorf(format, args...)}
	}
	if p.Budget != nil {
		if !priced {
			return refuse(resilience.ModelNotPriced, "%s has no price, and the %s has a budget: set its price_in and price_out "+
				"(providers.<provider>.models), or pricing.default_price_in and pricing.default_price_out", call.Model, p.What)
		}
		start := p.PeriodStart(now)
		b := budgetHold{account: ledger.AccountID{Key: p.ID, Period: start.UnixMicro()}, name: call.CallID}
		if keys.IsTeamID(p.ID) {
			b.name += "@" + p.ID // a ledger knows a hold by its name: the key's and the team's differ
		}
		r := Reservation{Account: b.account, Budget: *p.Budget, Call: b.name, Amount: money.USD(entry.ReservedNanos), PeriodEnd: p.PeriodEnd(now),
			Spent: func(ctx context.Context) (money.USD, error) { return m.Accounts.Spent(ctx, p.ID, p.Allowance, start) }}
		a, err := m.Budgets.Reserve(ctx, r)
		switch {
		case errors.Is(err, ledger.ErrOverBudget):
			return refuse(resilience.BudgetExceeded, "%s", BudgetMessage(p.What, p.Allowance, a, money.USD(entry.ReservedNanos), now))
		case err != nil:
			return &resilience.Error{Kind: resilience.Internal, Provider: call.Provider, Model: call.Model,
				Err: fmt.Errorf("the %s's budget could not be read: %w", p.What, err)}
		}
		h.budgets = append(h.budgets, b)
	}
	if l := m.Accounts.TokensPerMinute(p.ID, p.Allowance); l != nil {
		d, err := l.Reserve(ctx, call.CallID, int(entry.ReservedTokens))
		switch {
		case errors.Is(err, ratelimit.ErrTooLarge):
			return refuse(resilience.KeyRateLimited, "the call may use %d tokens (its prompt and its output bound), more than the %s's %d tokens per minute",
				entry.ReservedTokens, p.What, p.TPM)
		case err == nil && !d.Allowed:
			return refuse(resilience.KeyRateLimited, "the %s's limit of %d tokens per minute is reached", p.What, p.TPM)
		case err == nil:
			h.tpm = append(h.tpm, l)
		} // a limiter that cannot count lets the call through, as a provider's does
	}
	return nil
}

// BudgetMessage tells a caller why the budget of its key (what: "API key") or of its key's team
// ("team") refused a call, and when the budget starts again.
func BudgetMessage(what string, al keys.Allowance, a ledger.Account, worstCase money.USD, now time.Time) string {
	msg := fmt.Sprintf("the %s's budget of $%s has $%s left in this period ($%s spent, $%s held by calls in flight), "+
		"less than this call may cost ($%s)", what, *al.Budget, max(a.Room(), 0), a.Spent, a.Held, worstCase)
	if end := al.PeriodEnd(now); !end.IsZero() {
		return msg + "; it starts again at " + end.UTC().Format(time.RFC3339)
	}
	return msg + "; it is the " + what + "'s budget for its whole life"
}

// deadlineOf is when a call must end: its context's deadline, or an hour from now without one.
func deadlineOf(ctx context.Context, now time.Time) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return now.Add(time.Hour)
}

// PromptTokens counts what a call sends as its prompt: each message's text and a few tokens of framing,
// its images, its tools and its output format's schema.
func PromptTokens(call providers.Call, s tokens.Scheme) int {
	n := tokens.ReplyTokens
	for _, msg := range call.Messages {
		n += tokens.MessageTokens + s.Count(msg.Text()) + s.Count(msg.Name)
		for _, p := range msg.Parts {
			if p.Type != providers.PartText {
				n += tokens.ImageTokens
			}
		}
		for _, c := range msg.ToolCalls {
			n += s.Count(c.Name) + s.Count(c.Arguments)
		}
	}
	for _, t := range call.Tools {
		n += s.Count(t.Name) + s.Count(t.Description) + s.Count(string(t.Parameters))
	}
	if f := call.ResponseFormat; f != nil {
		n += s.Count(string(f.Schema))
	}
	return n
}

// Usage is what a call is charged for: the provider's usage when it reported one; otherwise, for a
// call that was sent and answered or cut (cancelled, timed out, its stream broken after it began), the
// tokenizer's count of its prompt and of what the provider had sent, marked estimated. A call the
// provider refused (an error status, a refused connection) costs nothing.
func Usage(reply providers.Reply, err error, prompt int, sent string, s tokens.Scheme) providers.Usage {
	if u := reply.Usage; u.InputTokens > 0 || u.OutputTokens > 0 {
		return u
	}
	output := sent
	if err == nil {
		output = reply.Text
		for _, t := range reply.ToolCalls {
			output += t.Name + t.Arguments
		}
	}
	kind := resilience.KindOf(err)
	cut := err != nil && (output != "" || kind == resilience.Cancelled || kind == resilience.UpstreamTimeout || kind == resilience.HostTimeout ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
	if err != nil && !cut {
		return providers.Usage{}
	}
	out := len(output) // past maxCounted, a token a byte
	if len(output) < maxCounted {
		out = s.Count(output)
	}
	return providers.Usage{InputTokens: prompt, OutputTokens: out, Estimated: true}
}
