package accuracy

import "maps"

// Vote is one model's categorical answer to a prompt: Group numbers the prompt's distinct answers,
// and is negative when the model gave none.
type Vote struct {
	Model string
	Group int
	// Later marks a model asked only because the earlier answers did not settle the prompt (an adaptive
	// quorum's later wave). Its answer weighs in the prompt's posterior, and so credits the others, but
	// its own accuracy is not estimated from it: it is asked only on the prompts the first wave found
	// hard, and crediting it there would rate it below the models asked first on every prompt, which
	// then keep being asked first.
	Later bool
	// Family is the model's family (catalog), "" when unknown: two models of one family are presumed
	// to err together until their prompts show otherwise (FamilyDependence).
	Family string
}

// Config tunes the estimator. The zero value is usable.
type Config struct {
	// Window is how many recent prompts per category the fit keeps; zero means DefaultWindow.
	Window int
	// Sharing is how many pseudo-observations of a model's accuracy over all categories its estimate
	// in one category starts from (hierarchical pooling); zero means DefaultSharing, negative none.
	Sharing float64
	// Sweeps is the number of EM sweeps of a refit during a category's warmup; zero means
	// DefaultSweeps. Later refits make one sweep each: they start from the last fit, so EM goes on
	// converging across them at a fraction of the cost.
	Sweeps int
	// RefitEvery is how many prompts of a category pass between refits once it has Warmup prompts;
	// before that, every prompt refits. Zero means DefaultRefitEvery.
	RefitEvery int
	// Warmup is the number of prompts of a category during which every prompt refits; zero means
	// DefaultWarmup.
	Warmup int
	// Dependence makes the fit see models that err together: each refit estimates, per category, how
	// much more often each pair of models agrees than their accuracies predict (Dependence), and votes
	// for the same answer are discounted by it (PosteriorsDependent), in the credit here and in the
	// consensus that reads the view. Off, votes count as independent evidence.
	Dependence bool
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
	// Answers is the number of the model's answers in the category within the window; Labels those of
	// them whose truth a caller gave.
	Answers, Labels float64
}

// sums are a model's credit and answers, and over the answers whose truth a caller gave, the truth
// less the credit: what its accuracy is estimated from.
type sums struct{ credit, answers, rectify, labels float64 }

type prompt struct {
	id     string // the request's id, when known: a caller's truth about it finds the prompt so
	votes  []Vote
	groups int
	credit []float64 // per vote: the posterior that its answer is right
	truth  []float64 // per vote: 1 if a caller said it was right, 0 if wrong; nil without a truth
	// partial prompts came with a truth alone, whose groups say nothing of which wrong answers agree:
	// they are left out of the agreement counts.
	partial bool
}

// pair names two models, in order.
type pair [2]string

func pairOf(a, b string) pair {
	if a > b {
		a, b = b, a
	}
	return pair{a, b}
}

// agreement counts the kept prompts a pair of models both answered, and those where they agreed;
// family says they are of one family.
type agreement struct {
	both, same float64
	family     bool
}

type category struct {
	prompts []prompt // a ring of at most Window prompts
	next    int
	seen    int
	agree   map[pair]agreement // over the kept prompts; kept only when the fit models dependence
}

// count adds a prompt's agreements (sign 1) or takes them away (sign -1).
func (c *category) count(p *prompt, sign float64) {
	if p.partial {
		return
	}
	for i, a := range p.votes {
		for _, b := range p.votes[i+1:] {
			if a.Group < 0 || b.Group < 0 || a.Model == b.Model || a.Later || b.Later {
				continue
			}
			k := pairOf(a.Model, b.Model)
			n := c.agree[k]
			n.both += sign
			n.family = a.Family != "" && a.Family == b.Family
			if a.Group == b.Group {
				n.same += sign
			}
			c.agree[k] = n
		}
	}
}

// Estimator holds the recent prompts of every category and the estimates fitted to them.
type Estimator struct {
	cfg        Config
	categories map[string]*category
	cur        *View
}

// New returns an empty estimator.
func New(cfg Config) *Estimator {
	cfg = cfg.withDefaults()
	return &Estimator{cfg: cfg, categories: map[string]*category{}, cur: &View{cats: map[string]map[string]sums{}, overall: map[string]sums{}, sharing: cfg.Sharing, dep: map[string]map[pair]float64{}}}
}

// MinAnswers is the fewest answers a prompt needs to teach the estimator anything: with two, models
// that agree can only confirm each other (the one-coin model cannot tell two right from two alike
// and wrong), and an adaptive quorum that stops at two agreeing answers would lock onto them.
const MinAnswers = 3

