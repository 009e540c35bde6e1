// Command classifier trains the task classifier on the training split of the shipped examples and
// writes its weights, which the classify package embeds (make classifier). Training is seeded: the same
// data gives the same file.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/conclave-ai/conclave/internal/core/classify"
)

func main() {
	out := flag.String("out", "internal/core/classify/model/classifier.bin", "where to write the weights")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "classifier:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	train, held, err := classify.Dataset()
	if err != nil {
		return err
	}
	start := time.Now()
	m, err := classify.TrainModel(train, classify.TrainOptions{})
	if err != nil {
		return err
	}
	took := time.Since(start)
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	// The file as shipped is what is measured: its weights are quantised.
	var shipped classify.Model
	if err := shipped.UnmarshalBinary(b); err != nil {
		return err
	}
	c, err := classify.WithModel(&shipped, classify.Options{})
	if err != nil {
		return err
	}
	right := 0
	for _, ex := range held {
		if c.Classify(ex.Text).Category == ex.Category {
			right++
		}
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return err
	}
	fmt.Printf("trained on %d examples in %s; temperature %.2f; held-out accuracy %.1f%% (%d/%d); wrote %s (%d bytes)\n",
		len(train), took.Round(time.Millisecond), m.Temperature, 100*float64(right)/float64(len(held)), right, len(held), out, len(b))
	return nil
}
