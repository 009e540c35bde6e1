package consensus

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/blueprints"
)

// A structured decision votes on ballots instead of text: canonical JSON, or a multiset of tool calls.
// Equal ballots are one answer; an invalid ballot votes for nothing, never wins, and contributes
// nothing. The strategies keep their weighting (majority counts, weighted sums weighted scores, an
// arbiter model chooses among the valid answers only). When no whole answer holds more than half of
// the vote and every valid answer is a JSON object, the objects are merged field by field, each field
// by its own vote; the merge stands only when it still satisfies the request's schema.

// structured holds the analysed responses of a structured decision.
type structured struct {
	in       Input
	st       *Structure
	bs       []Ballot
	valid    []int
	groups   [][]int // the members of each group of equal valid ballots
	support  []float64
	weighted []float64
	// note is a point for the record on the merge: why it was not used.
	note string
	// contests are the merged fields whose answers differed.
	contests []contest
}

// structuredWeights are each response's agreement with the others (the share of the others casting
// the same valid ballot) and its weighted score, its quality being quality[i] when given, else that
// agreement when qualityFromAgreement, else its own.
func structuredWeights(resps []Response, bs []Ballot, quality []float64, qualityFromAgreement bool) (support, weighted []float64) {
	n := len(resps)
	support, weighted = make([]float64, n), make([]float64, n)
	for i := range resps {
		if !bs[i].Valid {
			continue
		}
		if n == 1 {
			support[i] = 1
			continue
		}
		same := 0
		for j := range resps {
			if j != i && bs[j].Valid && bs[j].Group == bs[i].Group {
				same++
			}
		}
		support[i] = float64(same) / float64(n-1)
	}
	for i, r := range resps {
		switch {
		case quality != nil:
			r.Quality = quality[i]
		case qualityFromAgreement:
			r.Quality = support[i]
		}
		weighted[i] = r.WeightedScore()
	}
	return support, weighted
}

// decideStructured decides among the responses by their ballots (see above).
func decideStructured(in Input) (Result, error) {
	s := newStructured(in)
	if len(s.valid) == 0 {
		return Result{Strategy: in.Strategy, Chosen: -1, Ballots: s.bs}, &NoValidAnswerError{Models: models(in.Responses), Ballots: s.bs}
	}
	s.support, s.weighted = structuredWeights(in.Responses, s.bs, arbiterQuality(&in), in.QualityFromAgreement)
	r, err := s.decide()
	if err != nil {
		return Result{}, err
	}
	s.complete(&r)
	return r, nil
}

// newStructured casts the ballots of in's responses and groups the valid ones by equal ballot.
func newStructured(in Input) structured {
	s := structured{in: in, st: in.Structure, bs: Ballots(in.Responses, in.Structure, in.Kind)}
	for i, b := range s.bs {
		if !b.Valid {
			continue
		}
		s.valid = append(s.valid, i)
		if b.Group == len(s.groups) {
			s.groups = append(s.groups, nil)
		}
		s.groups[b.Group] = append(s.groups[b.Group], i)
	}
	return s
}

// decide elects the answer by the input's strategy.
func (s *structured) decide() (Result, error) {
	switch s.in.Strategy {
	case blueprints.Majority:
		return s.vote(false), nil
	case blueprints.Weighted:
		r := s.vote(true)
		if s.in.Verdict != nil {
			r.Arbiter = s.in.Arbiter
		}
		return r, nil
	case blueprints.Rotating:
		return s.rotating(), nil
	case blueprints.Pairwise:
		return s.pairwise(), nil
	}
	return Result{}, fmt.Errorf("consensus: unknown strategy %q", s.in.Strategy)
}

// rotating takes the arbiter's choice, and its scores when it gave one per response, when the choice
// names a valid answer; otherwise the answers vote as majority does.
func (s *structured) rotating() Result {
	in, v, n := &s.in, s.in.Verdict, len(s.in.Responses)
	if v == nil || v.Choice < 0 || v.Choice >= n || !s.bs[v.Choice].Valid {
		r := s.vote(false)
		r.Arbiter = LocalArbiter
		return r
	}
	r := s.whole(s.bs[v.Choice].Group, v.Choice, nil)
	r.Arbiter = cmp.Or(in.Arbiter, ArbiterFor(models(in.Responses), in.Round))
	if len(v.Scores) == n {
		for _, i := range s.valid {
			r.Scores[i] = clamp01(v.Scores[i])
		}
	}
	return r
}

