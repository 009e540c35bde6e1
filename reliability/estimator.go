package reliability

import "sort"

// Vote is one model's categorical answer to a prompt: Group numbers the prompt's distinct answers,
// and is negative when the model gave none.
type Vote struct {
	Model string
	Group int
}

// Config tunes the estimator. The zero value is usable.
type Config struct {
	// Window is how many recent prompts per category the fit keeps; zero means DefaultWindow.
	Window int
	// Sharing is how many pseudo-observations of a model's accuracy over all categories its estimate
	// in one category starts from (hierarchical pooling); zero means DefaultSharing, negative none.
	Sharing float64
	// Sweeps is the number of EM sweeps of a refit; zero means DefaultSweeps.
	Sweeps int
	// RefitEvery is how many prompts of a category pass between refits once it has Warmup prompts;
	// before that, every prompt refits. Zero means DefaultRefitEvery.
	RefitEvery int
	// Warmup is the number of prompts of a category during which every prompt refits; zero means
	// DefaultWarmup.
	Warmup int
}

// Defaults of Config.
const (
	DefaultWindow     = 4000
	DefaultSharing    = 10
	DefaultSweeps     = 3
	DefaultRefitEvery = 10
	DefaultWarmup     = 200
)

func (c Config) withDefaults() Config {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Sharing == 0 {
		c.Sharing = DefaultSharing
	}
	c.Sharing = max(c.Sharing, 0)
	if c.Sweeps <= 0 {
		c.Sweeps = DefaultSweeps
	}
	if c.RefitEvery <= 0 {
		c.RefitEvery = DefaultRefitEvery
	}
	if c.Warmup <= 0 {
		c.Warmup = DefaultWarmup
	}
	return c
}

// prior is Beta(1, 1): before any answer a model is as likely right as wrong.
const priorAlpha, priorBeta = 1.0, 1.0

// Estimate is a model's estimated accuracy in a category, and the answers it rests on.
type Estimate struct {
	Accuracy float64
	// Answers is the number of the model's answers in the category within the window.
	Answers float64
}

// Snapshot is a set of estimates by category, then model; the estimator never changes one it has
// published, it makes a new one.
type Snapshot map[string]map[string]Estimate

// Get returns a model's estimate in a category; ok is false when the category holds no answer of it.
func (s Snapshot) Get(category, model string) (Estimate, bool) {
	e, ok := s[category][model]
	return e, ok
}

type prompt struct {
	votes  []Vote
	groups int
	credit []float64 // per vote: the posterior that its answer is right
}

type category struct {
	prompts []prompt // a ring of at most Window prompts
	next    int
	seen    int
}

// Estimator holds the recent prompts of every category and the estimates fitted to them.
type Estimator struct {
	cfg        Config
	categories map[string]*category
	cur        View
}

// New returns an empty estimator.
func New(cfg Config) *Estimator {
	return &Estimator{cfg: cfg.withDefaults(), categories: map[string]*category{}, cur: View{est: Snapshot{}, overall: map[string]float64{}}}
}

// Accuracy returns a model's current accuracy in a category: its fitted estimate, or, for a model
// without answers there, its accuracy over all categories, or the prior's.
func (e *Estimator) Accuracy(category, model string) float64 { return e.cur.Accuracy(category, model) }

// MinAnswers is the fewest answers a prompt needs to teach the estimator anything: with two, models
// that agree can only confirm each other (the one-coin model cannot tell two right from two alike
// and wrong), and an adaptive quorum that stops at two agreeing answers would lock onto them.
const MinAnswers = 3

// Observe adds a prompt's votes, credits them with the current estimates, and refits when the
// category is due. It reports whether it refitted. A prompt with fewer than MinAnswers answers is
// left out.
func (e *Estimator) Observe(cat string, votes []Vote) bool {
	groups, answers := 0, 0
	for _, v := range votes {
		groups = max(groups, v.Group+1)
		if v.Group >= 0 {
			answers++
		}
	}
	if answers < MinAnswers {
		return false
	}
	c := e.categories[cat]
	if c == nil {
		c = &category{}
		e.categories[cat] = c
	}
	p := prompt{votes: append([]Vote(nil), votes...), groups: groups}
	p.credit = e.credit(cat, &p)
	if len(c.prompts) < e.cfg.Window {
		c.prompts = append(c.prompts, p)
	} else {
		c.prompts[c.next] = p
		c.next = (c.next + 1) % e.cfg.Window
	}
	c.seen++
	if c.seen <= e.cfg.Warmup || c.seen%e.cfg.RefitEvery == 0 {
		e.Refit()
		return true
	}
	e.mStep() // the new prompt's credit enters the estimates at once
	return false
}

