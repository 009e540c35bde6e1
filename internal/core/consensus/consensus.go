// Package consensus owns the merging of several models' answers into one: the majority, weighted,
// rotating-arbiter and pairwise strategies, the weighted score, the local arbiter used when no arbiter
// model is reachable, the agreement and disagreement points, and which responses contributed. Everything
// here is a pure, deterministic function of its input.
package consensus

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/conclave-ai/conclave/blueprints"
)

// ErrNoResponses is returned when there is nothing to merge.
var ErrNoResponses = errors.New("consensus needs at least one response")

// LocalArbiter names the arbiter when the decision was made locally, without an arbiter model.
const LocalArbiter = "local"

// ContributionThreshold is the similarity to the final answer from which a response counts as having
// contributed to it: for categorical answers (up to four words) that means the same normalised answer,
// for free text a word-overlap cosine of at least 0.5.
const ContributionThreshold = 0.5

// groupThreshold is the similarity from which two free-text answers count as the same answer for voting.
const groupThreshold = 0.8

// Response is one model's answer with what the strategies weigh. The four score inputs are in [0, 1].
type Response struct {
	Model    string
	Provider string
	Worker   string
	Text     string
	// Capability is the model's prior fitness for the task's category.
	Capability float64
	// Recency is the EWMA of the model's recent outcomes in this category.
	Recency float64
	// Reliability is the share of the provider's calls that succeeded over the last 24 hours.
	Reliability float64
	// Quality is the response's own quality; callers without a judge use its agreement with its peers.
	Quality float64
	// Accuracy is the estimated probability that the model answers the task's category right (its
	// arm's mean); zero when not known. Majority voting on categorical answers weighs votes by it.
	Accuracy float64
	// Learned is the model's learned quality in the category (its arm, pooled across categories);
	// zero when not known. Free text is chosen by it when no arbiter model judged.
	Learned float64
	// ToolCalls are the answer's calls of tools: an answer that makes any votes with them, not its text.
	ToolCalls []ToolCall
	// Dependence is, when known, the model's excess agreement with each response (by index): the
	// reliability-weighted vote discounts the votes of models that err together. Nil: independent.
	Dependence []float64
	// Anchored is true when callers' truth anchors Accuracy (accuracy.View.Anchored): only such
	// models decide a reliability-weighted vote that has deciders.
	Anchored bool
}

// Weights of the weighted score.
const (
	CapabilityWeight  = 0.35
	RecencyWeight     = 0.20
	ReliabilityWeight = 0.25
	QualityWeight     = 0.20
)

// WeightedScore = capability × 0.35 + recency × 0.20 + reliability × 0.25 + quality × 0.20, each input
// clamped to [0, 1], so the score is in [0, 1].
func WeightedScore(capability, recency, reliability, quality float64) float64 {
	return CapabilityWeight*clamp01(capability) + RecencyWeight*clamp01(recency) +
		ReliabilityWeight*clamp01(reliability) + QualityWeight*clamp01(quality)
}

// WeightedScore of the response.
func (r Response) WeightedScore() float64 {
	return WeightedScore(r.Capability, r.Recency, r.Reliability, r.Quality)
}