// pairwise ranks the valid answers by the caller's preferences, or else by the arbiter's; without
// either the answers vote as majority does.
func (s *structured) pairwise() Result {
	in, v := &s.in, s.in.Verdict
	prefer := in.Prefer
	if prefer == nil && v != nil && len(v.Prefer) == len(in.Responses) {
		prefer = func(i, j int) float64 { return v.Prefer[i][j] }
	}
	if prefer == nil {
		r := s.vote(false)
		r.Arbiter = LocalArbiter
		return r
	}
	r := s.copeland(prefer)
	r.Arbiter = in.Arbiter
	return r
}

// complete fills in what every structured result carries: the strategy, weights and ballots, the
// chosen answer's calls of tools, and the points (the arbiter's own when it decided and gave some).
func (s *structured) complete(r *Result) {
	in, v := &s.in, s.in.Verdict
	r.Strategy, r.Weighted, r.Support, r.Ballots = in.Strategy, s.weighted, s.support, s.bs
	if s.bs[r.Chosen].Form == FormToolCalls && !r.Merged {
		r.ToolCalls = in.Responses[r.Chosen].ToolCalls
	}
	r.Agreement, r.Disagreement = s.points(*r)
	if v != nil && r.Arbiter == in.Arbiter && in.Arbiter != "" && (len(v.Agreement) > 0 || len(v.Disagreement) > 0) {
		r.Agreement, r.Disagreement = nonNil(v.Agreement), nonNil(v.Disagreement)
	}
}

// mass is a response's weight in the vote: one for majority, its weighted score for weighted.
func (s *structured) mass(i int, weighted bool) float64 {
	if weighted {
		return s.weighted[i]
	}
	return 1
}

// vote elects the group of equal ballots with the most votes (ties to the larger sum of weighted
// scores, then to the first seen). Without a quorum (more than half of the valid votes), JSON objects
// are merged field by field.
func (s *structured) vote(weighted bool) Result {
	mass := make([]float64, len(s.groups))
	weight := make([]float64, len(s.groups))
	total := 0.0
	for g, members := range s.groups {
		for _, i := range members {
			mass[g] += s.mass(i, weighted)
			weight[g] += s.weighted[i]
		}
		total += mass[g]
	}
	best := 0
	for g := 1; g < len(s.groups); g++ {
		if mass[g] > mass[best] || (mass[g] == mass[best] && weight[g] > weight[best]) {
			best = g
		}
	}
	shares := make([]float64, len(s.groups))
	for g := range shares {
		if total > 0 {
			shares[g] = mass[g] / total
		}
	}
	if mass[best]*2 > total || !s.mergeable() {
		return s.whole(best, -1, shares)
	}
	if r, ok := s.merge(weighted, shares); ok {
		return r
	}
	return s.whole(best, -1, shares)
}

// whole decides for group g: the response chosen (its best-weighted member when chosen is -1) is the
// answer, and every member contributed. Scores are the groups' vote shares (nil: agreement).
func (s *structured) whole(g, chosen int, shares []float64) Result {
	if chosen < 0 {
		chosen = s.bestBy(s.groups[g], s.weighted)
	}
	n := len(s.bs)
	r := Result{Answer: s.in.Responses[chosen].Text, Chosen: chosen, Scores: make([]float64, n), Contributed: make([]bool, n)}
	for _, i := range s.valid {
		r.Contributed[i] = s.bs[i].Group == g
		if shares != nil {
			r.Scores[i] = shares[s.bs[i].Group]
		} else {
			r.Scores[i] = s.support[i]
		}
	}
	return r
}

// bestBy returns the candidate with the highest key, ties going to the higher weighted score and then
// to the lower index.
func (s *structured) bestBy(candidates []int, key []float64) int {
	best := candidates[0]
	for _, i := range candidates[1:] {
		if key[i] > key[best] || (key[i] == key[best] && s.weighted[i] > s.weighted[best]) {
			best = i
		}
	}
	return best
}

