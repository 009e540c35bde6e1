package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/store/postgres"
)

const booksUsage = `Usage: conclave books check [--since DURATION]

Checks the books of the PostgreSQL at DATABASE_URL: every key's spend by budget period against its
spend by day and model; for the calls sent since DURATION ago, the journal of calls against both, and
against the execution records (each call's cost in its request's record, each record's cost against
its calls'); and no call left open well past its deadline. Prints every difference and exits 1 on any.

  --since DURATION   30d, 12h, 90m ... (default 30d)
`

// ErrBooksDiffer is the check's failure: the books disagree somewhere, and the output says where.
var ErrBooksDiffer = errors.New("the books do not balance")

// booksCommand runs `conclave books check`: it prints every difference between the books of the
// PostgreSQL at DATABASE_URL, and fails with ErrBooksDiffer when there is one.
func booksCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(stdout, booksUsage)
			return nil
		}
		fmt.Fprint(stderr, booksUsage)
		return errors.New("books needs check")
	}
	fs := flag.NewFlagSet("books check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sinceFlag := fs.String("since", "30d", "")
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, booksUsage)
		return nil
	} else if err != nil {
		return fmt.Errorf("%w (see conclave books --help)", err)
	}
	age, err := parseAge(*sinceFlag)
	if err != nil {
		return fmt.Errorf("--since: %w", err)
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
	r, err := s.CheckBooks(ctx, time.Now().Add(-age))
	if err != nil {
		return err
	}
	return printBooks(stdout, r)
}

// shownDifferences bounds the differences the check prints; the rest are counted.
const shownDifferences = 100

// printBooks prints what the check found: its totals, then each difference; it returns ErrBooksDiffer
// when there is one.
func printBooks(stdout io.Writer, r postgres.BooksReport) error {
	fmt.Fprintf(stdout, "books since %s: %d calls, %d requests, %d keys, $%s charged\n", r.Since.UTC().Format(time.RFC3339),
		r.Calls, r.Requests, r.Keys, r.Charged)
	for _, d := range r.Differences[:min(len(r.Differences), shownDifferences)] {
		fmt.Fprintln(stdout, "  "+d.String())
	}
	if n := len(r.Differences); n > shownDifferences {
		fmt.Fprintf(stdout, "  and %d more\n", n-shownDifferences)
	}
	if len(r.Differences) > 0 {
		fmt.Fprintf(stdout, "%d differences\n", len(r.Differences))
		return ErrBooksDiffer
	}
	fmt.Fprintln(stdout, "the books balance")
	return nil
}