// Observe adds a prompt's votes, credits them with the current estimates, and refits when the
// category is due. It reports whether it refitted. A prompt with fewer than MinAnswers answers is
// left out. Between refits the new credit (and the credit of the prompt it pushes out of the
// window) updates the sums, so an observation costs the prompt, not the window.
func (e *Estimator) Observe(cat string, votes []Vote) bool { return e.ObserveRequest(cat, "", votes) }

// ObserveRequest is Observe of a request's votes, kept under its id so that Confirm can find them.
func (e *Estimator) ObserveRequest(cat, id string, votes []Vote) bool {
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
	p := prompt{id: id, votes: append([]Vote(nil), votes...), groups: groups}
	p.credit = e.credit(cat, &p)
	return e.push(cat, p)
}

// Confirm takes a caller's truth about a request: right says whether each vote's answer was right.
// The request's prompt, if still kept, gets the truth (the same prompt must not count twice);
// otherwise the votes join as a new prompt, which teaches even with fewer than MinAnswers answers, for
// the truth needs no quorum. It reports whether it refitted.
//
// The truth anchors the estimate by how far the posterior credit misses it on the prompts that have
// both: a model's accuracy is its share of credit plus its mean of truth less credit there (the
// rectifier of prediction-powered inference, Angelopoulos et al. 2023). The credit of models that err
// together follows their agreement; on a few prompts with the truth their shortfall shows, and the
// correction applies to all their prompts, where counting the truth as a few more prompts' credit
// would move the estimate only by the truth's small share.
func (e *Estimator) Confirm(cat, id string, votes []Vote, right []bool) bool {
	if len(votes) != len(right) || len(votes) == 0 {
		return false
	}
	truth := make(map[string]bool, len(votes))
	for i, v := range votes {
		truth[v.Model] = right[i] && v.Group >= 0
	}
	if c := e.categories[cat]; c != nil && id != "" {
		for k := range c.prompts {
			old := &c.prompts[k]
			if old.id != id || old.truth != nil {
				continue
			}
			p := *old
			p.truth = make([]float64, len(p.votes))
			for j, v := range p.votes {
				if truth[v.Model] {
					p.truth[j] = 1
				}
			}
			e.cur = e.cur.with(cat, &p, old)
			c.prompts[k] = p
			return false
		}
	}
	p := prompt{id: id, votes: append([]Vote(nil), votes...), truth: make([]float64, len(votes)), partial: true}
	for j, v := range votes {
		p.groups = max(p.groups, v.Group+1)
		if truth[v.Model] {
			p.truth[j] = 1
		}
	}
	p.credit = e.credit(cat, &p)
	return e.push(cat, p)
}

// push keeps a credited prompt in its category's window, and refits when the category is due.
func (e *Estimator) push(cat string, p prompt) bool {
	c := e.categories[cat]
	if c == nil {
		c = &category{agree: map[pair]agreement{}}
		e.categories[cat] = c
	}
	var evicted *prompt
	if len(c.prompts) < e.cfg.Window {
		c.prompts = append(c.prompts, p)
	} else {
		old := c.prompts[c.next]
		evicted = &old
		c.prompts[c.next] = p
		c.next = (c.next + 1) % e.cfg.Window
	}
	if e.cfg.Dependence {
		c.count(&p, 1)
		if evicted != nil {
			c.count(evicted, -1)
		}
	}
	c.seen++
	e.cur = e.cur.with(cat, &p, evicted)
	switch {
	case c.seen <= e.cfg.Warmup:
		e.refit(e.cfg.Sweeps)
		return true
	case c.seen%e.cfg.RefitEvery == 0:
		e.refit(1)
		return true
	}
	return false
}

func (e *Estimator) credit(cat string, p *prompt) []float64 {
	return e.creditInto(make([]float64, len(p.votes)), cat, p)
}

// creditInto is credit writing into dst, with stack buffers for prompts of usual size: a refit
// credits every kept prompt several times.
func (e *Estimator) creditInto(dst []float64, cat string, p *prompt) []float64 {
	const usual = 16
	var accBuf, postBuf [usual]float64
	var groupBuf [usual]int
	acc, groupOf, post := accBuf[:0], groupBuf[:0], postBuf[:0]
	if len(p.votes) > usual || p.groups > usual {
		acc, groupOf, post = make([]float64, 0, len(p.votes)), make([]int, 0, len(p.votes)), make([]float64, 0, p.groups)
	}
	cats := e.cur.cats[cat]
	for _, v := range p.votes {
		acc = append(acc, e.cur.accuracyIn(cats, v.Model))
		groupOf = append(groupOf, v.Group)
	}
	var dependence [][]float64
	if deps := e.cur.dep[cat]; len(deps) > 0 {
		dependence = make([][]float64, len(p.votes))
		flat := make([]float64, len(p.votes)*len(p.votes))
		for i, a := range p.votes {
			dependence[i] = flat[i*len(p.votes) : (i+1)*len(p.votes)]
			for j, b := range p.votes {
				if i != j && a.Model != b.Model {
					dependence[i][j] = deps[pairOf(a.Model, b.Model)]
				}
			}
		}
	}
	post = posteriorsInto(post[:p.groups], acc, groupOf, dependence)
	for i, g := range groupOf {
		dst[i] = 0
		if g >= 0 {
			dst[i] = post[g]
		}
	}
	return dst
}

