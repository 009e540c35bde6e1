package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store"
	"github.com/jackc/pgx/v5"
)

// The records and the journal are partitioned by week (migrations/008_partitions.sql): a record's four
// tables by received_at, the journal by opened_at, each week a partition named after its Monday
// (workflow.executions_p20261130), and a DEFAULT partition that takes a row of any other time. The
// store makes the weeks ahead itself, at Open and at each upkeep, and drops whole old weeks.
const (
	// Week is the span of a partition.
	Week = 7 * 24 * time.Hour
	// WeeksAhead is how many weeks past the current one have their partitions made: upkeep may fail
	// for that long before rows fall into the DEFAULT partitions (where they are still kept, and moved
	// to their week's partition when it is made).
	WeeksAhead = 4
	// ddlLockTimeout bounds the wait for the locks a partition's creation or drop takes: rather than
	// queue the records' inserts behind a long reader, the change waits for the next upkeep.
	ddlLockTimeout = "1s"
	// partitionsLock is the advisory lock under which one controller at a time changes partitions.
	partitionsLock = 0x636f6e636c617665 // "conclave"
)

// partitioned is a partitioned table and its partition key.
type partitioned struct{ table, key string }

var (
	// recordTables hold a record's rows: a week of them goes, or stays, together.
	recordTables = []partitioned{{"workflow.executions", "received_at"}, {"workflow.worker_results", "received_at"},
		{"workflow.arbiter_decisions", "received_at"}, {"workflow.phases", "received_at"}}
	journalTable   = partitioned{"books.journal", "opened_at"}
	allPartitioned = append(slices.Clone(recordTables), journalTable)
)

// of names the table's partition of a week.
func (p partitioned) of(week time.Time) string { return p.table + "_p" + week.Format("20060102") }

// fallback names the table's DEFAULT partition.
func (p partitioned) fallback() string { return p.table + "_default" }

// WeekOf is the start of t's week, Monday 00:00 UTC: where its partition begins.
func WeekOf(t time.Time) time.Time {
	d := day(t)
	return d.AddDate(0, 0, -(int(d.Weekday())+6)%7)
}

// sqlTime writes a time as an SQL literal, for a partition's bounds (DDL takes no parameters).
func sqlTime(t time.Time) string { return "'" + t.UTC().Format("2006-01-02 15:04:05Z07:00") + "'" }

// weeks lists the weekly partitions there are, by name, with the week each holds.
func weeks(ctx context.Context, q querier) (map[string]time.Time, error) {
	parents := make([]string, len(allPartitioned))
	for i, p := range allPartitioned {
		parents[i] = p.table
	}
	rows, err := q.Query(ctx, `
SELECT child.relnamespace::regnamespace::text, parent.relname, child.relname
FROM pg_inherits i JOIN pg_class child ON child.oid = i.inhrelid JOIN pg_class parent ON parent.oid = i.inhparent
WHERE i.inhparent = ANY($1::regclass[])`, parents)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	var schema, parent, child string
	_, err = pgx.ForEachRow(rows, []any{&schema, &parent, &child}, func() error {
		if suffix, ok := strings.CutPrefix(child, parent+"_p"); ok {
			if week, err := time.Parse("20060102", suffix); err == nil {
				out[schema+"."+child] = week
			}
		}
		return nil
	})
	return out, err
}

// forDDL readies a transaction for changing partitions: a short lock timeout, and the advisory lock,
// which it reports not taking when another controller holds it (that one is doing the work).
func forDDL(ctx context.Context, tx pgx.Tx) (bool, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+ddlLockTimeout+"'"); err != nil {
		return false, err
	}
	var locked bool
	err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(partitionsLock)).Scan(&locked)
	return locked, err
}

