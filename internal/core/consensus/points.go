package consensus

import (
	"slices"
	"strconv"
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
			point := strconv.Quote(b.docs[members[0]].key) + " from " + strconv.Itoa(len(members)) + " of " + strconv.Itoa(n) + ": " + strings.Join(names, ", ")
			if g == groupOf[chosen] {
				agreement = append(agreement, point)
			} else if len(disagreement) < maxPoints {
				disagreement = append(disagreement, point)
			}
		}
		return agreement, disagreement
	}

	// A claim's words are a range of one shared array; its sources are counted as the responses are
	// read in order, so a response already counted is the last one.
	type claim struct {
		text        string
		from, to    int
		sources     int
		last, first int
	}
	var claims []claim
	var texts []string
	words := make([]uint64, 0, 256)
	// A claim whose words are exactly an earlier claim's merges into it: no claim before that one can
	// overlap them, or the earlier claim would have merged into it. Answers repeat one another's
	// sentences, so most claims are found here instead of by comparing them with every claim.
	exact := make(map[uint64]int)
	for i, r := range b.resps {
		texts = appendClaims(texts[:0], r.Text)
		for _, s := range texts {
			from := len(words)
			words = appendWordHashes(words, s)
			slices.Sort(words[from:])
			words = words[:from+len(slices.Compact(words[from:]))]
			w := words[from:]
			if len(w) < 3 {
				words = words[:from]
				continue
			}
			key := setHash(w)
			k, found := exact[key]
			if found && !slices.Equal(words[claims[k].from:claims[k].to], w) {
				found = false // two sets of one hash: compare as any other
			}
			for j := 0; !found && j < len(claims); j++ {
				if overlaps(words[claims[j].from:claims[j].to], w) {
					k, found = j, true
				}
			}
			if found {
				if c := &claims[k]; c.last != i {
					c.sources, c.last = c.sources+1, i
				}
				words = words[:from]
				continue
			}
			if _, taken := exact[key]; !taken {
				exact[key] = len(claims)
			}
			claims = append(claims, claim{text: s, from: from, to: len(words), sources: 1, last: i, first: i})
		}
	}
	majority := n/2 + 1
	of := " of " + strconv.Itoa(n) + ")"
	for _, c := range claims {
		switch {
		case n > 1 && c.sources >= majority && len(agreement) < maxPoints:
			agreement = append(agreement, c.text+" ("+strconv.Itoa(c.sources)+of)
		case n > 1 && c.sources == 1 && len(disagreement) < maxPoints:
			disagreement = append(disagreement, c.text+" (only "+b.resps[c.first].Model+")")
		}
	}
	return agreement, disagreement
}

// trimBullet drops a list item's bullet or number: what strings.TrimLeft(s, "-*•0123456789.) ") does,
// without building its set of characters on every call.
func trimBullet(s string) string {
	for len(s) > 0 {
		switch c := s[0]; {
		case c == '-' || c == '*' || c == '.' || c == ')' || c == ' ' || '0' <= c && c <= '9':
			s = s[1:]
		case strings.HasPrefix(s, "•"):
			s = s[len("•"):]
		default:
			return s
		}
	}
	return s
}

// setHash hashes a sorted set of word hashes.
func setHash(w []uint64) uint64 {
	h := uint64(len(w))
	for _, x := range w {
		h = (h ^ x) * 0x9E3779B97F4A7C15
	}
	return h
}

// overlaps reports whether two claims' word sets state the same point: a Jaccard overlap of at least
// claimOverlap. Sets too different in size cannot, and are not compared word by word.
func overlaps(a, b []uint64) bool {
	small, large := min(len(a), len(b)), max(len(a), len(b))
	if float64(small) < claimOverlap*float64(large) {
		return false
	}
	return jaccard(a, b) >= claimOverlap
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

// appendClaims appends the claims of text: its sentences and list items, without their bullets. A
// claim ends at a line break, or at '.', '!' or '?' followed by a space, a line break or the end. The
// next of each of those bytes is found by IndexByte and kept until passed, so the text is scanned once.
func appendClaims(out []string, text string) []string {
	next := [4]int{-2, -2, -2, -2} // the next '\n', '.', '!', '?' at or after i; -1 when there is none
	start, found := 0, 0
	for i := 0; i < len(text) && found < maxClaimsPerResponse; {
		end := len(text)
		for k, c := range [4]byte{'\n', '.', '!', '?'} {
			if next[k] != -1 && next[k] < i {
				if j := strings.IndexByte(text[i:], c); j >= 0 {
					next[k] = i + j
				} else {
					next[k] = -1
				}
			}
			if next[k] >= 0 && next[k] < end {
				end = next[k]
			}
		}
		if end < len(text) && text[end] != '\n' && end+1 < len(text) && text[end+1] != ' ' && text[end+1] != '\n' {
			i = end + 1 // a '.' inside a word or a number: not the end of a claim
			continue
		}
		if s := strings.TrimSpace(trimBullet(strings.TrimSpace(text[start:end]))); s != "" {
			out = append(out, s)
			found++
		}
		start, i = end+1, end+1
	}
	if start < len(text) && found < maxClaimsPerResponse {
		if s := strings.TrimSpace(trimBullet(strings.TrimSpace(text[start:]))); s != "" {
			out = append(out, s)
		}
	}
	return out
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