// Refit runs the configured EM sweeps over every kept prompt: each sweep credits every answer with
// the current estimates, then sets the estimates from the credits.
func (e *Estimator) Refit() { e.refit(e.cfg.Sweeps) }

func (e *Estimator) refit(sweeps int) {
	// The view sums every kept credit (Observe keeps it so), so a sweep starts with its E-step.
	for range sweeps {
		for cat, c := range e.categories {
			for i := range c.prompts {
				e.creditInto(c.prompts[i].credit, cat, &c.prompts[i])
			}
		}
		e.cur = e.fromCredits()
	}
}

// DependenceShrink is how many prompts of agreement at the prior a pair's excess agreement starts
// from: a pair seen together on a few prompts is taken as independent, or as dependent as
// FamilyDependence says when both are of one family.
const DependenceShrink = 30

// FamilyDependence is the excess agreement presumed of two models of one family before their prompts
// say: they share training data and err together (Llama-3-70B and Llama-3.1-70B agree 30 points more
// often on MMLU-Pro than their accuracies predict). Without a prior the excess is measured against
// accuracies that EM took from that very agreement, and lands on the independent models instead.
const FamilyDependence = 0.5

// dependence is, per category, each pair's excess agreement under the view's accuracies: Cohen's
// kappa against the agreement the one-coin model predicts for independent models, pq+(1-p)(1-q)/(K-1),
// (observed - expected) / (1 - expected), shrunk towards zero. Clones score 1, independent models 0.
//
// It is only as good as the accuracies it is measured against. Where models that err together are
// most of a panel, EM takes their agreement for accuracy, and the excess moves to the models that are
// in fact independent: without labels the two look alike. Pairwise agreement alone cannot tell them
// apart: three weak models that copy one another beside two strong independent ones agree pair by
// pair exactly as three strong independent models beside two weak ones that err together, so a
// rank-one fit of the pairs' agreement (after Jaffe et al., AISTATS 2016), trimmed of the pairs that
// agree beyond it, lands on either reading by where it starts. A share of truth (Confirm) anchors
// the accuracies, and with them the excess.
func (e *Estimator) dependence(v *View) map[string]map[pair]float64 {
	out := make(map[string]map[pair]float64, len(e.categories))
	for cat, c := range e.categories {
		m := make(map[pair]float64, len(c.agree))
		sums := v.cats[cat]
		for k, n := range c.agree {
			if n.both <= 0 {
				continue
			}
			p, q := v.accuracyIn(sums, k[0]), v.accuracyIn(sums, k[1])
			expected := p*q + (1-p)*(1-q)/(EffectiveOptions-1)
			prior := 0.0
			if n.family {
				prior = FamilyDependence
			}
			slack := max(1-expected, 1e-6)
			m[k] = (n.same - n.both*expected + DependenceShrink*prior*slack) / ((n.both + DependenceShrink) * slack)
		}
		out[cat] = m
	}
	return out
}

// fromCredits sums every kept credit into a new view.
func (e *Estimator) fromCredits() *View {
	v := &View{cats: make(map[string]map[string]sums, len(e.categories)), overall: map[string]sums{}, sharing: e.cfg.Sharing, dep: e.cur.dep}
	for cat, c := range e.categories {
		m := map[string]sums{}
		for i := range c.prompts {
			addPrompt(m, v.overall, &c.prompts[i], 1)
		}
		v.cats[cat] = m
	}
	if e.cfg.Dependence {
		v.dep = e.dependence(v)
	}
	return v
}

// addPrompt adds a prompt's credit (and truth) to a category's sums and the overall ones, or takes it
// away with sign -1.
func addPrompt(cat, overall map[string]sums, p *prompt, sign float64) {
	for j, vote := range p.votes {
		if vote.Later {
			continue
		}
		d := sums{credit: sign * p.credit[j], answers: sign}
		if p.truth != nil {
			d.rectify, d.labels = sign*(p.truth[j]-p.credit[j]), sign
		}
		add(cat, vote.Model, d)
		add(overall, vote.Model, d)
	}
}

func add(m map[string]sums, model string, d sums) {
	s := m[model]
	s.credit += d.credit
	s.answers += d.answers
	s.rectify += d.rectify
	s.labels += d.labels
	m[model] = s
}

