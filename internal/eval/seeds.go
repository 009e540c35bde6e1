package eval

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Stat is a figure over seeds: its mean and range.
type Stat struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func stat(xs []float64) Stat {
	s := Stat{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		s.Mean += x / float64(len(xs))
		s.Min, s.Max = math.Min(s.Min, x), math.Max(s.Max, x)
	}
	return s
}

// RunStats are one run's figures on one dataset over the seeds.
type RunStats struct {
	Accuracy        Stat `json:"accuracy"`
	SecondHalf      Stat `json:"second_half_accuracy"`
	Regret          Stat `json:"regret"`
	ModelsPerPrompt Stat `json:"models_per_prompt"`
}

// Summary is an evaluation repeated over several seeds: every figure as its mean and range.
type Summary struct {
	Seeds []uint64 `json:"seeds"`
	Runs  []string `json:"runs"`
	// Datasets holds, per dataset and "overall", each run's figures; the baselines do not depend on
	// the seed.
	Datasets   map[string]map[string]RunStats `json:"datasets"`
	BestSingle map[string]float64             `json:"best_single"`
	Oracle     map[string]float64             `json:"oracle_ensemble"`
	// FreeText holds, per free-text run, the mean judge preferences over the seeds.
	FreeText map[string]OpenStats `json:"free_text,omitempty"`
	Reports  []*Report            `json:"reports"`
}

// OpenStats are a free-text run's preferences over the seeds.
type OpenStats struct {
	Preference   Stat    `json:"preference"`
	RandomMember Stat    `json:"random_member"`
	BestMember   Stat    `json:"best_member"`
	BestSingle   float64 `json:"best_single"`
}

func spanOf(x Stat, f func(float64) string) string {
	return fmt.Sprintf("%s (%s–%s)", f(x.Mean), f(x.Min), f(x.Max))
}

// Overall names the whole stream among a summary's datasets.
const Overall = "overall"

// Summarize puts reports of the same evaluation under different seeds together.
func Summarize(reports []*Report) *Summary {
	s := &Summary{Datasets: map[string]map[string]RunStats{}, BestSingle: map[string]float64{}, Oracle: map[string]float64{}, Reports: reports}
	if len(reports) == 0 {
		return s
	}
	s.Runs = reports[0].Runs
	for _, r := range reports {
		s.Seeds = append(s.Seeds, r.Seed)
	}
	if reports[0].FreeText != nil {
		s.FreeText = map[string]OpenStats{}
		for run := range reports[0].FreeText.Runs {
			var pref, random, best []float64
			for _, r := range reports {
				x := r.FreeText.Runs[run]
				pref, random, best = append(pref, x.Preference), append(random, x.RandomMember), append(best, x.BestMember)
			}
			s.FreeText[run] = OpenStats{Preference: stat(pref), RandomMember: stat(random), BestMember: stat(best), BestSingle: reports[0].FreeText.BestSingle.Accuracy}
		}
	}
	if reports[0].Overall == nil {
		return s
	}
	datasets := map[string]func(*Report) *DatasetReport{Overall: func(r *Report) *DatasetReport { return r.Overall }}
	for name := range reports[0].Datasets {
		datasets[name] = func(r *Report) *DatasetReport { return r.Datasets[name] }
	}
	for name, of := range datasets {
		s.BestSingle[name] = of(reports[0]).BestSingle.Accuracy
		s.Oracle[name] = of(reports[0]).Oracle.Accuracy
		byRun := map[string]RunStats{}
		for _, run := range s.Runs {
			var acc, half, regret, calls []float64
			for _, r := range reports {
				x := of(r).Runs[run]
				acc, half, regret, calls = append(acc, x.Accuracy), append(half, x.SecondHalf), append(regret, x.Regret), append(calls, x.ModelsPerPrompt)
			}
			byRun[run] = RunStats{Accuracy: stat(acc), SecondHalf: stat(half), Regret: stat(regret), ModelsPerPrompt: stat(calls)}
		}
		s.Datasets[name] = byRun
	}
	return s
}

// WriteTable writes the summary as Markdown: per dataset and overall, each run's accuracy, accuracy
// over the second half, regret and models called per prompt, as the mean with the range over seeds.
func (s *Summary) WriteTable(w io.Writer) {
	names := make([]string, 0, len(s.Datasets))
	for n := range s.Datasets {
		if n != Overall {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	names = append(names, Overall)
	seeds := make([]string, len(s.Seeds))
	for i, x := range s.Seeds {
		seeds[i] = fmt.Sprint(x)
	}
	fmt.Fprintf(w, "seeds %s: mean (min–max)\n\n", strings.Join(seeds, ", "))
	defer s.writeFreeText(w)
	if len(s.Datasets) == 0 {
		return
	}
	fmt.Fprintf(w, "| | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
	row := func(label string, cell func(name string) string) {
		cells := make([]string, len(names))
		for i, n := range names {
			cells[i] = cell(n)
		}
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	row("best single model in hindsight", func(n string) string { return pct(s.BestSingle[n]) })
	row("oracle majority", func(n string) string { return pct(s.Oracle[n]) })
	span := spanOf
	one := func(x float64) string { return fmt.Sprintf("%.1f", x) }
	two := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	for _, run := range s.Runs {
		row(run+" accuracy", func(n string) string { return span(s.Datasets[n][run].Accuracy, pct) })
		row(run+" second half", func(n string) string { return span(s.Datasets[n][run].SecondHalf, pct) })
		row(run+" regret", func(n string) string { return span(s.Datasets[n][run].Regret, one) })
		row(run+" models per prompt", func(n string) string { return span(s.Datasets[n][run].ModelsPerPrompt, two) })
	}
}

func (s *Summary) writeFreeText(w io.Writer) {
	if len(s.FreeText) == 0 {
		return
	}
	runs := make([]string, 0, len(s.FreeText))
	for run := range s.FreeText {
		runs = append(runs, run)
	}
	sort.Strings(runs)
	fmt.Fprintf(w, "\nfree text (alpaca-eval), mean judge preference: mean (min–max)\n\n| run | answer returned | random panel member | best panel member | best single model in hindsight |\n|---|---:|---:|---:|---:|\n")
	for _, run := range runs {
		x := s.FreeText[run]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", run, spanOf(x.Preference, pct), spanOf(x.RandomMember, pct), spanOf(x.BestMember, pct), pct(x.BestSingle))
	}
}
