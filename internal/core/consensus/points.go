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
	if b.allShort() {
		return b.answerPoints(chosen)
	}
	cs := claimSet{words: make([]uint64, 0, 256), exact: make(map[uint64]int)}
	var texts []string
	for i, r := range b.resps {
		texts = appendClaims(texts[:0], r.Text)
		for _, s := range texts {
			cs = cs.add(s, i)
		}
	}
	return b.claimPoints(cs.claims)
}

// answerPoints lists each distinct short answer with its supporters: the chosen one as the agreement,
// the others as disagreements.
func (b *ballot) answerPoints(chosen int) (agreement, disagreement []string) {
	agreement, disagreement = []string{}, []string{}
	n := len(b.resps)
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

// claimPoints lists each claim a majority of the responses state as an agreement, and each claim only
// one response makes as a disagreement.
func (b *ballot) claimPoints(claims []claim) (agreement, disagreement []string) {
	agreement, disagreement = []string{}, []string{}
	n := len(b.resps)
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

// claim is a sentence or list item that one or more responses state. Its words are a range of the
// claimSet's shared array; its sources are counted as the responses are read in order, so a response
// already counted is the last one.
type claim struct {
	text        string
	from, to    int
	sources     int
	last, first int
}

// claimSet gathers the distinct claims of the responses, each with the number of responses stating it.
type claimSet struct {
	claims []claim
	words  []uint64 // the sorted, distinct word hashes of every claim, one range after another
	// exact indexes the claims by the hash of their word set. A claim whose words are exactly an
	// earlier claim's merges into it: no claim before that one can overlap them, or the earlier claim
	// would have merged into it. Answers repeat one another's sentences, so most claims are found here
	// instead of by comparing them with every claim.
	exact map[uint64]int
}

// add returns the set with the claim s of response i counted: as one more source of a claim stating
// the same point, or as a new claim. A claim of fewer than three distinct words is dropped. The set
// goes by value so that its arrays can stay on the caller's stack.
func (cs claimSet) add(s string, i int) claimSet {
	from := len(cs.words)
	cs.words = appendWordHashes(cs.words, s)
	slices.Sort(cs.words[from:])
	cs.words = cs.words[:from+len(slices.Compact(cs.words[from:]))]
	w := cs.words[from:]
	if len(w) < 3 {
		cs.words = cs.words[:from]
		return cs
	}
	key := setHash(w)
	if k, found := cs.find(key, w); found {
		if c := &cs.claims[k]; c.last != i {
			c.sources, c.last = c.sources+1, i
		}
		cs.words = cs.words[:from]
		return cs
	}
	if _, taken := cs.exact[key]; !taken {
		cs.exact[key] = len(cs.claims)
	}
	cs.claims = append(cs.claims, claim{text: s, from: from, to: len(cs.words), sources: 1, last: i, first: i})
	return cs
}

// find returns the claim stating the same point as the word set w, whose hash is key.
func (cs claimSet) find(key uint64, w []uint64) (int, bool) {
	if k, ok := cs.exact[key]; ok && slices.Equal(cs.words[cs.claims[k].from:cs.claims[k].to], w) {
		return k, true
	}
	// No claim has exactly these words (or two sets share one hash): compare as any other.
	for j := range cs.claims {
		if overlaps(cs.words[cs.claims[j].from:cs.claims[j].to], w) {
			return j, true
		}
	}
	return 0, false
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
// claim ends at a line break, or at '.', '!' or '?' followed by a space, a line break or the end.
func appendClaims(out []string, text string) []string {
	ends := claimEnds{text: text, next: [4]int{-2, -2, -2, -2}}
	start, found := 0, 0
	for i := 0; i < len(text) && found < maxClaimsPerResponse; {
		end := ends.from(i)
		if insideWord(text, end) {
			i = end + 1 // a '.' inside a word or a number: not the end of a claim
			continue
		}
		if s := claimText(text[start:end]); s != "" {
			out = append(out, s)
			found++
		}
		start, i = end+1, end+1
	}
	if start < len(text) && found < maxClaimsPerResponse {
		if s := claimText(text[start:]); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// claimEnds finds the bytes that may end a claim in text. The next of each is found by IndexByte and
// kept until passed, so the text is scanned once.
type claimEnds struct {
	text string
	next [4]int // the next '\n', '.', '!', '?' at or after the position asked; -1 when there is none
}

// from returns the position of the first byte that may end a claim at or after i, or len(text).
func (e *claimEnds) from(i int) int {
	end := len(e.text)
	for k, c := range [4]byte{'\n', '.', '!', '?'} {
		if e.next[k] != -1 && e.next[k] < i {
			if j := strings.IndexByte(e.text[i:], c); j >= 0 {
				e.next[k] = i + j
			} else {
				e.next[k] = -1
			}
		}
		if e.next[k] >= 0 && e.next[k] < end {
			end = e.next[k]
		}
	}
	return end
}

// insideWord reports whether the '.', '!' or '?' at end is inside a word or a number rather than at
// the end of a claim: it is followed by neither a space, a line break nor the end of text.
func insideWord(text string, end int) bool {
	return end < len(text) && text[end] != '\n' && end+1 < len(text) && text[end+1] != ' ' && text[end+1] != '\n'
}

// claimText is a claim without its surrounding space and its bullet.
func claimText(s string) string {
	return strings.TrimSpace(trimBullet(strings.TrimSpace(s)))
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
