package consensus

import (
	"fmt"
	"slices"
	"strings"
)

// maxPoints bounds each list of agreement and disagreement points.
const maxPoints = 5

// claimOverlap is the word-set Jaccard overlap from which two sentences state the same point.
const claimOverlap = 0.5

// points lists where the responses agree and where they diverge. Categorical answers are reported per
// distinct answer with its supporters; free text per claim (sentence or list item): a claim stated by a
// majority of responses is an agreement point, a claim only one response makes is a disagreement point.
func (b *ballot) points(chosen int) (agreement, disagreement []string) {
	agreement, disagreement = []string{}, []string{}
	n := len(b.resps)
	if b.allShort() {
		groupOf, groups := b.groups()
		for g, members := range groups {
			names := make([]string, len(members))
			for k, i := range members {
				names[k] = b.resps[i].Model
			}
			point := fmt.Sprintf("%q from %d of %d: %s", b.docs[members[0]].key, len(members), n, strings.Join(names, ", "))
			if g == groupOf[chosen] {
				agreement = append(agreement, point)
			} else if len(disagreement) < maxPoints {
				disagreement = append(disagreement, point)
			}
		}
		return agreement, disagreement
	}

	type claim struct {
		text     string
		words    []uint64
		sources  []int
		response int
	}
	var claims []claim
	for i, r := range b.resps {
		for _, s := range splitClaims(r.Text) {
			w := wordSet(s)
			if len(w) < 3 {
				continue
			}
			merged := false
			for k := range claims {
				if jaccard(claims[k].words, w) >= claimOverlap {
					if !slices.Contains(claims[k].sources, i) {
						claims[k].sources = append(claims[k].sources, i)
					}
					merged = true
					break
				}
			}
			if !merged {
				claims = append(claims, claim{text: s, words: w, sources: []int{i}, response: i})
			}
		}
	}
	majority := n/2 + 1
	for _, c := range claims {
		switch {
		case n > 1 && len(c.sources) >= majority && len(agreement) < maxPoints:
			agreement = append(agreement, fmt.Sprintf("%s (%d of %d)", c.text, len(c.sources), n))
		case n > 1 && len(c.sources) == 1 && len(disagreement) < maxPoints:
			disagreement = append(disagreement, fmt.Sprintf("%s (only %s)", c.text, b.resps[c.response].Model))
		}
	}
	return agreement, disagreement
}

func (b *ballot) allShort() bool {
	for i := range b.docs {
		if !b.docs[i].short {
			return false
		}
	}
	return true
}

// maxClaimsPerResponse bounds the work on long answers.
const maxClaimsPerResponse = 12

func splitClaims(text string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(text) && len(out) < maxClaimsPerResponse; i++ {
		end := i == len(text)
		if !end {
			c := text[i]
			end = c == '\n' || ((c == '.' || c == '!' || c == '?') && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n'))
		}
		if end {
			s := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(text[start:i]), "-*•0123456789.) "))
			if s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	return out
}

func wordSet(s string) []uint64 {
	set := appendWordHashes(make([]uint64, 0, 16), s)
	slices.Sort(set)
	return slices.Compact(set)
}

func jaccard(a, b []uint64) float64 {
	inter := 0
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			inter++
			i++
			j++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 0
	}
	return float64(inter) / float64(union)
}
