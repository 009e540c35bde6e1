package bandit

import "math"

// Prior is the Beta prior every arm starts from.
type Prior struct {
	Alpha float64 `json:"alpha"`
	Beta  float64 `json:"beta"`
}

// DefaultPrior is Beta(1, 1), uniform on [0, 1]: before any evidence every model is equally likely to
// be good at a category. What is known about a model up front (tier, tags) enters the weighted consensus
// score as its capability, not the arm, so that the arm measures only observed outcomes.
var DefaultPrior = Prior{Alpha: 1, Beta: 1}

// RecencySpan is the number of recent outcomes the EWMA recency score averages over: the smoothing
// factor is 2/(RecencySpan+1), the usual span convention, so the last 50 outcomes carry ~86% of the weight.
const RecencySpan = 50

var recencyAlpha = 2.0 / (RecencySpan + 1)

// AllCategories names the arm that pools a model's outcomes in every category.
const AllCategories = "*"

// Board is a read view of every arm: what the doors and the metrics show of what the bandit learned.
type Board interface {
	// Arm is a model's arm in a category (AllCategories: across all of them).
	Arm(category, model string) Arm
	// Published are the arms that have learned something.
	Published() []Arm
	Prior() Prior
}

// Arm is the learned state of one (model, category) pair. It is a value; updates return a new Arm.
type Arm struct {
	Model    string  `json:"model"`
	Category string  `json:"category"`
	Alpha    float64 `json:"alpha"`
	Beta     float64 `json:"beta"`
	// Recency is the EWMA of rewards over about the last RecencySpan outcomes, starting at the prior mean.
	Recency float64 `json:"recency"`
	// Pulls counts updates (not discounted).
	Pulls int64 `json:"pulls"`
}

// NewArm returns an arm at the prior.
func NewArm(model, category string, p Prior) Arm {
	return Arm{Model: model, Category: category, Alpha: p.Alpha, Beta: p.Beta, Recency: p.Alpha / (p.Alpha + p.Beta)}
}

// Mean is the posterior mean alpha/(alpha+beta).
func (a Arm) Mean() float64 { return a.Alpha / (a.Alpha + a.Beta) }

// UpdateConfig tunes learning.
type UpdateConfig struct {
	// Prior is where discounting decays towards; the zero value means DefaultPrior.
	Prior Prior
	// Discount in (0, 1) forgets old evidence for models whose quality drifts: before each update the
	// evidence above the prior is multiplied by Discount. Zero or one means no discounting.
	Discount float64
}

// Update returns the arm after one outcome. reward is in [0, 1]: a success adds 1 to alpha, a failure 1
// to beta, and a fractional reward splits the unit between them.
func (a Arm) Update(reward float64, cfg UpdateConfig) Arm {
	reward = clamp01(reward)
	p := cfg.Prior
	if p.Alpha <= 0 || p.Beta <= 0 {
		p = DefaultPrior
	}
	if g := cfg.Discount; g > 0 && g < 1 {
		a.Alpha = p.Alpha + g*(a.Alpha-p.Alpha)
		a.Beta = p.Beta + g*(a.Beta-p.Beta)
	}
	a.Alpha += reward
	a.Beta += 1 - reward
	a.Recency += recencyAlpha * (reward - a.Recency)
	a.Pulls++
	return a
}

func clamp01(x float64) float64 {
	if math.IsNaN(x) || x < 0 {
		return 0
	}
	return min(x, 1)
}

// Rebuild returns the arm that rewards make, oldest first, from the prior: how a node that starts
// again folds an arm's latest rewards back into its recency and, with a discount, its evidence.
func Rebuild(model, category string, p Prior, rewards []float64, cfg UpdateConfig) Arm {
	a := NewArm(model, category, p)
	for _, r := range rewards {
		a = a.Update(r, cfg)
	}
	return a
}

// HistoryNeeded is how many of an arm's latest rewards Rebuild needs for the arm to be within 1e-4 of
// the one all of them make: the recency window's, or the discount's when it forgets more slowly.
func HistoryNeeded(cfg UpdateConfig) int {
	n := int(math.Ceil(math.Log(1e-4) / math.Log(1-recencyAlpha)))
	if g := cfg.Discount; g > 0 && g < 1 {
		n = max(n, int(math.Ceil(math.Log(1e-4)/math.Log(g))))
	}
	return min(n, 20000)
}