// copeland ranks the valid answers by their pairwise contests, as the pairwise strategy does.
func (s *structured) copeland(prefer func(i, j int) float64) Result {
	wins := make([]float64, len(s.bs))
	for a, i := range s.valid {
		for _, j := range s.valid[a+1:] {
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
	chosen := s.bestBy(s.valid, wins)
	r := s.whole(s.bs[chosen].Group, chosen, nil)
	for _, i := range s.valid {
		if len(s.valid) == 1 {
			r.Scores[i] = 1
		} else {
			r.Scores[i] = wins[i] / float64(len(s.valid)-1)
		}
	}
	return r
}

// mergeable reports whether the valid answers can be merged field by field: the request asks for
// JSON and every valid answer is a JSON object.
func (s *structured) mergeable() bool {
	if !s.st.JSON() {
		return false
	}
	for _, i := range s.valid {
		if _, ok := s.bs[i].value.(map[string]any); !ok || s.bs[i].Form != FormJSON {
			return false
		}
	}
	return true
}

// fieldVote is one valid answer's vote on one field.
type fieldVote struct {
	value        any
	mass, weight float64
	who          int
}

// contest is a merged field on which the answers differed: each option (a canonical value, or absent)
// with its voters, the winner first.
type contest struct {
	path    string
	options []option
}

type option struct {
	canonical string // "" for absent
	voters    []int
}

// merge builds the field-wise merge of the valid answers, and reports false when it breaks the schema.
// A merge equal to a whole answer is that answer.
func (s *structured) merge(weighted bool, shares []float64) (Result, bool) {
	voters := make([]fieldVote, len(s.valid))
	for k, i := range s.valid {
		voters[k] = fieldVote{value: s.bs[i].value, mass: s.mass(i, weighted), weight: s.weighted[i], who: i}
	}
	merged := mergeField(voters, "", &s.contests)
	if s.st.schema != nil {
		budget := int64(MaxAnswerWork)
		if err := s.st.schema.check(merged, &budget); err != nil {
			s.note = "the field-wise merge was dropped: it does not match the schema: " + schemaProblem(err)
			s.contests = nil
			return Result{}, false
		}
	}
	canonical := CanonicalJSON(merged)
	for g, members := range s.groups {
		if s.bs[members[0]].Canonical == canonical {
			return s.whole(g, -1, shares), true
		}
	}
	n := len(s.bs)
	r := Result{Answer: canonical, Scores: make([]float64, n), Contributed: make([]bool, n), Merged: true}
	mergedLeaves := leaves(merged, "", map[string]string{})
	for _, i := range s.valid {
		r.Scores[i] = leafAgreement(leaves(s.bs[i].value, "", map[string]string{}), mergedLeaves)
		r.Contributed[i] = r.Scores[i] >= ContributionThreshold
	}
	// The record's chosen answer is the one closest to the merge.
	r.Chosen = s.bestBy(s.valid, r.Scores)
	return r, true
}

// mergeField merges one field's values: objects key by key (a key is kept when more vote for it than
// against, and its value is merged from those that have it), anything else as a whole value elected by
// its votes. Ties go to the larger sum of weighted scores, then to the first seen.
func mergeField(vs []fieldVote, path string, contests *[]contest) any {
	objects := true
	for _, v := range vs {
		if _, ok := v.value.(map[string]any); !ok {
			objects = false
			break
		}
	}
	if !objects {
		return electValue(vs, path, contests)
	}
	var keys []string
	seen := map[string]bool{}
	for _, v := range vs {
		for k := range v.value.(map[string]any) {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		var with []fieldVote
		var present, absent option
		var pm, pw, am, aw float64
		for _, v := range vs {
			if val, ok := v.value.(map[string]any)[k]; ok {
				with = append(with, fieldVote{value: val, mass: v.mass, weight: v.weight, who: v.who})
				present.voters = append(present.voters, v.who)
				pm, pw = pm+v.mass, pw+v.weight
			} else {
				absent.voters = append(absent.voters, v.who)
				am, aw = am+v.mass, aw+v.weight
			}
		}
		sub := path + "/" + k
		keep := pm > am || (pm == am && pw >= aw)
		if len(absent.voters) > 0 {
			present.canonical = "(present)"
			c := contest{path: sub, options: []option{present, absent}}
			if !keep {
				c.options[0], c.options[1] = absent, present
			}
			*contests = append(*contests, c)
		}
		if keep {
			out[k] = mergeField(with, sub, contests)
		}
	}
	return out
}

// electValue elects one of the whole values voted for.
func electValue(vs []fieldVote, path string, contests *[]contest) any {
	var opts []option
	var values []any
	var mass, weight []float64
	index := map[string]int{}
	for _, v := range vs {
		c := CanonicalJSON(v.value)
		k, ok := index[c]
		if !ok {
			k = len(opts)
			index[c] = k
			opts = append(opts, option{canonical: c})
			values, mass, weight = append(values, v.value), append(mass, 0), append(weight, 0)
		}
		opts[k].voters = append(opts[k].voters, v.who)
		mass[k] += v.mass
		weight[k] += v.weight
	}
	best := 0
	for k := 1; k < len(opts); k++ {
		if mass[k] > mass[best] || (mass[k] == mass[best] && weight[k] > weight[best]) {
			best = k
		}
	}
	if len(opts) > 1 {
		opts[0], opts[best] = opts[best], opts[0]
		*contests = append(*contests, contest{path: cmp.Or(path, "/"), options: opts})
	}
	return values[best]
}

// leaves flattens a JSON value into its fields: an object's keys recursively (an empty object is a
// field of its own), anything else a whole value.
func leaves(v any, path string, out map[string]string) map[string]string {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			leaves(x, path+"/"+k, out)
		}
		return out
	}
	out[path] = CanonicalJSON(v)
	return out
}

// leafAgreement is the share of the fields of a and b (their union) on which they agree.
func leafAgreement(a, b map[string]string) float64 {
	union, same := len(b), 0
	for p, x := range a {
		y, ok := b[p]
		if !ok {
			union++
		} else if x == y {
			same++
		}
	}
	if union == 0 {
		return 1
	}
	return float64(same) / float64(union)
}

// maxPreviewBytes bounds a ballot or value quoted in a point.
const maxPreviewBytes = 80

func preview(s string) string {
	if len(s) <= maxPreviewBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxPreviewBytes], "") + "..."
}

