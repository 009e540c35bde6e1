package postgres

import (
	"context"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/jackc/pgx/v5"
)

type armKey struct{ model, category string }

// LoadArms implements store.Learning: every arm's sums over the prior, with its recency (and, with a
// discount, its evidence) folded from its latest rewards in the history. Sums, history and its last
// position are read in one snapshot, so a reward is in the arms or after Through, never both.
func (s *Store) LoadArms(ctx context.Context, o store.LoadOptions) (store.Learned, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return store.Learned{}, classify(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only: nothing to undo
	var through int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM learning.strategy_performance_history`).Scan(&through); err != nil {
		return store.Learned{}, classify(err)
	}
	var recent []int64
	rows, err := tx.Query(ctx, `SELECT id FROM learning.strategy_performance_history WHERE id > $1 ORDER BY id`, through-o.Lookback)
	if err != nil {
		return store.Learned{}, classify(err)
	}
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { recent = append(recent, id); return nil }); err != nil {
		return store.Learned{}, classify(err)
	}
	arms, err := loadArms(ctx, tx, o)
	return store.Learned{Arms: arms, Through: through, Recent: recent}, err
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func loadArms(ctx context.Context, q querier, o store.LoadOptions) ([]bandit.Arm, error) {
	type sums struct {
		alpha, beta float64
		pulls       int64
	}
	var keys []armKey
	total := map[armKey]sums{}
	rows, err := q.Query(ctx, `SELECT model, category, alpha, beta, pulls FROM learning.strategy_performance ORDER BY model, category`)
	if err != nil {
		return nil, classify(err)
	}
	for rows.Next() {
		var k armKey
		var v sums
		if err := rows.Scan(&k.model, &k.category, &v.alpha, &v.beta, &v.pulls); err != nil {
			rows.Close()
			return nil, classify(err)
		}
		keys = append(keys, k)
		total[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	latest, err := latestRewards(ctx, q, bandit.HistoryNeeded(o.Learning))
	if err != nil {
		return nil, err
	}
	out := make([]bandit.Arm, 0, len(keys))
	for _, k := range keys {
		v := total[k]
		folded := bandit.Rebuild(k.model, k.category, o.Prior, latest[k], o.Learning)
		a := bandit.Arm{Model: k.model, Category: k.category, Alpha: o.Prior.Alpha + v.alpha, Beta: o.Prior.Beta + v.beta,
			Recency: folded.Recency, Pulls: v.pulls}
		if g := o.Learning.Discount; g > 0 && g < 1 {
			a.Alpha, a.Beta = folded.Alpha, folded.Beta
		}
		out = append(out, a)
	}
	return out, nil
}

// latestRewards reads the last n rewards of every arm, oldest first; an all-categories arm's are its
// model's in every category.
func latestRewards(ctx context.Context, q querier, n int) (map[armKey][]float64, error) {
	rows, err := q.Query(ctx, `
SELECT s.model, s.category, h.id, h.reward FROM learning.strategy_performance s
CROSS JOIN LATERAL (
    SELECT id, reward FROM learning.strategy_performance_history h
    WHERE h.model = s.model AND h.category = s.category ORDER BY id DESC LIMIT $1) h
WHERE s.category <> '*'
UNION ALL
SELECT s.model, s.category, h.id, h.reward FROM learning.strategy_performance s
CROSS JOIN LATERAL (
    SELECT id, reward FROM learning.strategy_performance_history h
    WHERE h.model = s.model ORDER BY id DESC LIMIT $1) h
WHERE s.category = '*'
ORDER BY 1, 2, 3`, n)
	if err != nil {
		return nil, classify(err)
	}
	out := map[armKey][]float64{}
	var k armKey
	var id int64
	var r float64
	_, err = pgx.ForEachRow(rows, []any{&k.model, &k.category, &id, &r}, func() error {
		out[k] = append(out[k], r)
		return nil
	})
	return out, classify(err)
}

// RewardsSince implements store.Learning.
func (s *Store) RewardsSince(ctx context.Context, after int64, notNode string, limit int) ([]store.Reward, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, model, category, reward, reason, request_id, node_id FROM learning.strategy_performance_history
WHERE id > $1 AND node_id <> $2 ORDER BY id LIMIT $3`, after, notNode, limit)
	if err != nil {
		return nil, classify(err)
	}
	var out []store.Reward
	var r store.Reward
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Model, &r.Category, &r.Reward, &r.Reason, &r.RequestID, &r.Node}, func() error {
		out = append(out, r)
		return nil
	})
	return out, classify(err)
}
