// Package accuracy owns the estimate of how often each model answers each category right, learned
// without labels: a one-coin Dawid–Skene model fitted by EM over the categorical answers of recent
// requests. Each model is right with probability p in a category and otherwise picks one of
// EffectiveOptions-1 wrong answers; a vote weighs log(p(K-1)/(1-p)); each answer is credited with the
// posterior probability that it is right; p is the share of credit a model earned, shrunk towards the
// model's estimate over all categories. Everything here is pure; an actor owns the Estimator.
package accuracy

import "math"

// EffectiveOptions is the one-coin model's K: the number of answers a wrong model is taken to pick
// among. It is far below the options a task offers because wrong answers collide: two wrong models
// give the same wrong answer 22–68 % of the time on the replay benchmarks, about what three equally
// likely wrong answers would give.
const EffectiveOptions = 3

// The bounds keep one model's vote from deciding alone however sure its estimate.
const minAccuracy, maxAccuracy = 0.02, 0.98

// Weight is a vote's log-likelihood ratio: a model right with probability p weighs log(p(K-1)/(1-p)).
// A model no better than chance weighs nothing; one worse than chance counts against its answer.
func Weight(p float64) float64 {
	p = min(max(p, minAccuracy), maxAccuracy)
	return math.Log(p * (EffectiveOptions - 1) / (1 - p))
}

// Posteriors returns each group's probability of being the right answer, given the accuracy of each
// voter and the group it voted for (groupOf[i] < 0: no answer, no vote). Options nobody voted for count
// as groups without votes, as many as EffectiveOptions leaves (none when more groups were answered).
// A group nobody voted for gets zero.
func Posteriors(accuracy []float64, groupOf []int, groups int) []float64 {
	return posteriorsInto(make([]float64, groups), accuracy, groupOf, nil)
}

// PosteriorsDependent is Posteriors for voters that may err together: dependence[i][j] is the
// excess agreement of voters i and j (Dependence), and a voter's weight is divided by one plus its
// positive excess agreement with the others who gave its answer. That is the design effect of
// correlated evidence: k voters of pairwise correlation r are worth k/(1+(k-1)r) independent ones, so
// each weighs 1/(1+(k-1)r) of its own; k clones count as one voter, and votes that disagree are not
// discounted, for their disagreement is what independence predicts. A nil dependence is Posteriors.
func PosteriorsDependent(accuracy []float64, groupOf []int, groups int, dependence [][]float64) []float64 {
	return posteriorsInto(make([]float64, groups), accuracy, groupOf, dependence)
}

// discount is the divisor of voter i's weight: one plus its positive dependence on the others that
// gave its answer.
func discount(i int, groupOf []int, dependence [][]float64) float64 {
	d := 1.0
	if dependence == nil || i >= len(dependence) {
		return d
	}
	row := dependence[i]
	for j, g := range groupOf {
		if j != i && g == groupOf[i] && j < len(row) {
			d += max(row[j], 0)
		}
	}
	return d
}

// posteriorsInto is PosteriorsDependent writing into post (one entry per group), which it returns.
func posteriorsInto(post, accuracy []float64, groupOf []int, dependence [][]float64) []float64 {
	groups := len(post)
	var stack [16]bool
	voted := stack[:0]
	if groups > len(stack) {
		voted = make([]bool, 0, groups)
	}
	voted = voted[:groups]
	clear(voted)
	logit := post // the logits are computed in place, then turned into posteriors
	clear(logit)
	for i, g := range groupOf {
		if g >= 0 {
			logit[g] += Weight(accuracy[i]) / discount(i, groupOf, dependence)
			voted[g] = true
		}
	}
	answered, top := 0, math.Inf(-1)
	for g := range logit {
		if voted[g] {
			answered++
			top = max(top, logit[g])
		}
	}
	if answered == 0 {
		clear(post)
		return post
	}
	// Every term is scaled by exp(-top), so large weights cannot overflow.
	total := float64(max(EffectiveOptions-answered, 0)) * math.Exp(-top)
	for g := range logit {
		if voted[g] {
			post[g] = math.Exp(logit[g] - top)
			total += post[g]
		} else {
			post[g] = 0
		}
	}
	for g := range post {
		post[g] /= total
	}
	return post
}
