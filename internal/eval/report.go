package eval

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// WriteTable writes the report as a Markdown table: per dataset and overall, each run's accuracy and
// regret next to the baselines.
func (r *Report) WriteTable(w io.Writer) {
	defer r.FreeText.writeTable(w)
	if r.Overall == nil {
		return
	}
	names := make([]string, 0, len(r.Datasets))
	for n := range r.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	quorum := r.QuorumMode
	if quorum == "" {
		quorum = "fixed"
	}
	fmt.Fprintf(w, "%d prompts, seed %d, %d models per prompt, min_responses %d, %s quorum, %s consensus, categories by %s\n\n",
		r.Prompts, r.Seed, r.Workers, r.Quorum, quorum, r.Strategy, r.CategoryBy)
	fmt.Fprintf(w, "| | %s | overall |\n|---|%s---:|\n", strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
	row := func(label string, cell func(*DatasetReport) string) {
		cells := make([]string, 0, len(names)+1)
		for _, n := range names {
			cells = append(cells, cell(r.Datasets[n]))
		}
		cells = append(cells, cell(r.Overall))
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	row("prompts", func(d *DatasetReport) string { return fmt.Sprint(d.Prompts) })
	row("best single model in hindsight", func(d *DatasetReport) string { return pct(d.BestSingle.Accuracy) })
	row(fmt.Sprintf("oracle top-%d majority", r.Workers), func(d *DatasetReport) string { return pct(d.Oracle.Accuracy) })
	for _, run := range r.Runs {
		row(run+" accuracy", func(d *DatasetReport) string { return pct(d.Runs[run].Accuracy) })
	}
	for _, run := range r.Runs {
		row(run+" regret", func(d *DatasetReport) string { return fmt.Sprintf("%.1f", d.Runs[run].Regret) })
	}
	fmt.Fprintln(w)
	for _, n := range names {
		d := r.Datasets[n]
		fmt.Fprintf(w, "%s: best single %s; oracle %s\n", n, strings.Join(d.BestSingle.Models, ", "), strings.Join(d.Oracle.Models, ", "))
	}
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// writeTable writes the free-text scores: each run's mean judge preference against the panel's.
func (o *OpenReport) writeTable(w io.Writer) {
	if o == nil {
		return
	}
	fmt.Fprintf(w, "\nfree text (alpaca-eval): %d prompts, mean judge preference of the answer returned; best single model in hindsight %s (%s)\n\n",
		o.Prompts, pct(o.BestSingle.Accuracy), strings.Join(o.BestSingle.Models, ", "))
	fmt.Fprintf(w, "| run | answer returned | random panel member | best panel member | models per prompt |\n|---|---:|---:|---:|---:|\n")
	runs := make([]string, 0, len(o.Runs))
	for name := range o.Runs {
		runs = append(runs, name)
	}
	sort.Strings(runs)
	for _, name := range runs {
		x := o.Runs[name]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f |\n", name, pct(x.Preference), pct(x.RandomMember), pct(x.BestMember), x.ModelsPerPrompt)
	}
}

// WriteSVG draws accuracy and cumulative regret against prompts seen, one line per run, with the best
// single model and the oracle ensemble as dashed references on the accuracy chart.
func (r *Report) WriteSVG(w io.Writer) error {
	if r.Overall == nil { // free text only: nothing to chart
		_, err := io.WriteString(w, `<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`+"\n")
		return err
	}
	c := &timelineChart{plotW: (chartWidth - 2*chartPad - chartGap) / 2, plotH: chartHeight - 2*chartPad - 80, maxX: float64(r.Prompts)}
	minAcc, maxAcc := r.accuracyRange()
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", chartWidth, chartHeight)
	fmt.Fprintf(&c.b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	accAt := c.panel(chartPad, "Cumulative accuracy", minAcc, maxAcc, pct)
	regAt := c.panel(chartPad+c.plotW+chartGap, "Cumulative regret of selection", 0, r.maxRegret(), func(v float64) string { return fmt.Sprintf("%.0f", v) })
	r.writeReferences(&c.b, accAt, c.maxX)
	r.writeRuns(&c.b, accAt, regAt)
	c.b.WriteString("</svg>\n")
	_, err := io.WriteString(w, c.b.String())
	return err
}

// The timeline chart's size in pixels: its padding, and the gap between its two panels.
const chartWidth, chartHeight, chartPad, chartGap = 960, 460, 60, 40

// runColors are the runs' colors, in the report's order of runs (repeating past the eighth).
var runColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// timelineChart is the SVG being drawn: two panels side by side, both against prompts seen.
type timelineChart struct {
	b            strings.Builder
	plotW, plotH int
	maxX         float64 // the prompts at the right end of the x axis
}

// scale places a panel's point (prompts seen, value) in the drawing.
type scale func(x, y float64) (float64, float64)

// panel draws a panel's title, frame and axes at x0, for values from lo to hi labelled by yLabel, and
// returns where its points go.
func (c *timelineChart) panel(x0 int, title string, lo, hi float64, yLabel func(float64) string) scale {
	plotW, plotH, b := c.plotW, c.plotH, &c.b
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, chartPad-20, title)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, chartPad, plotW, plotH)
	for i := 0; i <= 4; i++ {
		v := lo + (hi-lo)*float64(i)/4
		y := float64(chartPad+plotH) - float64(plotH)*float64(i)/4
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, y, x0+plotW, y, x0-5, y+4, yLabel(v))
		xv := c.maxX * float64(i) / 4
		x := float64(x0) + float64(plotW)*float64(i)/4
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x, chartPad+plotH+16, xv)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">prompts seen</text>`+"\n", x0+plotW/2, chartPad+plotH+32)
	return func(x, y float64) (float64, float64) {
		return float64(x0) + float64(plotW)*x/c.maxX, float64(chartPad+plotH) - float64(plotH)*(y-lo)/(hi-lo)
	}
}

// maxRegret is the top of the regret axis: the largest regret on the timeline, and at least 1.
func (r *Report) maxRegret() float64 {
	maxRegret := 1.0
	for _, p := range r.Timeline {
		for _, v := range p.Runs {
			maxRegret = math.Max(maxRegret, v.Regret)
		}
	}
	return maxRegret
}

// accuracyRange is the accuracy axis: every accuracy on the timeline and both references, widened to
// whole steps of 5 points (100% at most) and never empty.
func (r *Report) accuracyRange() (lo, hi float64) {
	minAcc, maxAcc := 1.0, 0.0
	for _, p := range r.Timeline {
		for _, v := range p.Runs {
			minAcc, maxAcc = math.Min(minAcc, v.Accuracy), math.Max(maxAcc, v.Accuracy)
		}
	}
	minAcc = math.Min(minAcc, r.Overall.BestSingle.Accuracy)
	maxAcc = math.Max(maxAcc, math.Max(r.Overall.Oracle.Accuracy, r.Overall.BestSingle.Accuracy))
	minAcc, maxAcc = math.Floor(minAcc*20)/20, math.Min(1, math.Ceil(maxAcc*20)/20)
	if maxAcc <= minAcc {
		maxAcc = minAcc + 0.05
	}
	return minAcc, maxAcc
}

// writeReferences draws the best single model and the oracle ensemble as dashed lines across the
// accuracy panel. The upper reference is labelled above its line, the lower one below, so close lines
// stay legible.
func (r *Report) writeReferences(b *strings.Builder, accAt scale, maxX float64) {
	refs := []struct {
		label string
		acc   float64
	}{{"best single model", r.Overall.BestSingle.Accuracy}, {fmt.Sprintf("oracle top-%d", r.Workers), r.Overall.Oracle.Accuracy}}
	if refs[1].acc > refs[0].acc {
		refs[0], refs[1] = refs[1], refs[0]
	}
	for i, ref := range refs {
		x1, y := accAt(0, ref.acc)
		x2, _ := accAt(maxX, ref.acc)
		dy := -4.0
		if i == 1 {
			dy = 13
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="5,4"/><text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n",
			x1, y, x2, y, x2-4, y+dy, ref.label)
	}
}

// writeRuns draws each run's accuracy and regret over the timeline in the run's color, and its entry in
// the legend under the panels.
func (r *Report) writeRuns(b *strings.Builder, accAt, regAt scale) {
	for i, run := range r.Runs {
		color := runColors[i%len(runColors)]
		var acc, reg []string
		for _, p := range r.Timeline {
			v, ok := p.Runs[run]
			if !ok {
				continue
			}
			x, y := accAt(float64(p.Prompts), v.Accuracy)
			acc = append(acc, fmt.Sprintf("%.1f,%.1f", x, y))
			x, y = regAt(float64(p.Prompts), v.Regret)
			reg = append(reg, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(acc, " "))
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(reg, " "))
		lx, ly := chartPad+(i%3)*(chartWidth-2*chartPad)/3, chartHeight-48+(i/3)*20
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly, color, lx+16, ly+10, run)
	}
}