// Input is everything a strategy decides on.
type Input struct {
	Strategy  blueprints.Strategy
	Responses []Response
	// Kind says when two answers are the same; empty means Text.
	Kind Kind
	// Round is the rotation state: how many rotating decisions came before this one.
	Round uint64
	// Arbiter names the model that gave Verdict or Prefer; empty means the decision is local.
	Arbiter string
	// Verdict is an arbiter model's judgement (rotating, weighted, pairwise); nil means no arbiter model
	// answered, and the local arbiter decides.
	Verdict *Verdict
	// Prefer is the pairwise judge: the probability that response i is better than response j. Nil means
	// the verdict's preferences, or else the local judge, which prefers the response with more agreement
	// plus weighted score.
	Prefer func(i, j int) float64
	// QualityFromAgreement sets each response's Quality to its agreement with the others before scoring,
	// for callers without a judge of quality.
	QualityFromAgreement bool
	// Structure is the request's format (Compile): with JSON asked for, or tool calls among the answers,
	// the decision votes on ballots (see Ballots) instead of text. Nil asks for text.
	Structure *Structure
	// Deciders, for a plain majority vote on text, is how many answers decide it: those of the models
	// with the best learned quality (Response.Learned; ties to the earlier response). The other answers
	// only break ties among the deciders' answers. Zero, or at least the number of answers, lets every
	// answer vote alike. A reliability-weighted vote has deciders only when that many answers are
	// Anchored, and takes them from those: without truth, the best-estimated models may be a clique
	// whose agreement the estimate took for accuracy, and nothing would outvote it.
	Deciders int
}

