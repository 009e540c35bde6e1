package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/keystore"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// teamStore is a store of keys and teams.
type teamStore interface {
	keystore.Store
	keystore.TeamStore
}

// teamCharger charges a settled call of a key in a team, as the embedded default's settlement or the
// journal's does.
type teamCharger func(key, team string, keyStart, teamStart time.Time, amount money.USD, at time.Time) error

// teamStores runs a test on the memory store and on PostgreSQL.
func teamStores(t *testing.T, test func(t *testing.T, s teamStore, charge teamCharger)) {
	t.Run("memory", func(t *testing.T) {
		m := keystore.NewMemory()
		test(t, m, func(key, team string, keyStart, teamStart time.Time, amount money.USD, at time.Time) error {
			if err := m.Charge(context.Background(), key, keyStart, amount, at); err != nil {
				return err
			}
			return m.ChargeTeam(team, teamStart, amount)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pool, records := database(t)
		var n atomic.Int64
		test(t, keystore.NewPostgres(pool), func(key, team string, keyStart, teamStart time.Time, amount money.USD, at time.Time) error {
			call := &messages.Call{CallId: fmt.Sprint("call-", n.Add(1)), RequestId: "r", KeyId: key, PeriodStart: keyStart.UnixMicro(), TeamId: team,
				TeamPeriodStart: teamStart.UnixMicro(), Model: "m", Provider: "p", NodeId: "n", RunId: "run", OpenedAt: timestamppb.New(at),
				Deadline: timestamppb.New(at), State: store.CallSettled, SettledAt: timestamppb.New(at), CostNanos: int64(amount)}
			return records.Write(context.Background(), store.Batch{Calls: []*messages.Call{call}})
		})
	})
}

// TestTeamsKeepTheirKeysAndSpend: a team is kept as given; a key joins only a team that exists; a
// call charges the key and its team; a change of period starts the team's spend afresh; a team is
// deleted only once no usable key belongs to it.
func TestTeamsKeepTheirKeysAndSpend(t *testing.T) {
	teamStores(t, func(t *testing.T, s teamStore, charge teamCharger) {
		ctx := context.Background()
		budget := 2 * money.Dollar
		team := keys.Team{ID: "team_a", Name: "research", CreatedAt: created, Metadata: []byte("{}"),
			Allowance: keys.Allowance{PeriodOrigin: created, Budget: &budget, Period: keys.Day, RPM: 5, Models: []string{"openai/*"}}}
		if err := s.CreateTeam(ctx, team); err != nil {
			t.Fatal(err)
		}
		got, err := s.Team(ctx, "team_a")
		if err != nil || got.Name != "research" || *got.Budget != budget || got.Period != keys.Day || got.RPM != 5 || got.Models[0] != "openai/*" {
			t.Fatalf("team %+v, %v", got, err)
		}
		if _, err := s.Team(ctx, "team_b"); !errors.Is(err, keys.ErrUnknownTeam) {
			t.Fatalf("an unknown team: %v", err)
		}
		stray := keys.Key{ID: "key_stray", Name: "stray", TeamID: "team_b", CreatedAt: created, Metadata: []byte("{}"), Allowance: keys.Allowance{PeriodOrigin: created}}
		if err := s.Create(ctx, stray, keys.Hash("ck-stray")); !errors.Is(err, keys.ErrUnknownTeam) {
			t.Fatalf("a key in a team that is not there: %v", err)
		}
		k := newKey(t, s, "key_a", "ck-a", keys.Changes{})
		team2 := "team_a"
		if k, err = s.Update(ctx, k.ID, keys.Changes{TeamID: &team2}, created.Add(time.Minute)); err != nil || k.TeamID != "team_a" {
			t.Fatalf("joined %+v, %v", k, err)
		}
		at := created.Add(2 * time.Hour)
		for i := range 3 {
			if err := charge(k.ID, "team_a", k.PeriodStart(at), got.PeriodStart(at), money.USD(100<<i), at); err != nil {
				t.Fatal(err)
			}
		}
		if spent, err := s.TeamPeriodSpend(ctx, "team_a", got.PeriodStart(at)); err != nil || spent != 700 {
			t.Fatalf("the team's period spend: %s, %v", spent, err)
		}
		if got, _ = s.Team(ctx, "team_a"); got.Spent(at) != 700 || got.Spend.Total != 700 {
			t.Fatalf("the team's spend: %+v", got.Spend)
		}
		week := keys.Week
		if got, err = s.UpdateTeam(ctx, "team_a", keys.Changes{Period: &week}, at); err != nil || got.Spent(at) != 0 || !got.PeriodOrigin.Equal(at) {
			t.Fatalf("a new period: %+v, %v", got, err)
		}
		var inUse *keys.TeamInUseError
		if _, err := s.DeleteTeam(ctx, "team_a"); !errors.As(err, &inUse) || len(inUse.Keys) != 1 || inUse.Keys[0] != k.ID {
			t.Fatalf("a team with a usable key: %v", err)
		}
		if _, err := s.Revoke(ctx, k.ID, at); err != nil {
			t.Fatal(err)
		}
		if gone, err := s.DeleteTeam(ctx, "team_a"); err != nil || gone.ID != "team_a" {
			t.Fatalf("deleted %+v, %v", gone, err)
		}
		if k, _ = s.Get(ctx, k.ID); k.TeamID != "" {
			t.Errorf("a revoked key keeps a deleted team: %q", k.TeamID)
		}
		if list, err := s.Teams(ctx); err != nil || len(list) != 0 {
			t.Errorf("teams after the deletion: %v, %v", list, err)
		}
	})
}

// TestAnInterruptedCallIsChargedToItsTeam: a call whose controller died is settled by another from its
// intent alone (which named its team), and charged to the key and the team once.
func TestAnInterruptedCallIsChargedToItsTeam(t *testing.T) {
	pool, records := database(t)
	ctx := context.Background()
	s := keystore.NewPostgres(pool)
	if err := s.CreateTeam(ctx, keys.Team{ID: "team_a", Name: "a", CreatedAt: created, Metadata: []byte("{}"), Allowance: keys.Allowance{PeriodOrigin: created}}); err != nil {
		t.Fatal(err)
	}
	at := created.Add(time.Hour)
	intent := &messages.Call{CallId: "c1", RequestId: "r1", KeyId: "key_a", PeriodStart: created.UnixMicro(), TeamId: "team_a", TeamPeriodStart: created.UnixMicro(),
		Model: "m", Provider: "p", NodeId: "dead", RunId: "run", OpenedAt: timestamppb.New(at), Deadline: timestamppb.New(at), ReservedNanos: 900, State: store.CallOpen}
	if err := records.Write(ctx, store.Batch{Calls: []*messages.Call{intent}}); err != nil {
		t.Fatal(err)
	}
	// The recovering controller's settlement names only the call: the charge follows the intent.
	settled := &messages.Call{CallId: "c1", RequestId: "r1", KeyId: "key_a", Model: "m", Provider: "p", NodeId: "dead", RunId: "run",
		OpenedAt: timestamppb.New(at), Deadline: timestamppb.New(at), State: store.CallInterrupted, SettledAt: timestamppb.New(at), CostNanos: 900}
	for range 2 { // settled twice (two controllers recovering at once): charged once
		if err := records.Write(ctx, store.Batch{Calls: []*messages.Call{settled}}); err != nil {
			t.Fatal(err)
		}
	}
	if spent, err := s.TeamPeriodSpend(ctx, "team_a", created); err != nil || spent != 900 {
		t.Fatalf("the team's spend after an interrupted call: %s, %v", spent, err)
	}
	if r, err := records.CheckBooks(ctx, created); err != nil || len(r.Differences) != 1 || r.Differences[0].What != "request charged without a record" {
		t.Fatalf("the books: %+v, %v", r, err) // the request's record is the recovering controller's, not written here
	}
}
