package consensus

// Decided reports whether a plain majority vote over resps is beyond the reach of the unasked models
// that could still answer: however they answer, the same group wins. When it is not, need is the fewest
// of them whose agreement with the leading group would decide it. Free text (grouped by similarity) and
// structured answers (merged field by field when no whole answer leads) are never decided early.
func Decided(resps []Response, unasked int, kind Kind, st *Structure) (decided bool, need int) {
	if len(resps) == 0 || Structured(resps, st) {
		return false, unasked
	}
	b := newBallot(resps, false, kind, nil)
	for _, d := range b.docs {
		if !d.short {
			return false, unasked
		}
	}
	_, groups := b.groups()
	top, second := 0, 0 // an answer nobody has given yet starts from nothing
	for _, g := range groups {
		if n := len(g); n > top {
			top, second = n, top
		} else if n > second {
			second = n
		}
	}
	// The leader with k more votes decides when it beats the runner-up with all the others.
	for k := 0; k <= unasked; k++ {
		if top+k > second+unasked-k {
			return k == 0, k
		}
	}
	return false, unasked
}