// makeWeeks makes the partitions of the weeks from from's through to's that lack any, and returns how
// many it made.
func (s *Store) makeWeeks(ctx context.Context, from, to time.Time) (int, error) {
	have, err := weeks(ctx, s.pool)
	if err != nil {
		return 0, classify(err)
	}
	made := 0
	for week := WeekOf(from); !week.After(WeekOf(to)); week = week.Add(Week) {
		complete := true
		for _, p := range allPartitioned {
			if _, ok := have[p.of(week)]; !ok {
				complete = false
			}
		}
		if complete {
			continue
		}
		n, err := s.makeWeek(ctx, week)
		made += n
		if err != nil {
			return made, fmt.Errorf("partitions of the week of %s: %w", week.Format(time.DateOnly), classify(err))
		}
	}
	return made, nil
}

// makeWeek makes a week's partitions of every table, in one transaction. Each is made apart and then
// attached, which locks the parent against other changes of partitions only, not against inserts;
// rows of that week that went to the DEFAULT partition meanwhile move into it.
func (s *Store) makeWeek(ctx context.Context, week time.Time) (int, error) {
	made := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		made = 0
		if locked, err := forDDL(ctx, tx); err != nil || !locked {
			return err
		}
		lo, hi := sqlTime(week), sqlTime(week.Add(Week))
		for _, p := range allPartitioned {
			name := p.of(week)
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
				return err
			}
			if exists {
				continue
			}
			for _, stmt := range []string{
				fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, name, p.table),
				fmt.Sprintf(`WITH moved AS (DELETE FROM %s WHERE %s >= %s AND %s < %s RETURNING *) INSERT INTO %s SELECT * FROM moved`,
					p.fallback(), p.key, lo, p.key, hi, name),
				fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, p.table, name, lo, hi),
			} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			made++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return made, nil
}

// dropWeeks drops the weekly partitions that ended by cut: a week's four of records together, and
// its journal's unless an intent there is still open. With counted, it counts the records it drops.
func (s *Store) dropWeeks(ctx context.Context, cut time.Time, counted bool) (store.Upkeep, int64, error) {
	var up store.Upkeep
	var records int64
	have, err := weeks(ctx, s.pool)
	if err != nil {
		return up, 0, classify(err)
	}
	for _, week := range endedWeeks(have, cut) {
		var dropped, kept []string
		var n int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			dropped, kept, n, err = dropWeek(ctx, tx, week, have, counted)
			return err
		})
		if err != nil {
			return up, records, fmt.Errorf("drop the partitions of the week of %s: %w", week.Format(time.DateOnly), classify(err))
		}
		up.Dropped, up.Kept, records = append(up.Dropped, dropped...), append(up.Kept, kept...), records+n
	}
	return up, records, nil
}

// endedWeeks are the weeks of the partitions in have that ended by cut, oldest first, each once.
func endedWeeks(have map[string]time.Time, cut time.Time) []time.Time {
	var old []time.Time
	for _, week := range have {
		if !week.Add(Week).After(cut) && !slices.Contains(old, week) {
			old = append(old, week)
		}
	}
	slices.SortFunc(old, func(a, b time.Time) int { return a.Compare(b) })
	return old
}

// dropWeek drops, in tx, the partitions of week among have: the journal's is kept while an intent
// there is still open, and with counted the records dropped are counted. Without the DDL lock it
// drops nothing.
func dropWeek(ctx context.Context, tx pgx.Tx, week time.Time, have map[string]time.Time, counted bool) (dropped, kept []string, records int64, err error) {
	if locked, err := forDDL(ctx, tx); err != nil || !locked {
		return nil, nil, 0, err
	}
	for _, p := range allPartitioned {
		name := p.of(week)
		if _, ok := have[name]; !ok {
			continue
		}
		switch {
		case p == journalTable:
			open, err := openIntents(ctx, tx, name)
			if err != nil {
				return nil, nil, 0, err
			}
			if open {
				kept = append(kept, name)
				continue
			}
		case p == recordTables[0] && counted:
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+name).Scan(&records); err != nil {
				return nil, nil, 0, err
			}
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+name); err != nil {
			return nil, nil, 0, err
		}
		dropped = append(dropped, name)
	}
	return dropped, kept, records, nil
}

