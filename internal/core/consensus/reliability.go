package consensus

import (
	"slices"

	"github.com/conclave-ai/conclave/internal/core/accuracy"
)

// reliable reports whether a majority vote can weigh its votes by accuracy: every answer is
// categorical (an option, a number, a literal, a few words) and every model's accuracy is known.
func (b *ballot) reliable() bool {
	for i, r := range b.resps {
		if r.Accuracy <= 0 || !b.docs[i].short {
			return false
		}
	}
	return true
}

// reliabilityVote is majority voting weighted by each model's estimated accuracy (the one-coin
// model of the accuracy package). The answer is the group of equivalent answers with the highest
// posterior, ties going to the higher sum of weighted scores; each response's posterior is its
// group's. Responses without an answer vote for nothing and have posterior zero. Responses that carry
// their dependence on the others have their votes for a shared answer discounted by it
// (accuracy.PosteriorsDependent).
//
// With deciders, the other responses' votes weigh as those of a model just better than chance: they
// break ties among the deciders' answers and nothing more.
func (b *ballot) reliabilityVote(deciders []bool) Result {
	n := len(b.resps)
	voteOf, answered := b.answerVotes()
	if answered == 0 { // nobody answered: the plain vote picks among the blanks
		r := b.vote(false, nil)
		r.Scores, r.Groups = make([]float64, n), voteOf
		return r
	}
	post := accuracy.PosteriorsDependent(b.voteAccuracies(deciders), voteOf, answered, b.dependence())
	best := b.leadingAnswer(post, voteOf, answered)
	posterior := make([]float64, n)
	var members []int
	for i, g := range voteOf {
		if g >= 0 {
			posterior[i] = post[g]
		}
		if g == best {
			members = append(members, i)
		}
	}
	chosen := b.bestBy(members, b.weighted)
	return Result{Answer: b.resps[chosen].Text, Chosen: chosen, Scores: posterior, Groups: voteOf}
}

// answerVotes numbers each response's group of equivalent answers among the groups that answered
// (-1 for no answer), and counts those groups.
func (b *ballot) answerVotes() (voteOf []int, answered int) {
	groupOf, groups := b.groups()
	renumber := make([]int, len(groups))
	for g, members := range groups {
		renumber[g] = -1
		if b.docs[members[0]].key != "" {
			renumber[g] = answered
			answered++
		}
	}
	voteOf = make([]int, len(b.resps))
	for i := range b.resps {
		voteOf[i] = renumber[groupOf[i]]
	}
	return voteOf, answered
}

// voteAccuracies are the accuracies the responses' votes weigh by: their models', or tieBreaker for
// a response that is not a decider.
func (b *ballot) voteAccuracies(deciders []bool) []float64 {
	acc := make([]float64, len(b.resps))
	for i := range b.resps {
		acc[i] = b.resps[i].Accuracy
		if deciders != nil && !deciders[i] {
			acc[i] = tieBreaker
		}
	}
	return acc
}

// dependence is each response's dependence on the others when it carries it, or nil when none does.
func (b *ballot) dependence() [][]float64 {
	n := len(b.resps)
	var dependence [][]float64
	for i := range b.resps {
		if d := b.resps[i].Dependence; len(d) == n {
			if dependence == nil {
				dependence = make([][]float64, n)
			}
			dependence[i] = d
		}
	}
	return dependence
}

// leadingAnswer returns the answered group with the highest posterior, ties going to the higher sum
// of weighted scores, then to the first.
func (b *ballot) leadingAnswer(post []float64, voteOf []int, answered int) int {
	weight := make([]float64, answered)
	for i, g := range voteOf {
		if g >= 0 {
			weight[g] += b.weighted[i]
		}
	}
	best := 0
	for g := 1; g < answered; g++ {
		if post[g] > post[best] || (post[g] == post[best] && weight[g] > weight[best]) {
			best = g
		}
	}
	return best
}

// tieBreaker is the accuracy a reliability-weighted vote gives a response that is not a decider: a
// vote's weight is log(p(K-1)/(1-p)), nearly nothing just above 1/K.
const tieBreaker = 1.0/accuracy.EffectiveOptions + 0.001

// Leading returns the posterior of the leading answer under the reliability-weighted vote, and false
// when the answers cannot be weighed so (free text, or an accuracy unknown). Structured answers (st)
// vote with their ballots, an invalid one for nothing.
func Leading(resps []Response, kind Kind, st *Structure) (float64, bool) {
	if len(resps) == 0 {
		return 0, false
	}
	if Structured(resps, st) {
		keyed := slices.Clone(resps)
		for i, b := range Ballots(resps, st, kind) {
			keyed[i].Text = ""
			if b.Valid {
				keyed[i].Text = b.key()
			}
		}
		resps, kind = keyed, Exact
	}
	b := newBallot(resps, false, kind, nil)
	if !b.reliable() {
		return 0, false
	}
	r := b.reliabilityVote(nil)
	return r.Scores[r.Chosen], true
}