// Result is a consensus decision.
type Result struct {
	Strategy blueprints.Strategy `json:"strategy"`
	Answer   string              `json:"answer"`
	// Chosen is the index of the response whose text is the answer (or on which a synthesis was based).
	Chosen int `json:"chosen"`
	// Arbiter is the arbiter model, LocalArbiter, or empty for the voting strategies.
	Arbiter string `json:"arbiter,omitempty"`
	// Scores is the strategy's score of each response in [0, 1]: vote share for majority, weighted vote
	// share for weighted, the arbiter's rating or agreement for rotating, Copeland share for pairwise;
	// for a reliability-weighted vote, the probability that the answer is right (0 without an answer).
	Scores []float64 `json:"scores"`
	// Weighted is each response's weighted score.
	Weighted []float64 `json:"weighted"`
	// Support is each response's mean similarity to the others.
	Support []float64 `json:"support"`
	// Groups numbers each response's answer among the distinct answers of a reliability-weighted
	// vote (-1 for no answer): what the reliability estimator learns from. Nil for any other decision;
	// when set, Scores are the answers' posteriors.
	Groups      []int  `json:"groups,omitempty"`
	Contributed []bool `json:"contributed"`
	// InMajority, for a vote its deciders decided (Input.Deciders), is whether each response's answer
	// is the one the plain majority of all the responses chose; nil for any other decision.
	InMajority []bool `json:"in_majority,omitempty"`
	// Deciders, for a vote its deciders decided, marks the responses whose answers decided it; nil when
	// every answer voted alike.
	Deciders     []bool   `json:"deciders,omitempty"`
	Agreement    []string `json:"agreement"`
	Disagreement []string `json:"disagreement"`
	// Synthesis is true when the answer is the arbiter's unified answer rather than one response.
	Synthesis bool `json:"synthesis,omitempty"`
	// Unjudged is true when the decision says nothing of the answers' quality (free text chosen by the
	// models' learned quality): rewarding from it would only confirm what was learned.
	Unjudged bool `json:"unjudged,omitempty"`
	// Ballots, for a structured decision, are each response's ballot: what it voted for, its group,
	// whether it was valid and why not. Nil for a decision on text.
	Ballots []Ballot `json:"ballots,omitempty"`
	// Merged is true when the answer is the field-wise merge of the valid JSON answers (its canonical
	// JSON) rather than one of them; Chosen is then the answer closest to it.
	Merged bool `json:"merged,omitempty"`
	// ToolCalls are the decided calls of tools: the chosen answer's, when it voted with calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Contributors returns the indices of the responses that contributed.
func (r Result) Contributors() []int {
	var idx []int
	for i, c := range r.Contributed {
		if c {
			idx = append(idx, i)
		}
	}
	return idx
}

// Decide runs the input's strategy.
func Decide(in Input) (Result, error) {
	if len(in.Responses) == 0 {
		return Result{}, ErrNoResponses
	}
	if Structured(in.Responses, in.Structure) {
		return decideStructured(in)
	}
	b := newBallot(in.Responses, in.QualityFromAgreement, in.Kind, arbiterQuality(&in))
	var r Result
	switch in.Strategy {
	case blueprints.Majority:
		r = b.majority(in.Deciders)
	case blueprints.Weighted:
		r = b.weightedVote(&in)
	case blueprints.Rotating:
		r = b.rotating(in)
	case blueprints.Pairwise:
		r = b.pairwise(in)
	default:
		return Result{}, fmt.Errorf("consensus: unknown strategy %q", in.Strategy)
	}
	b.complete(&r, &in)
	return r, nil
}

// arbiterQuality returns the arbiter's scores when they are the quality term of a weighted vote, else
// nil.
func arbiterQuality(in *Input) []float64 {
	if v := in.Verdict; v != nil && in.Strategy == blueprints.Weighted && len(v.Scores) == len(in.Responses) {
		return v.Scores
	}
	return nil
}

// majority decides a majority vote: by reliability when the estimates are there, by the models' learned
// quality for free text, otherwise by count; the deciders decide, when there are any.
func (b *ballot) majority(deciders int) Result {
	switch {
	case b.reliable():
		dec := b.deciders(deciders, true)
		r := b.reliabilityVote(dec)
		r.Deciders = dec
		return r
	case b.freeText():
		return b.byLearned()
	}
	dec := b.deciders(deciders, false)
	r := b.vote(false, dec)
	r.Deciders = dec
	if dec != nil { // what the answers learn from: the vote of them all
		all := b.vote(false, nil)
		r.InMajority = b.contributed(all.Answer, all.Chosen)
	}
	return r
}

// weightedVote decides a weighted vote. Free text without a verdict goes by the models' learned
// quality; with a verdict, the arbiter's unified answer replaces a text answer when it gave one.
func (b *ballot) weightedVote(in *Input) Result {
	v := in.Verdict
	if v == nil && b.freeText() {
		return b.byLearned()
	}
	r := b.vote(true, nil)
	if v != nil {
		r.Arbiter = in.Arbiter
		if v.Answer != "" && (in.Kind == Text || in.Kind == "") {
			r.Answer, r.Synthesis = v.Answer, true
		}
	}
	return r
}

// complete fills in what every decision on text carries: the strategy, weights and support, who
// contributed, and the points (the arbiter's own when it decided and gave some).
func (b *ballot) complete(r *Result, in *Input) {
	v := in.Verdict
	r.Strategy = in.Strategy
	r.Weighted = b.weighted
	r.Support = b.support
	r.Contributed = b.contributed(r.Answer, r.Chosen)
	r.Agreement, r.Disagreement = b.points(r.Chosen)
	if v != nil && r.Arbiter == in.Arbiter && (len(v.Agreement) > 0 || len(v.Disagreement) > 0) {
		r.Agreement, r.Disagreement = nonNil(v.Agreement), nonNil(v.Disagreement)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Weights returns each response's weighted score, its quality being its agreement with the others: what
// an arbiter model is shown beside each response.
func Weights(resps []Response, kind Kind) []float64 {
	return newBallot(resps, true, kind, nil).weighted
}

// ArbiterFor returns the arbiter of a rotating decision: the participants ordered by model id, taking
// turns across requests (round modulo their number).
func ArbiterFor(models []string, round uint64) string {
	if len(models) == 0 {
		return ""
	}
	sorted := slices.Clone(models)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	return sorted[round%uint64(len(sorted))]
}

// ballot holds the analysed responses shared by the strategies.
type ballot struct {
	kind     Kind
	resps    []Response
	docs     []analysed
	sim      [][]float64
	weighted []float64
	support  []float64
}

func newBallot(resps []Response, qualityFromAgreement bool, kind Kind, quality []float64) *ballot {
	n := len(resps)
	b := &ballot{kind: kind, resps: resps, docs: make([]analysed, n), sim: make([][]float64, n)}
	cells := make([]float64, n*n+2*n) // the similarity matrix, then the weighted scores and the support
	b.weighted, b.support = cells[n*n:n*n+n:n*n+n], cells[n*n+n:]
	for i, r := range resps {
		b.docs[i] = analyse(r.Text, kind)
		b.sim[i] = cells[i*n : (i+1)*n : (i+1)*n]
		b.sim[i][i] = 1
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			s := similarity(&b.docs[i], &b.docs[j])
			b.sim[i][j], b.sim[j][i] = s, s
		}
	}
	for i := range n {
		if n == 1 {
			b.support[i] = 1
			continue
		}
		sum := 0.0
		for j := range n {
			if j != i {
				sum += b.sim[i][j]
			}
		}
		b.support[i] = sum / float64(n-1)
	}
	for i, r := range resps {
		switch {
		case quality != nil:
			r.Quality = quality[i]
		case qualityFromAgreement:
			r.Quality = b.support[i]
		}
		b.weighted[i] = r.WeightedScore()
	}
	return b
}

// groups clusters equivalent answers: same normal form, or free text at least groupThreshold similar to
// the group's first member.
func (b *ballot) groups() (groupOf []int, groups [][]int) {
	groupOf = make([]int, len(b.resps))
	for i := range b.resps {
		found := -1
		for g, members := range groups {
			if b.sim[i][members[0]] >= groupThreshold {
				found = g
				break
			}
		}
		if found < 0 {
			found = len(groups)
			groups = append(groups, nil)
		}
		groups[found] = append(groups[found], i)
		groupOf[i] = found
	}
	return groupOf, groups
}

// vote is majority voting (weighted=false: one vote each, ties broken by the sum of weighted scores) or
// weighted voting (each vote counts its weighted score). With deciders, only theirs count, and the
// others' votes, then the weighted scores, break ties among them. The answer is the best-scored
// member's text.
func (b *ballot) vote(weighted bool, deciders []bool) Result {
	groupOf, groups := b.groups()
	mass := make([]float64, len(groups))
	weight := make([]float64, len(groups))
	decided := make([]int, len(groups)) // the deciders' votes; all zero when every answer votes alike
	total := 0.0
	for g, members := range groups {
		for _, i := range members {
			weight[g] += b.weighted[i]
			if deciders != nil && deciders[i] {
				decided[g]++
			}
		}
		if weighted {
			mass[g] = weight[g]
		} else {
			mass[g] = float64(len(members))
		}
		total += mass[g]
	}
	best := 0
	for g := 1; g < len(groups); g++ {
		if decided[g] != decided[best] {
			if decided[g] > decided[best] {
				best = g
			}
			continue
		}
		if mass[g] > mass[best] || (mass[g] == mass[best] && weight[g] > weight[best]) {
			best = g
		}
	}
	chosen := b.bestBy(groups[best], b.weighted)
	scores := make([]float64, len(b.resps))
	for i := range scores {
		if total > 0 {
			scores[i] = mass[groupOf[i]] / total
		}
	}
	return Result{Answer: b.resps[chosen].Text, Chosen: chosen, Scores: scores}
}

// deciders marks the k responses whose models have the best learned quality, ties going to the earlier
// response, among the anchored ones when anchoredOnly; nil when every response decides (k zero, or k at
// least the number of responses) or fewer than k are anchored.
func (b *ballot) deciders(k int, anchoredOnly bool) []bool {
	if k <= 0 || k >= len(b.resps) {
		return nil
	}
	order := b.all()
	if anchoredOnly {
		order = slices.DeleteFunc(order, func(i int) bool { return !b.resps[i].Anchored })
		if len(order) < k {
			return nil
		}
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(b.resps[j].Learned, b.resps[i].Learned) })
	out := make([]bool, len(b.resps))
	for _, i := range order[:k] {
		out[i] = true
	}
	return out
}

// bestBy returns the candidate with the highest key, ties going to the higher weighted score and then
// the lower index.
func (b *ballot) bestBy(candidates []int, key []float64) int {
	best := candidates[0]
	for _, i := range candidates[1:] {
		if key[i] > key[best] || (key[i] == key[best] && b.weighted[i] > b.weighted[best]) {
			best = i
		}
	}
	return best
}

func (b *ballot) all() []int {
	idx := make([]int, len(b.resps))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// local is the local arbiter: minimum-Bayes-risk selection, choosing the response that agrees most with
// all the others (the consensus centre), ties going to the higher weighted score.
func (b *ballot) local() Result {
	chosen := b.bestBy(b.all(), b.support)
	return Result{Answer: b.resps[chosen].Text, Chosen: chosen, Scores: slices.Clone(b.support), Arbiter: LocalArbiter}
}

// LocalChoice runs the local arbiter alone: the response that agrees most with the others.
func LocalChoice(resps []Response) (Result, error) {
	if len(resps) == 0 {
		return Result{}, ErrNoResponses
	}
	return newBallot(resps, false, Text, nil).local(), nil
}

func (b *ballot) rotating(in Input) Result {
	v := in.Verdict
	if v == nil || v.Choice < 0 || v.Choice >= len(b.resps) {
		return b.local()
	}
	r := Result{Answer: b.resps[v.Choice].Text, Chosen: v.Choice, Arbiter: in.Arbiter, Scores: slices.Clone(b.support)}
	if v.Answer != "" {
		r.Answer, r.Synthesis = v.Answer, true
	}
	if len(v.Scores) == len(b.resps) {
		for i, s := range v.Scores {
			r.Scores[i] = clamp01(s)
		}
	}
	if r.Arbiter == "" {
		r.Arbiter = ArbiterFor(models(b.resps), in.Round)
	}
	return r
}

// pairwise ranks the responses by Copeland's method: every pair is a contest won by the preferred
// response (a draw gives each half a point); the response with the most wins is chosen, ties going to
// the higher weighted score. Copeland needs only the sign of each preference, so a judge's miscalibrated
// probabilities cannot distort the ranking, and it is exact for the few responses a request has.
func (b *ballot) pairwise(in Input) Result {
	n := len(b.resps)
	prefer := in.Prefer
	arbiter := in.Arbiter
	if v := in.Verdict; prefer == nil && v != nil && len(v.Prefer) == n {
		prefer = func(i, j int) float64 { return v.Prefer[i][j] }
	}
	if prefer == nil {
		arbiter = LocalArbiter
		prefer = func(i, j int) float64 {
			si, sj := b.support[i]+b.weighted[i], b.support[j]+b.weighted[j]
			switch {
			case si > sj:
				return 1
			case si < sj:
				return 0
			}
			return 0.5
		}
	}
	wins := make([]float64, n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			switch p := prefer(i, j); {
			case p > 0.5:
				wins[i]++
			case p < 0.5:
				wins[j]++
			default:
				wins[i] += 0.5
				wins[j] += 0.5
			}
		}
	}
	chosen := b.bestBy(b.all(), wins)
	scores := make([]float64, n)
	for i := range scores {
		if n == 1 {
			scores[i] = 1
		} else {
			scores[i] = wins[i] / float64(n-1)
		}
	}
	return Result{Answer: b.resps[chosen].Text, Chosen: chosen, Scores: scores, Arbiter: arbiter}
}

// contributed marks the responses at least ContributionThreshold similar to the final answer, which is
// most often the chosen response's own text.
func (b *ballot) contributed(answer string, chosen int) []bool {
	var a analysed
	if chosen >= 0 && chosen < len(b.resps) && answer == b.resps[chosen].Text {
		a = b.docs[chosen]
	} else {
		a = analyse(answer, b.kind)
	}
	out := make([]bool, len(b.resps))
	for i := range b.docs {
		out[i] = similarity(&a, &b.docs[i]) >= ContributionThreshold
	}
	return out
}

func models(resps []Response) []string {
	out := make([]string, len(resps))
	for i, r := range resps {
		out[i] = r.Model
	}
	return out
}

func clamp01(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return min(x, 1)
}
