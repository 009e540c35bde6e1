package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/keystore"
	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/adapters/store/postgres"
	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/conclave-ai/conclave/messages"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// charger charges a key as a settled call does: the memory store's Charge on the embedded default,
// the journal's settlement in PostgreSQL.
type charger func(id string, periodStart time.Time, amount money.USD, at time.Time) error

// stores runs a test on the memory store and on PostgreSQL, with the way each is charged.
func stores(t *testing.T, test func(t *testing.T, s keystore.Store, charge charger)) {
	t.Run("memory", func(t *testing.T) {
		m := keystore.NewMemory()
		test(t, m, func(id string, start time.Time, amount money.USD, at time.Time) error {
			return m.Charge(context.Background(), id, start, amount, at)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pool, records := database(t)
		var n atomic.Int64
		test(t, keystore.NewPostgres(pool), func(id string, start time.Time, amount money.USD, at time.Time) error {
			call := &messages.Call{CallId: fmt.Sprint("call-", n.Add(1)), RequestId: "r", KeyId: id, PeriodStart: start.UnixMicro(), Model: "m",
				Provider: "p", NodeId: "n", RunId: "run", OpenedAt: timestamppb.New(at), Deadline: timestamppb.New(at), State: store.CallSettled,
				SettledAt: timestamppb.New(at), CostNanos: int64(amount)}
			return records.Write(context.Background(), store.Batch{Calls: []*messages.Call{call}})
		})
	})
}

// database is a fresh PostgreSQL with the schema: a pool for the key store, and the record store whose
// journal charges keys and teams.
func database(t *testing.T) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	url := pgtest.New(t, true)
	pool, err := pgxpool.New(context.Background(), url.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	records, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { records.Close() })
	return pool, records
}

var created = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func newKey(t *testing.T, s keystore.Store, id, secret string, c keys.Changes) keys.Key {
	t.Helper()
	k := c.Apply(keys.Key{ID: id, CreatedAt: created, Allowance: keys.Allowance{PeriodOrigin: created}}, created)
	if err := s.Create(context.Background(), k, keys.Hash(secret)); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeysKeepWhatTheyAreGiven(t *testing.T) {
	stores(t, func(t *testing.T, s keystore.Store, charge charger) {
		ctx := context.Background()
		name, budget, rpm, period, cacheTTL := "team-a", 2_500_000_000*money.NanoDollar, 3, keys.Week, 600
		models := []string{"openai/*", "conclave/*"}
		expiry := created.Add(48 * time.Hour)
		newKey(t, s, "key_a", "ck-a", keys.Changes{Name: &name, Budget: &budget, RPM: &rpm, Period: &period, Models: &models,
			ExpiresAt: &expiry, Metadata: []byte(`{"team":"a"}`), CacheTTLSeconds: &cacheTTL, BudgetAlerts: &[]float64{0.5, 0.9}})
		other := "team-b"
		newKey(t, s, "key_b", "ck-b", keys.Changes{Name: &other})

		k, err := s.ByHash(ctx, keys.Hash("ck-a"))
		if err != nil {
			t.Fatal(err)
		}
		if k.ID != "key_a" || k.Name != name || *k.Budget != budget || k.RPM != 3 || k.Period != keys.Week || len(k.Models) != 2 || k.CacheTTLSeconds != 600 ||
			!slices.Equal(k.BudgetAlerts, []float64{0.5, 0.9}) ||
			!k.ExpiresAt.Equal(expiry) || k.RevokedAt != nil || k.LastUsedAt != nil || !k.CreatedAt.Equal(created) {
			t.Fatalf("key read back as %+v", k)
		}
		if string(k.Metadata) != `{"team": "a"}` && string(k.Metadata) != `{"team":"a"}` {
			t.Errorf("metadata %s", k.Metadata)
		}
		if b, _ := s.Get(ctx, "key_b"); b.Budget != nil || len(b.Models) != 0 || b.BudgetAlerts != nil {
			t.Errorf("a key without a budget or globs read back as %+v", b)
		}
		if _, err := s.ByHash(ctx, keys.Hash("ck-c")); !errors.Is(err, keys.ErrUnknown) {
			t.Errorf("an unknown secret: %v", err)
		}
		if _, err := s.Get(ctx, "key_c"); !errors.Is(err, keys.ErrUnknown) {
			t.Errorf("an unknown id: %v", err)
		}
		list, err := s.List(ctx)
		if err != nil || len(list) != 2 || list[0].ID != "key_a" {
			t.Fatalf("list %v, %v", list, err)
		}
	})
}

func TestUpdatesAndRevocations(t *testing.T) {
	stores(t, func(t *testing.T, s keystore.Store, charge charger) {
		ctx := context.Background()
		name, budget, period := "team-a", money.Dollar, keys.Day
		newKey(t, s, "key_a", "ck-a", keys.Changes{Name: &name, Budget: &budget, Period: &period})
		start := period.Start(created, created)
		if err := charge("key_a", start, money.Dollar/4, created.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		later := created.Add(time.Hour)
		rpm, cacheTTL := 7, 30
		k, err := s.Update(ctx, "key_a", keys.Changes{RPM: &rpm, ClearBudget: true, CacheTTLSeconds: &cacheTTL}, later)
		if err != nil || k.RPM != 7 || k.CacheTTLSeconds != 30 || k.Budget != nil || k.Name != name || !k.UpdatedAt.Equal(later) || k.Spent(later) != money.Dollar/4 {
			t.Fatalf("updated to %+v, %v", k, err)
		}
		week := keys.Week
		if k, _ = s.Update(ctx, "key_a", keys.Changes{Period: &week}, later); k.Spent(later) != 0 || k.Spend.Total != money.Dollar/4 {
			t.Errorf("a new budget period starts its spend afresh, the total stays: %+v", k.Spend)
		}
		if _, err := s.Update(ctx, "key_x", keys.Changes{RPM: &rpm}, later); !errors.Is(err, keys.ErrUnknown) {
			t.Errorf("updating an unknown key: %v", err)
		}
		k, err = s.Revoke(ctx, "key_a", later)
		if err != nil || k.RevokedAt == nil || k.Usable(later) != keys.ErrRevoked {
			t.Fatalf("revoked: %+v, %v", k, err)
		}
		if again, _ := s.Revoke(ctx, "key_a", later.Add(time.Hour)); !again.RevokedAt.Equal(*k.RevokedAt) {
			t.Error("revoking again moved the revocation")
		}
		if _, err := s.Revoke(ctx, "key_x", later); !errors.Is(err, keys.ErrUnknown) {
			t.Errorf("revoking an unknown key: %v", err)
		}
	})
}

func TestChargesCountPerPeriodAndAtOnce(t *testing.T) {
	stores(t, func(t *testing.T, s keystore.Store, charge charger) {
		ctx := context.Background()
		name, period := "team-a", keys.Day
		newKey(t, s, "key_a", "ck-a", keys.Changes{Name: &name, Period: &period})
		day1, day2 := created, created.Add(24*time.Hour)
		var wg sync.WaitGroup
		for range 20 { // as two controllers' charges at once: none may be lost
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := charge("key_a", day1, money.Dollar/2, created.Add(time.Minute)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		k, _ := s.Get(ctx, "key_a")
		if k.Spent(created.Add(time.Hour)) != 10*money.Dollar || k.Spend.Total != 10*money.Dollar || !k.LastUsedAt.Equal(created.Add(time.Minute)) {
			t.Fatalf("after 20 charges of 0.5: %+v, last used %v", k.Spend, k.LastUsedAt)
		}
		if err := charge("key_a", day2, money.Dollar, day2.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := charge("key_a", day1, 2*money.Dollar, created.Add(2*time.Minute)); err != nil { // late, from the day before
			t.Fatal(err)
		}
		k, _ = s.Get(ctx, "key_a")
		if now := day2.Add(time.Hour); k.Spent(now) != money.Dollar || k.Spend.Total != 13*money.Dollar || !k.LastUsedAt.Equal(day2.Add(time.Minute)) {
			t.Fatalf("the next day: %+v (spent %v), last used %v", k.Spend, k.Spent(now), k.LastUsedAt)
		}
	})
}
