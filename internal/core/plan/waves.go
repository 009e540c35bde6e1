package plan

import "github.com/conclave-ai/conclave/internal/core/bandit"

// AcrossFamilies orders the picks of an adaptive quorum, whose first wave is the first wave of them:
// the best pick of each family first, then the others, each part in selection order. Models of one
// family share their training and err together, so a first wave of one family agrees when it is
// wrong, settles the request, and is credited for it by every estimate that counts agreement; the
// models that could have told it otherwise are never asked. A pick without a family is its own.
func AcrossFamilies(picks []bandit.Pick, wave int) []bandit.Pick {
	if wave <= 0 || wave >= len(picks) {
		return picks
	}
	first := make([]bandit.Pick, 0, len(picks))
	var rest []bandit.Pick
	families := make(map[string]bool, wave)
	for _, p := range picks {
		if len(first) < wave && (p.Family == "" || !families[p.Family]) {
			families[p.Family] = true
			first = append(first, p)
			continue
		}
		rest = append(rest, p)
	}
	return append(first, rest...)
}
