package plan

import "github.com/conclave-ai/conclave/internal/core/bandit"

// AcrossFamilies orders the picks of an adaptive quorum, whose first wave is the first wave of them,
// so that no family fills the first wave by itself: a family takes at most wave-1 of its places (one
// when the wave is of two or less), the best of its picks first; the others follow in selection order.
// Models of one family share their training and err together, so a first wave of one family agrees
// when it is wrong, settles the request, and is credited for it by every estimate that counts
// agreement; a model from outside can disagree and keep the request going. A pick without a family
// is its own.
func AcrossFamilies(picks []bandit.Pick, wave int) []bandit.Pick {
	if wave <= 0 || wave >= len(picks) {
		return picks
	}
	limit := max(wave-1, 1)
	first := make([]bandit.Pick, 0, len(picks))
	var rest []bandit.Pick
	taken := make(map[string]int, wave)
	for _, p := range picks {
		if len(first) < wave && (p.Family == "" || taken[p.Family] < limit) {
			taken[p.Family]++
			first = append(first, p)
			continue
		}
		rest = append(rest, p)
	}
	return append(first, rest...)
}

// NoFamilyMajority chooses a panel of n among picks in selection order such that no model family
// holds a majority of it while picks of other families are left: a family takes at most n/2 places
// (at least one) until the others are filled, then the best picks left over fill what is
// still free. Models of one family err together, and a majority of them outvotes the rest whether
// right or wrong. capped are the picks left out for their family.
func NoFamilyMajority(picks []bandit.Pick, n int) (panel, capped []bandit.Pick) {
	if len(picks) <= n {
		return picks, nil
	}
	limit := max(n/2, 1)
	panel = make([]bandit.Pick, 0, n)
	taken := make(map[string]int, n)
	for _, p := range picks {
		switch {
		case len(panel) == n:
		case p.Family != "" && taken[p.Family] >= limit:
			capped = append(capped, p)
		default:
			taken[p.Family]++
			panel = append(panel, p)
		}
	}
	fill := min(n-len(panel), len(capped))
	return append(panel, capped[:fill]...), capped[fill:]
}
