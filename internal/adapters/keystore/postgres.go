package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/internal/core/keys"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres keeps keys in auth.keys (migrations 004 and 007), shared by every controller on the
// database; what each key spent is in books.key_periods, where the journal's settlements add to it.
type Postgres struct {
	pool *pgxpool.Pool
}

// NewPostgres returns the store over a pool whose database has the schema.
func NewPostgres(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// keyColumns read a key with its spend: its latest period's (which Key.Spent counts only when it is the
// period that holds now), its total and its last charge.
const keyColumns = `id, name, coalesce(team_id, ''), budget_nanos, budget_period, rpm, tpm, max_concurrency, cache_ttl_seconds, budget_alerts, models, expires_at, metadata,
	created_at, updated_at, revoked_at, period_origin, s.last_at, coalesce(l.period_start, period_origin), coalesce(l.spent_nanos, 0),
	coalesce(s.total, 0)`

// keyFrom joins a key's spend to it.
const keyFrom = ` FROM auth.keys k
	LEFT JOIN LATERAL (SELECT period_start, spent_nanos FROM books.key_periods p WHERE p.key_id = k.id
		ORDER BY period_start DESC LIMIT 1) l ON true
	LEFT JOIN LATERAL (SELECT sum(spent_nanos)::bigint AS total, max(last_at) AS last_at FROM books.key_periods p
		WHERE p.key_id = k.id) s ON true`

func scanKey(row pgx.Row) (keys.Key, error) {
	var k keys.Key
	var period string
	var metadata []byte
	err := row.Scan(&k.ID, &k.Name, &k.TeamID, &k.Budget, &period, &k.RPM, &k.TPM, &k.MaxConcurrency, &k.CacheTTLSeconds, &k.BudgetAlerts, &k.Models, &k.ExpiresAt, &metadata,
		&k.CreatedAt, &k.UpdatedAt, &k.RevokedAt, &k.PeriodOrigin, &k.LastUsedAt, &k.Spend.PeriodStart, &k.Spend.Period, &k.Spend.Total)
	if errors.Is(err, pgx.ErrNoRows) {
		return keys.Key{}, keys.ErrUnknown
	}
	if err != nil {
		return keys.Key{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	k.Period, _ = keys.ParsePeriod(period)
	k.Metadata = metadata
	for _, t := range []*time.Time{&k.CreatedAt, &k.UpdatedAt, &k.PeriodOrigin, &k.Spend.PeriodStart} {
		*t = t.UTC()
	}
	return k, nil
}

// Create implements Store.
func (p *Postgres) Create(ctx context.Context, k keys.Key, hash []byte) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO auth.keys (id, name, secret_hash, budget_nanos, budget_period, rpm, tpm, max_concurrency, models,
	expires_at, metadata, created_at, updated_at, period_origin, cache_ttl_seconds, budget_alerts, team_id)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $12, $13, $14, nullif($15, ''))`,
		k.ID, k.Name, hash, k.Budget, k.Period.String(), k.RPM, k.TPM, k.MaxConcurrency, nonNil(k.Models), k.ExpiresAt, string(k.Metadata), k.CreatedAt,
		k.CacheTTLSeconds, k.BudgetAlerts, k.TeamID)
	return writeError("create key", err)
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, id string) (keys.Key, error) {
	return scanKey(p.pool.QueryRow(ctx, `SELECT `+keyColumns+keyFrom+` WHERE id = $1`, id))
}

// ByHash implements Store.
func (p *Postgres) ByHash(ctx context.Context, hash []byte) (keys.Key, error) {
	return scanKey(p.pool.QueryRow(ctx, `SELECT `+keyColumns+keyFrom+` WHERE secret_hash = $1`, hash))
}

// List implements Store.
func (p *Postgres) List(ctx context.Context) ([]keys.Key, error) {
	return p.query(ctx, `SELECT `+keyColumns+keyFrom+` ORDER BY created_at, id`)
}

// Changed implements Store.
func (p *Postgres) Changed(ctx context.Context, since time.Time, ids []string) ([]keys.Key, error) {
	return p.query(ctx, `SELECT `+keyColumns+keyFrom+` WHERE updated_at > $1 OR id = ANY($2) ORDER BY created_at, id`, since, nonNil(ids))
}

// PeriodSpend implements Store.
func (p *Postgres) PeriodSpend(ctx context.Context, id string, start time.Time) (money.USD, error) {
	var spent money.USD
	err := p.pool.QueryRow(ctx, `SELECT coalesce(sum(spent_nanos), 0)::bigint FROM books.key_periods WHERE key_id = $1 AND period_start = $2`,
		id, start).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("%w: read spend: %v", ErrUnavailable, err)
	}
	return spent, nil
}

func (p *Postgres) query(ctx context.Context, sql string, args ...any) ([]keys.Key, error) {
	rows, err := p.pool.Query(ctx, sql, args...)
	return collect(rows, err, "list keys", scanKey)
}

// collect reads every row of a query with scan; a failure of the query or of reading its rows is the
// store's unavailability, named what.
func collect[T any](rows pgx.Rows, err error, what string, scan func(pgx.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	if err != nil && !errors.Is(err, ErrUnavailable) {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
	}
	return out, err
}

// Update implements Store: the key is read and written under its row's lock, so two updates at once
// each see the other's.
func (p *Postgres) Update(ctx context.Context, id string, c keys.Changes, now time.Time) (keys.Key, error) {
	var out keys.Key
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		k, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+keyFrom+` WHERE id = $1 FOR UPDATE OF k`, id))
		if err != nil {
			return err
		}
		out = c.Apply(k, now)
		_, err = tx.Exec(ctx, `UPDATE auth.keys SET name = $2, budget_nanos = $3, budget_period = $4, rpm = $5, tpm = $6, max_concurrency = $7,
	models = $8, expires_at = $9, metadata = $10, updated_at = $11,
	period_origin = CASE WHEN budget_period = $4 THEN period_origin ELSE $11 END, cache_ttl_seconds = $12, budget_alerts = $13,
	team_id = nullif($14, '')
	WHERE id = $1`, id, out.Name, out.Budget, out.Period.String(), out.RPM, out.TPM, out.MaxConcurrency, nonNil(out.Models), out.ExpiresAt,
			string(out.Metadata), out.UpdatedAt, out.CacheTTLSeconds, out.BudgetAlerts, out.TeamID)
		return err
	})
	if errors.Is(err, keys.ErrUnknown) || errors.Is(err, ErrUnavailable) {
		return keys.Key{}, err
	}
	if err := writeError("update key", err); err != nil {
		return keys.Key{}, err
	}
	return p.Get(ctx, id)
}

// Revoke implements Store.
func (p *Postgres) Revoke(ctx context.Context, id string, now time.Time) (keys.Key, error) {
	tag, err := p.pool.Exec(ctx, `UPDATE auth.keys SET revoked_at = coalesce(revoked_at, $2),
	updated_at = CASE WHEN revoked_at IS NULL THEN $2 ELSE updated_at END WHERE id = $1`, id, now)
	if err != nil {
		return keys.Key{}, fmt.Errorf("%w: revoke key: %v", ErrUnavailable, err)
	}
	if tag.RowsAffected() == 0 {
		return keys.Key{}, keys.ErrUnknown
	}
	return p.Get(ctx, id)
}

// foreignKeyViolation is PostgreSQL's code of a reference to a row that is not there.
const foreignKeyViolation = "23503"

// writeError is a write's failure: keys.ErrUnknownTeam for a team that is not there, else the store's
// unavailability.
func writeError(what string, err error) error {
	var pg *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pg) && pg.Code == foreignKeyViolation:
		return keys.ErrUnknownTeam
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