// openIntents says whether a journal partition still holds an open intent.
func openIntents(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	var open bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+name+` WHERE state = 'open')`).Scan(&open)
	return open, err
}

// deleteRecordsSQL deletes up to $2 records received before $1 from executions, and their rows from
// the other three tables (no foreign key cascades: see migrations/008_partitions.sql). Their rows are
// found by (request_id, received_at), within the partitions before $1.
const deleteRecordsSQL = `
WITH gone AS (
    DELETE FROM %[1]s WHERE (request_id, received_at) IN (
        SELECT request_id, received_at FROM %[1]s WHERE received_at < $1 ORDER BY received_at LIMIT $2)
    RETURNING request_id, received_at
), results AS (
    DELETE FROM %[2]s r USING gone WHERE r.request_id = gone.request_id AND r.received_at = gone.received_at AND r.received_at < $1
), verdicts AS (
    DELETE FROM %[3]s d USING gone WHERE d.request_id = gone.request_id AND d.received_at = gone.received_at AND d.received_at < $1
), phases AS (
    DELETE FROM %[4]s p USING gone WHERE p.request_id = gone.request_id AND p.received_at = gone.received_at AND p.received_at < $1
)
SELECT count(*) FROM gone`

// deleteRecords deletes the records received before a time, batch by batch, from the tables or (with
// fallback) from their DEFAULT partitions only, and returns how many it deleted.
func (s *Store) deleteRecords(ctx context.Context, before time.Time, batch int, fallback bool) (int64, error) {
	names := make([]any, len(recordTables))
	for i, p := range recordTables {
		names[i] = p.table
		if fallback {
			names[i] = p.fallback()
		}
	}
	q := fmt.Sprintf(deleteRecordsSQL, names...)
	var total int64
	for {
		var n int64
		if err := s.pool.QueryRow(ctx, q, before, batch).Scan(&n); err != nil {
			return total, classify(err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// deleteCalls deletes the settled calls sent before a time from the journal, or from its DEFAULT
// partition only: in one statement, as the journal has no index by time (the partitions before the
// time are read, which once whole weeks are dropped is one week's and the DEFAULT's).
func (s *Store) deleteCalls(ctx context.Context, before time.Time, fallback bool) (int64, error) {
	table := journalTable.table
	if fallback {
		table = journalTable.fallback()
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE opened_at < $1 AND state <> 'open'`, before)
	return tag.RowsAffected(), classify(err)
}

// Upkeep implements store.Partitioned.
func (s *Store) Upkeep(ctx context.Context, now time.Time, keep time.Duration) (store.Upkeep, error) {
	made, err := s.makeWeeks(ctx, now, now.Add(WeeksAhead*Week))
	if keep <= 0 || err != nil {
		return store.Upkeep{Created: made}, err
	}
	cut := now.Add(-keep)
	up, _, err := s.dropWeeks(ctx, cut, false)
	up.Created = made
	if err != nil {
		return up, err
	}
	records, err := s.deleteRecords(ctx, cut, 10000, true)
	up.Deleted += records
	if err != nil {
		return up, err
	}
	calls, err := s.deleteCalls(ctx, cut, true)
	up.Deleted += calls
	return up, err
}

// Prune deletes the records received before a time and the settled calls sent before it: whole weeks
// of partitions where it can (a journal's week that holds an open intent stays), then the rows before
// the time in the week that straddles it and in the DEFAULT partitions, records batch by batch. It
// returns how many records it deleted. What the bandit learned from them, and the keys' spend, stay.
func (s *Store) Prune(ctx context.Context, before time.Time, batch int) (int64, error) {
	_, total, err := s.dropWeeks(ctx, before, true)
	if err != nil {
		return total, err
	}
	n, err := s.deleteRecords(ctx, before, batch, false)
	total += n
	if err != nil {
		return total, err
	}
	_, err = s.deleteCalls(ctx, before, false)
	return total, err
}