// points lists, for a structured decision, each group of equal ballots with its supporters (the
// chosen one as the agreement), or for a merge the fields on which the answers differed and which
// value won; then the invalid answers and why.
func (s *structured) points(r Result) (agreement, disagreement []string) {
	agreement, disagreement = []string{}, []string{}
	n := len(s.bs)
	names := func(who []int) string {
		out := make([]string, len(who))
		for k, i := range who {
			out[k] = s.in.Responses[i].Model
		}
		return strings.Join(out, ", ")
	}
	of := " of " + strconv.Itoa(n) + ": "
	if r.Merged {
		agreement = append(agreement, "merged field by field from "+strconv.Itoa(len(s.valid))+of+names(s.valid))
		for _, c := range s.contests {
			if len(disagreement) == maxPoints {
				break
			}
			parts := make([]string, len(c.options))
			for k, o := range c.options {
				parts[k] = cmp.Or(preview(o.canonical), "(absent)") + " from " + names(o.voters)
			}
			disagreement = append(disagreement, c.path+": "+strings.Join(parts, " over "))
		}
	} else {
		chosen := s.bs[r.Chosen].Group
		for g, members := range s.groups {
			b := s.bs[members[0]]
			point := b.Form + " " + b.Digest + " " + preview(b.Canonical) + " from " + strconv.Itoa(len(members)) + of + names(members)
			if g == chosen {
				agreement = append(agreement, point)
			} else if len(disagreement) < maxPoints {
				disagreement = append(disagreement, point)
			}
		}
	}
	if s.note != "" && len(disagreement) < maxPoints {
		disagreement = append(disagreement, s.note)
	}
	for i, b := range s.bs {
		if !b.Valid && len(disagreement) < maxPoints {
			disagreement = append(disagreement, s.in.Responses[i].Model+": invalid: "+b.Problem)
		}
	}
	return agreement, disagreement
}

// ArbiterView is what an arbiter model is shown: the responses it may choose among (shown, their
// indices in resps) with their weighted scores. A structured decision shows only the valid answers,
// JSON and calls of tools as their canonical form (a call has no text of its own), so that the
// arbiter cannot choose an invalid one; Verdict.Expand maps its verdict back onto all the responses.
func ArbiterView(resps []Response, kind Kind, st *Structure) (shown []int, judged []Judged) {
	if !Structured(resps, st) {
		weights := Weights(resps, kind)
		shown, judged = make([]int, len(resps)), make([]Judged, len(resps))
		for i, r := range resps {
			shown[i], judged[i] = i, Judged{Text: r.Text, Weighted: weights[i]}
		}
		return shown, judged
	}
	bs := Ballots(resps, st, kind)
	_, weights := structuredWeights(resps, bs, nil, true)
	for i, b := range bs {
		if !b.Valid {
			continue
		}
		text := b.Canonical
		if b.Form == FormText {
			text = resps[i].Text // its normal form is for comparing, not for reading
		}
		shown = append(shown, i)
		judged = append(judged, Judged{Text: text, Weighted: weights[i]})
	}
	return shown, judged
}

// Expand maps a verdict on the shown responses (ArbiterView) onto all n responses: the choice and the
// preferences by their indices, a response not shown scored 0 and preferred to none.
func (v Verdict) Expand(shown []int, n int) Verdict {
	out := v
	if v.Choice >= 0 && v.Choice < len(shown) {
		out.Choice = shown[v.Choice]
	}
	if v.Scores != nil {
		out.Scores = make([]float64, n)
		for k, i := range shown {
			if k < len(v.Scores) {
				out.Scores[i] = v.Scores[k]
			}
		}
	}
	if v.Prefer != nil {
		out.Prefer = make([][]float64, n)
		for i := range out.Prefer {
			out.Prefer[i] = make([]float64, n)
			for j := range out.Prefer[i] {
				out.Prefer[i][j] = 0.5
			}
		}
		for a, i := range shown {
			for b, j := range shown {
				if a < len(v.Prefer) && b < len(v.Prefer[a]) {
					out.Prefer[i][j] = v.Prefer[a][b]
				}
			}
		}
	}
	return out
}
