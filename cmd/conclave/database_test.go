package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/pgtest"
)

func TestMigrateAndPruneCommands(t *testing.T) {
	url := pgtest.New(t, false)
	t.Setenv("DATABASE_URL", url.Reveal())
	ctx := context.Background()
	steps := []struct {
		args, want string
	}{
		{"migrate status", "schema version 0 of 7"},
		{"migrate up", "schema version 0 -> 7"},
		{"migrate down", "schema version 7 -> 6"},
		{"migrate up", "schema version 6 -> 7"},
		{"migrate down --to 0", "schema version 7 -> 0"},
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
