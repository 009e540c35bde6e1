package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store/postgres"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/migrations"
	"github.com/jackc/pgx/v5"
)

const migrateUsage = `Usage: conclave migrate up|down|status [flags]

Applies the schema migrations embedded in this build to the PostgreSQL at DATABASE_URL, under an
advisory lock (controllers starting together do not race).

  up       apply every migration not applied yet
  down     undo migrations: the last one, or down to --to
  status   print the schema's version and this build's migrations

Flags of down:
  --to N   the version to go down to (default: one less than the current; 0 drops everything)
`

const recordsUsage = `Usage: conclave records prune --older-than DURATION [--batch N]

Deletes the execution records (with their calls, verdicts and phases) received more than DURATION ago,
and the settled calls of the journal sent before then, from the PostgreSQL at DATABASE_URL. Records
and the journal are kept in weekly partitions: the weeks wholly before the cut are dropped at once
(a week of the journal that still holds a call not settled stays); the rows before the cut in the week
that straddles it are deleted, records in batches. What the bandit learned, and the keys' spend, stay.
records.retention_days in the configuration does the same each hour, by whole weeks only.

  --older-than DURATION   30d, 12h, 90m ... (required)
  --batch N               records deleted per statement in the straddling week (default 1000)
`

// databaseURL is DATABASE_URL: environment only, since a password does not belong on a command line.
func databaseURL() (secret.String, error) {
	u := secret.String(os.Getenv("DATABASE_URL"))
	if !u.Set() {
		return "", errors.New("DATABASE_URL is not set")
	}
	return u, nil
}

func connect(ctx context.Context) (*pgx.Conn, error) {
	u, err := databaseURL()
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(u.Reveal())
	if err != nil {
		return nil, errors.New("DATABASE_URL is not a PostgreSQL URL or connection string")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	return conn, nil
}

// migrate runs `conclave migrate up|down|status` on the PostgreSQL at DATABASE_URL, then prints the
// schema's version and this build's migrations.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, migrateUsage)
		return errors.New("migrate needs up, down or status")
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, migrateUsage)
		return nil
	}
	cmd := args[0]
	fs := flag.NewFlagSet("migrate "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	to := fs.Int("to", -1, "")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w (see conclave migrate --help)", err)
	}
	if fs.NArg() > 0 || (cmd != "down" && *to != -1) {
		return fmt.Errorf("unexpected arguments (see conclave migrate --help)")
	}
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	before, err := migrations.Read(ctx, conn)
	if err != nil {
		return err
	}
	if err := applyMigrations(ctx, conn, cmd, *to, before); err != nil {
		return err
	}
	after, err := migrations.Read(ctx, conn)
	if err != nil {
		return err
	}
	printSchema(stdout, cmd, before, after)
	return nil
}

// applyMigrations does what a migrate command says: up applies every migration not applied yet, down
// undoes them down to version to (below zero: one less than the current), status changes nothing.
func applyMigrations(ctx context.Context, conn *pgx.Conn, cmd string, to int, before migrations.Status) error {
	switch cmd {
	case "up":
		return migrations.Up(ctx, conn)
	case "down":
		target := int32(to)
		if to < 0 {
			target = max(before.Current-1, 0)
		}
		return migrations.Down(ctx, conn, target)
	case "status":
		return nil
	}
	return fmt.Errorf("unknown migrate command %q (see conclave migrate --help)", cmd)
}

// printSchema prints the schema's version (with the change, unless the command was status) and each
// migration of this build, applied or pending.
func printSchema(stdout io.Writer, cmd string, before, after migrations.Status) {
	if cmd != "status" {
		fmt.Fprintf(stdout, "schema version %d -> %d\n", before.Current, after.Current)
	}
	fmt.Fprintf(stdout, "schema version %d of %d\n", after.Current, after.Latest)
	for i, name := range after.Names {
		state := "pending"
		if int32(i) < after.Current {
			state = "applied"
		}
		fmt.Fprintf(stdout, "  %3d %-8s %s\n", i+1, state, name)
	}
}

func records(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "prune" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(stdout, recordsUsage)
			return nil
		}
		fmt.Fprint(stderr, recordsUsage)
		return errors.New("records needs prune")
	}
	fs := flag.NewFlagSet("records prune", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	older := fs.String("older-than", "", "")
	batch := fs.Int("batch", 1000, "")
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, recordsUsage)
		return nil
	} else if err != nil {
		return fmt.Errorf("%w (see conclave records --help)", err)
	}
	age, err := parseAge(*older)
	if err != nil {
		return fmt.Errorf("--older-than: %w", err)
	}
	if *batch < 1 || *batch > 100000 {
		return errors.New("--batch must be from 1 to 100000")
	}
	u, err := databaseURL()
	if err != nil {
		return err
	}
	s, err := postgres.Open(ctx, u, postgres.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	before := time.Now().Add(-age)
	n, err := s.Prune(ctx, before, *batch)
	fmt.Fprintf(stdout, "deleted %d records received before %s\n", n, before.UTC().Format(time.RFC3339))
	return err
}

// parseAge reads a duration that may count days: 30d, 36h, 90m.
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("required, such as 30d")
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n <= 0 || n > 36500 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n * 24 * float64(time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 30d or 12h", s)
	}
	return d, nil
}
