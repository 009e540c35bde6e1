package postgres

import (
	"context"

	"github.com/conclave-ai/conclave/bandit"
	"github.com/conclave-ai/conclave/store"
	"github.com/jackc/pgx/v5"
)

type armKey struct{ model, category string }

// LoadArms implements store.Learning: every arm's sums over the prior, with its recency (and, with a
// discount, its evidence) folded from its latest rewards in the history.
func (s *Store) LoadArms(ctx context.Context, o store.LoadOptions) ([]bandit.Arm, error) {
	type sums struct {
		alpha, beta float64
		pulls       int64
	}
	var keys []armKey
	total := map[armKey]sums{}
	rows, err := s.pool.Query(ctx, `SELECT model, category, alpha, beta, pulls FROM learning.strategy_performance ORDER BY model, category`)
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
	latest, err := s.latestRewards(ctx, bandit.HistoryNeeded(o.Learning))
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
func (s *Store) latestRewards(ctx context.Context, n int) (map[armKey][]float64, error) {
	rows, err := s.pool.Query(ctx, `
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
