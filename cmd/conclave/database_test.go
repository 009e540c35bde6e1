package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMigrateAndPruneCommands(t *testing.T) {
	url := pgtest.New(t, false)
	t.Setenv("DATABASE_URL", url.Reveal())
	ctx := context.Background()
	steps := []struct {
		args, want string
	}{
		{"migrate status", "schema version 0 of 12"},
		{"migrate up", "schema version 0 -> 12"},
		{"migrate down", "schema version 12 -> 11"},
		{"migrate up", "schema version 11 -> 12"},
		{"migrate down --to 0", "schema version 12 -> 0"},
		{"migrate up", "  1 applied  001_workflow.sql"},
		{"records prune --older-than 30d", "deleted 0 records"},
	}
	for _, s := range steps {
		var out, errOut bytes.Buffer
		if err := run(ctx, strings.Fields(s.args), &out, &errOut); err != nil || !strings.Contains(out.String(), s.want) {
			t.Fatalf("%s: %v\n%s", s.args, err, out.String())
		}
	}
	var out bytes.Buffer
	for _, bad := range []string{"migrate sideways", "migrate up --to 2", "records prune", "records prune --older-than soon", "records prune --older-than 30d --batch 0"} {
		if err := run(ctx, strings.Fields(bad), &out, &out); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	t.Setenv("DATABASE_URL", "")
	if err := run(ctx, []string{"migrate", "status"}, &out, &out); err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not set") {
		t.Fatalf("without DATABASE_URL: %v", err)
	}
}

// The records and the journal go into weekly partitions (008) and back into single tables with every
// row, whatever its time: a row older than the partitions made goes to the DEFAULT partition. Then
// prune drops the weeks before its cut and deletes the rows before it in the week that straddles it.
func TestMigratePartitionsKeepsEveryRow(t *testing.T) {
	url := pgtest.New(t, false)
	t.Setenv("DATABASE_URL", url.Reveal())
	ctx := context.Background()
	command := func(args, want string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, strings.Fields(args), &out, &errOut); err != nil || !strings.Contains(out.String(), want) {
			t.Fatalf("%s: %v\n%s%s", args, err, out.String(), errOut.String())
		}
	}
	command("migrate up", "schema version 0 -> 12")
	command("migrate down --to 7", "schema version 12 -> 7")
	conn, err := pgx.Connect(ctx, url.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// 60 records a day apart back from tomorrow, one three years old and one a year ahead; four calls,
	// a verdict and two phases each; a call of each, open for the oldest.
	_, err = conn.Exec(ctx, `
INSERT INTO workflow.executions (request_id, received_at, task, outcome, status_code, record, key_id, cost_nanos)
SELECT 'r' || i, CASE i WHEN 0 THEN now() - interval '3 years' WHEN 61 THEN now() + interval '1 year' ELSE now() - (i - 2) * interval '1 day' + interval '1 hour' END,
    'task ' || i, 'ok', 200, '\x0a01'::bytea, 'key_a', i
FROM generate_series(0, 61) i;
INSERT INTO workflow.worker_results (request_id, position, model, provider, status, cost_nanos, decider)
SELECT request_id, p, 'm-' || p, 'groq', 'ok', p, p = 0 FROM workflow.executions, generate_series(0, 3) p;
INSERT INTO workflow.arbiter_decisions (request_id, strategy, arbiter_cost_nanos) SELECT request_id, 'weighted', 7 FROM workflow.executions;
INSERT INTO workflow.phases (request_id, phase, duration_ms) SELECT request_id, ph, 1.5 FROM workflow.executions, unnest(ARRAY['collect', 'total']) ph;
INSERT INTO books.journal (call_id, request_id, key_id, model, provider, node_id, run_id, opened_at, deadline, reserved_nanos, reserved_tokens, state, cost_nanos)
SELECT request_id || '/0', request_id, key_id, 'm-0', 'groq', 'node-a', 'run-1', received_at, received_at + interval '1 minute', 5, 10,
    CASE WHEN request_id = 'r0' THEN 'open' ELSE 'settled' END, 5 FROM workflow.executions;`)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]string{
		"workflow.executions":        `request_id, received_at, task, cost_nanos, key_id`,
		"workflow.worker_results":    `request_id, position, model, cost_nanos, decider`,
		"workflow.arbiter_decisions": `request_id, strategy, arbiter_cost_nanos`,
		"workflow.phases":            `request_id, phase, duration_ms`,
		"books.journal":              `call_id, request_id, opened_at, state, cost_nanos`,
	}
	rows := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for table, cols := range tables {
			var n int
			var sum string
			if err := conn.QueryRow(ctx, `SELECT count(*), md5(string_agg((`+cols+`)::text, ',' ORDER BY (`+cols+`)::text)) FROM `+table).Scan(&n, &sum); err != nil {
				t.Fatal(err)
			}
			out[table] = fmt.Sprintf("%d rows %s", n, sum)
		}
		return out
	}
	before := rows()
	if before["workflow.executions"][:8] != "62 rows " || before["workflow.worker_results"][:9] != "248 rows " {
		t.Fatalf("the rows written: %v", before)
	}
	command("migrate up", "schema version 7 -> 12")
	if after := rows(); !maps.Equal(before, after) {
		t.Fatalf("up changed the rows:\n%v\n%v", before, after)
	}
	var outside int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM workflow.executions_default`).Scan(&outside); err != nil || outside != 2 {
		t.Fatalf("%d records in the DEFAULT partition (%v), want the one three years old and the one ahead", outside, err)
	}
	command("migrate down --to 7", "schema version 12 -> 7")
	if after := rows(); !maps.Equal(before, after) {
		t.Fatalf("down changed the rows:\n%v\n%v", before, after)
	}
	command("migrate up", "schema version 7 -> 12")
	// 30 days: r33 to r60 are before the cut, and r0, three years old; the journal
	// keeps r0's open call.
	command("records prune --older-than 30d", "deleted 29 records")
	var records, calls int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM workflow.executions), (SELECT count(*) FROM books.journal)`).Scan(&records, &calls); err != nil ||
		records != 33 || calls != 34 {
		t.Fatalf("after prune: %d records and %d calls (%v)", records, calls, err)
	}
	var orphans int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM workflow.worker_results r WHERE NOT EXISTS (
    SELECT 1 FROM workflow.executions e WHERE e.request_id = r.request_id AND e.received_at = r.received_at)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("%d calls left without their record (%v)", orphans, err)
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "1.5d": 36 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("%s: %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1d", "0", "d", "soon"} {
		if _, err := parseAge(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
