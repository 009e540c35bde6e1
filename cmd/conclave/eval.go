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
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // --help prints to stdout below; errors reach stderr through the caller
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: conclave eval [flags]\n\nReplays recorded answers of public models through the real pipeline and reports accuracy and regret.\nIts flags have no environment variables.\n\n")
		fs.PrintDefaults()
	}
	data := fs.String("data", "../shared/data/replay", "directory of <dataset>.dev.jsonl.gz replay files")
	datasets := fs.String("datasets", strings.Join(eval.DefaultDatasets, ","), "datasets to replay")
	runs := fs.String("runs", runNames(eval.DefaultRuns), "policy/reward configurations (rewards: reliability, agreement, arbiter, gold, gold5; reliability-dep and gold5-dep model dependence)")
	seed := fs.Uint64("seed", 1, "seed of the order and of selection")
	seedList := fs.String("seeds", "", "seeds to repeat the evaluation with, e.g. 1,2,3: every figure as its mean and range (overrides --seed)")
	workers := fs.Int("workers", 5, "models asked per prompt")
	quorum := fs.Int("min-responses", 3, "min_responses")
	strategy := fs.String("strategy", "majority", "consensus strategy")
	quorumMode := fs.String("quorum", "fixed", "fixed (ask every model at once) or adaptive (best-first in waves of min-responses until the answer is settled)")
	categoryBy := fs.String("category-by", "dataset", "bandit categories: dataset, subject or classify")
	limit := fs.Int("limit", 0, "at most this many prompts per dataset (0: all)")
	latency := fs.Duration("latency", 0, "median latency of every replayed model (0: none, deterministic)")
	every := fs.Int("every", 100, "timeline step in prompts")
	out := fs.String("out", "reports/eval", "directory for report.json, report.md and report.svg (and classifier.json, classifier.svg)")
	classifierSets := fs.String("classifier-sets", "internal/core/classify/testdata/*.jsonl", "labelled task sets (JSONL: category, shape, text) the classifier is measured on besides its held-out split")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	} else if err != nil {
		return err
	}
	runList, err := eval.ParseRuns(*runs)
	if err != nil {
		return err
	}
	if _, err := os.Stat(*data); err != nil {
		return fmt.Errorf("replay data: %w (give its directory with --data)", err)
	}
	rd, err := providers.LoadReplay(*data, strings.Split(*datasets, ","))
	if err != nil {
		return err
	}
	if *limit > 0 {
		rd = limitPerDataset(rd, *limit)
	}
	seeds := []uint64{*seed}
	if *seedList != "" {
		if seeds, err = parseSeeds(*seedList); err != nil {
			return err
		}
	}
	lastReport := time.Now()
	var reports []*eval.Report
	for _, s := range seeds {
		rep, err := eval.Evaluate(ctx, eval.Options{
			Data: rd, Runs: runList, Seed: s, Workers: *workers, Quorum: *quorum, Strategy: *strategy, QuorumMode: *quorumMode, CategoryBy: *categoryBy,
			Every: *every, Latency: providers.Latency{Median: *latency, Sigma: 0.3},
			Progress: func(run string, done, total int) {
				if time.Since(lastReport) > 5*time.Second || done == total {
					fmt.Fprintf(stderr, "eval: seed %d %s %d/%d\n", s, run, done, total)
					lastReport = time.Now()
				}
			},
		})
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
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
	calibration, err := eval.EvaluateClassifier(cls, *classifierSets)
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
		os.WriteFile(filepath.Join(*out, "report.svg"), svg.Bytes(), 0o644),
		os.WriteFile(filepath.Join(*out, "classifier.svg"), classifierSVG.Bytes(), 0o644),
		os.WriteFile(filepath.Join(*out, "report.json"), append(raw, '\n'), 0o644),
		os.WriteFile(filepath.Join(*out, "classifier.json"), append(rawClassifier, '\n'), 0o644),
		os.WriteFile(filepath.Join(*out, "report.md"), []byte(table.String()), 0o644))
	fmt.Fprint(stdout, table.String())
	fmt.Fprintf(stdout, "\nreport: %s (report.json, report.md, report.svg), %s\n", *out, rep.Elapsed)
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
