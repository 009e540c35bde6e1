package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/eval"
)

// evaluate runs `conclave eval`: the real pipeline over replayed benchmark answers.
func evaluate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEvalFlags()
	if err := f.fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		f.fs.SetOutput(stdout)
		f.fs.Usage()
		return nil
	} else if err != nil {
		return err
	}
	runList, err := eval.ParseRuns(f.runs)
	if err != nil {
		return err
	}
	rd, err := f.replayData()
	if err != nil {
		return err
	}
	seeds := []uint64{f.seed}
	if f.seedList != "" {
		if seeds, err = parseSeeds(f.seedList); err != nil {
			return err
		}
	}
	reports, err := f.evaluateSeeds(ctx, rd, runList, seeds, stderr)
	if err != nil {
		return err
	}
	return f.writeReports(reports, stdout)
}

// evalFlags are the flags of `conclave eval`.
type evalFlags struct {
	fs                               *flag.FlagSet
	data, datasets, runs, seedList   string
	strategy, quorumMode, categoryBy string
	out, classifierSets              string
	seed                             uint64
	workers, quorum, limit, every    int
	latency                          time.Duration
}

func newEvalFlags() *evalFlags {
	f := &evalFlags{fs: flag.NewFlagSet("eval", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(io.Discard) // --help prints to stdout below; errors reach stderr through the caller
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: conclave eval [flags]\n\nReplays recorded answers of public models through the real pipeline and reports accuracy and regret.\nIts flags have no environment variables.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&f.data, "data", "../shared/data/replay", "directory of <dataset>.dev.jsonl.gz replay files")
	fs.StringVar(&f.datasets, "datasets", strings.Join(eval.DefaultDatasets, ","), "datasets to replay")
	fs.StringVar(&f.runs, "runs", runNames(eval.DefaultRuns), "policy/reward configurations (rewards: reliability, agreement, arbiter, gold, gold5; reliability-dep and gold5-dep model dependence)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the order and of selection")
	fs.StringVar(&f.seedList, "seeds", "", "seeds to repeat the evaluation with, e.g. 1,2,3: every figure as its mean and range (overrides --seed)")
	fs.IntVar(&f.workers, "workers", 5, "models asked per prompt")
	fs.IntVar(&f.quorum, "min-responses", 3, "min_responses")
	fs.StringVar(&f.strategy, "strategy", "majority", "consensus strategy")
	fs.StringVar(&f.quorumMode, "quorum", "fixed", "fixed (ask every model at once) or adaptive (best-first in waves of min-responses until the answer is settled)")
	fs.StringVar(&f.categoryBy, "category-by", "dataset", "bandit categories: dataset, subject or classify")
	fs.IntVar(&f.limit, "limit", 0, "at most this many prompts per dataset (0: all)")
	fs.DurationVar(&f.latency, "latency", 0, "median latency of every replayed model (0: none, deterministic)")
	fs.IntVar(&f.every, "every", 100, "timeline step in prompts")
	fs.StringVar(&f.out, "out", "reports/eval", "directory for report.json, report.md and report.svg (and classifier.json, classifier.svg)")
	fs.StringVar(&f.classifierSets, "classifier-sets", "internal/core/classify/testdata/*.jsonl", "labelled task sets (JSONL: category, shape, text) the classifier is measured on besides its held-out split")
	return f
}

// replayData loads the recorded answers of the datasets asked for, at most --limit prompts of each.
func (f *evalFlags) replayData() (*providers.ReplayData, error) {
	if _, err := os.Stat(f.data); err != nil {
		return nil, fmt.Errorf("replay data: %w (give its directory with --data)", err)
	}
	rd, err := providers.LoadReplay(f.data, strings.Split(f.datasets, ","))
	if err != nil {
		return nil, err
	}
	if f.limit > 0 {
		rd = limitPerDataset(rd, f.limit)
	}
	return rd, nil
}

// evaluateSeeds runs the evaluation once per seed, telling stderr how each run progresses (at most
// every 5 s, and when it ends).
func (f *evalFlags) evaluateSeeds(ctx context.Context, rd *providers.ReplayData, runs []eval.Run, seeds []uint64, stderr io.Writer) ([]*eval.Report, error) {
	lastReport := time.Now()
	var reports []*eval.Report
	for _, s := range seeds {
		rep, err := eval.Evaluate(ctx, eval.Options{
			Data: rd, Runs: runs, Seed: s, Workers: f.workers, Quorum: f.quorum, Strategy: f.strategy, QuorumMode: f.quorumMode, CategoryBy: f.categoryBy,
			Every: f.every, Latency: providers.Latency{Median: f.latency, Sigma: 0.3},
			Progress: func(run string, done, total int) {
				if time.Since(lastReport) > 5*time.Second || done == total {
					fmt.Fprintf(stderr, "eval: seed %d %s %d/%d\n", s, run, done, total)
					lastReport = time.Now()
				}
			},
		})
		if err != nil {
			return nil, err
		}
		reports = append(reports, rep)
	}
	return reports, nil
}

// writeReports writes the reports (their summary across seeds, when there are several) and the
// classifier's calibration to the --out directory as JSON, Markdown and SVG, and prints the tables.
func (f *evalFlags) writeReports(reports []*eval.Report, stdout io.Writer) error {
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	rep := reports[0]
	var table strings.Builder
	var summary any = rep
	if len(reports) > 1 {
		s := eval.Summarize(reports)
		s.WriteTable(&table)
		table.WriteString("\n")
		summary = s
	}
	rep.WriteTable(&table)
	cls, err := classify.New(classify.Options{})
	if err != nil {
		return err
	}
	calibration, err := eval.EvaluateClassifier(cls, f.classifierSets)
	if err != nil {
		return err
	}
	calibration.WriteTable(&table)
	raw, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	rawClassifier, err := json.MarshalIndent(calibration, "", "  ")
	if err != nil {
		return err
	}
	var svg, classifierSVG bytes.Buffer
	err = errors.Join(rep.WriteSVG(&svg), calibration.WriteSVG(&classifierSVG),
		os.WriteFile(filepath.Join(f.out, "report.svg"), svg.Bytes(), 0o644),
		os.WriteFile(filepath.Join(f.out, "classifier.svg"), classifierSVG.Bytes(), 0o644),
		os.WriteFile(filepath.Join(f.out, "report.json"), append(raw, '\n'), 0o644),
		os.WriteFile(filepath.Join(f.out, "classifier.json"), append(rawClassifier, '\n'), 0o644),
		os.WriteFile(filepath.Join(f.out, "report.md"), []byte(table.String()), 0o644))
	fmt.Fprint(stdout, table.String())
	fmt.Fprintf(stdout, "\nreport: %s (report.json, report.md, report.svg), %s\n", f.out, rep.Elapsed)
	return err
}

// parseSeeds reads "1,2,3".
func parseSeeds(s string) ([]uint64, error) {
	var seeds []uint64
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a seed", part)
		}
		seeds = append(seeds, n)
	}
	return seeds, nil
}

func runNames(runs []eval.Run) string {
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name()
	}
	return strings.Join(names, ",")
}

// limitPerDataset keeps the first n records of each dataset.
func limitPerDataset(d *providers.ReplayData, n int) *providers.ReplayData {
	kept := &providers.ReplayData{Merged: d.Merged}
	count := map[string]int{}
	for _, r := range d.Records {
		if count[r.Dataset] < n {
			count[r.Dataset]++
			kept.Add(r)
		}
	}
	return kept
}