// View is an immutable reading of the estimates, safe to share between goroutines: a model's
// accuracy in a category is its share of credit there plus Sharing pseudo-answers at its accuracy
// over all categories (hierarchical pooling).
type View struct {
	cats    map[string]map[string]sums
	overall map[string]sums
	sharing float64
	dep     map[string]map[pair]float64 // by category, from the last refit; empty without Dependence
}

// View returns the current estimates; later observations never change it.
func (e *Estimator) View() *View { return e.cur }

// with returns a copy of v with a prompt's credit added and an evicted prompt's taken away; only the
// maps that change are copied.
func (v *View) with(cat string, p, evicted *prompt) *View {
	next := &View{cats: make(map[string]map[string]sums, len(v.cats)), overall: maps.Clone(v.overall), sharing: v.sharing, dep: v.dep}
	maps.Copy(next.cats, v.cats)
	m := maps.Clone(v.cats[cat])
	if m == nil {
		m = map[string]sums{}
	}
	addPrompt(m, next.overall, p, 1)
	if evicted != nil {
		addPrompt(m, next.overall, evicted, -1)
	}
	next.cats[cat] = m
	return next
}

// LabelSharing is how many pseudo-labels at no correction the rectifier of a model's accuracy starts
// from: a few truths must not swing the estimate. In a category they are at the model's rectifier over
// all categories.
const LabelSharing = 10

// The rectified estimate stays inside these bounds: a model is never certainly right or wrong.
const minEstimate, maxEstimate = 0.01, 0.99

// overallRectifier is a model's mean truth less credit over all categories, shrunk towards none.
func (v *View) overallRectifier(model string) float64 {
	o := v.overall[model]
	return o.rectify / (o.labels + LabelSharing)
}

// rectified adds a rectifier to an estimate from credit alone, within the bounds.
func rectified(p, r float64) float64 {
	if r == 0 {
		return p
	}
	return min(max(p+r, minEstimate), maxEstimate)
}

// overallAccuracy is a model's accuracy over all categories, or the prior's mean without answers.
func (v *View) overallAccuracy(model string) float64 {
	o := v.overall[model]
	return rectified((o.credit+priorAlpha)/(o.answers+priorAlpha+priorBeta), v.overallRectifier(model))
}

// unrectified is overallAccuracy from credit alone: the pooling's prior, to which the category's own
// rectifier then applies.
func (v *View) unrectified(model string) float64 {
	o := v.overall[model]
	return (o.credit + priorAlpha) / (o.answers + priorAlpha + priorBeta)
}

// Get returns a model's estimate in a category; ok is false when the category holds no answer of it.
func (v *View) Get(category, model string) (Estimate, bool) {
	s, ok := v.cats[category][model]
	if !ok || s.answers <= 0 {
		return Estimate{}, false
	}
	return Estimate{Accuracy: v.pooled(s, model), Answers: s.answers, Labels: s.labels}, true
}

func (v *View) pooled(s sums, model string) float64 {
	w := v.sharing
	p := (s.credit + priorAlpha + w*v.unrectified(model)) / (s.answers + priorAlpha + priorBeta + w)
	if s.labels == 0 && v.overall[model].labels == 0 {
		return p
	}
	r := (s.rectify + LabelSharing*v.overallRectifier(model)) / (s.labels + LabelSharing)
	return rectified(p, r)
}

// accuracyIn is Accuracy with the category's sums already looked up.
func (v *View) accuracyIn(cat map[string]sums, model string) float64 {
	if s, ok := cat[model]; ok && s.answers > 0 {
		return v.pooled(s, model)
	}
	return v.overallAccuracy(model)
}

// Anchored reports whether callers' truth anchors a model's estimate in a category: at least as many
// labelled answers there as the pseudo-labels its rectifier starts from (LabelSharing), so that the
// truth, not the agreement of models that err together, has the larger say in it.
func (v *View) Anchored(category, model string) bool {
	return v.cats[category][model].labels >= LabelSharing
}

// Accuracy is a model's estimated accuracy in a category: its estimate there, or its accuracy over
// all categories when it has no answer there.
func (v *View) Accuracy(category, model string) float64 {
	if est, ok := v.Get(category, model); ok {
		return est.Accuracy
	}
	return v.overallAccuracy(model)
}

// Dependence is how much more often two models agree in a category than their estimated accuracies
// predict for independent models, as a share of the disagreement independence predicts: 1 for models
// that always agree, 0 for independent ones or when unknown (the estimator does not model dependence,
// or has not seen them together), negative for models that agree less than independence predicts.
func (v *View) Dependence(category, a, b string) float64 {
	if a == b {
		return 0
	}
	return v.dep[category][pairOf(a, b)]
}