// Credit returns what a prompt's votes are credited with by the current estimates: each vote's
// posterior probability of being right (zero for no answer).
func (e *Estimator) Credit(cat string, votes []Vote) []float64 {
	groups := 0
	for _, v := range votes {
		groups = max(groups, v.Group+1)
	}
	return e.credit(cat, &prompt{votes: votes, groups: groups})
}

func (e *Estimator) credit(cat string, p *prompt) []float64 {
	acc := make([]float64, len(p.votes))
	groupOf := make([]int, len(p.votes))
	for i, v := range p.votes {
		acc[i] = e.Accuracy(cat, v.Model)
		groupOf[i] = v.Group
	}
	post := Posteriors(acc, groupOf, p.groups)
	credit := make([]float64, len(p.votes))
	for i, g := range groupOf {
		if g >= 0 {
			credit[i] = post[g]
		}
	}
	return credit
}

// Refit runs the configured EM sweeps over every kept prompt.
func (e *Estimator) Refit() {
	for range e.cfg.Sweeps {
		e.mStep()
		for cat, c := range e.categories {
			for i := range c.prompts {
				c.prompts[i].credit = e.credit(cat, &c.prompts[i])
			}
		}
	}
	e.mStep()
}

// mStep sets every estimate from the credits: a model's accuracy over all categories from all its
// credit, and in each category from its credit there plus Sharing pseudo-answers at the overall
// accuracy.
func (e *Estimator) mStep() {
	type sums struct{ credit, answers float64 }
	perCat := make(map[string]map[string]*sums, len(e.categories))
	all := map[string]*sums{}
	add := func(m map[string]*sums, model string, credit float64) {
		s := m[model]
		if s == nil {
			s = &sums{}
			m[model] = s
		}
		s.credit += credit
		s.answers++
	}
	for cat, c := range e.categories {
		m := map[string]*sums{}
		perCat[cat] = m
		for _, p := range c.prompts {
			for i, v := range p.votes {
				add(m, v.Model, p.credit[i])
				add(all, v.Model, p.credit[i])
			}
		}
	}
	overall := make(map[string]float64, len(all))
	for model, s := range all {
		overall[model] = (s.credit + priorAlpha) / (s.answers + priorAlpha + priorBeta)
	}
	est := make(Snapshot, len(perCat))
	for cat, m := range perCat {
		byModel := make(map[string]Estimate, len(m))
		for model, s := range m {
			w := e.cfg.Sharing
			byModel[model] = Estimate{Accuracy: (s.credit + priorAlpha + w*overall[model]) / (s.answers + priorAlpha + priorBeta + w), Answers: s.answers}
		}
		est[cat] = byModel
	}
	e.cur = View{est: est, overall: overall}
}

// Categories lists the categories with prompts, sorted.
func (e *Estimator) Categories() []string {
	out := make([]string, 0, len(e.categories))
	for c := range e.categories {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// View is an immutable reading of the estimates, safe to share between goroutines.
type View struct {
	est     Snapshot
	overall map[string]float64
}

// View returns the current estimates; later observations never change it.
func (e *Estimator) View() *View {
	v := e.cur
	return &v
}

// Get returns a model's estimate in a category; ok is false when the category holds no answer of it.
func (v *View) Get(category, model string) (Estimate, bool) { return v.est.Get(category, model) }

// Accuracy is the estimator's Accuracy as of the view.
func (v *View) Accuracy(category, model string) float64 {
	if est, ok := v.est.Get(category, model); ok {
		return est.Accuracy
	}
	if p, ok := v.overall[model]; ok {
		return p
	}
	return priorAlpha / (priorAlpha + priorBeta)
}
