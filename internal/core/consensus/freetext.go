package consensus

// freeText reports whether the answers are free text whose models' learned quality is known: some
// answer is longer than a categorical one, and every model has a learned quality. Similarity between
// such answers filters out the degenerate but cannot rank quality (the answer most like the others is
// no better than a random one), so they are chosen by who wrote them.
func (b *ballot) freeText() bool {
	long := false
	for i, r := range b.resps {
		if r.Learned <= 0 {
			return false
		}
		long = long || !b.docs[i].short
	}
	return long
}

// byLearned chooses the non-empty answer of the model with the highest learned quality, ties going to
// the higher capability and then to the earlier response (selection order: the higher sampled value).
// Each response's score is its model's learned quality.
func (b *ballot) byLearned() Result {
	chosen := -1
	scores := make([]float64, len(b.resps))
	for i, r := range b.resps {
		scores[i] = r.Learned
		if b.docs[i].key == "" && len(b.docs[i].terms) == 0 {
			continue // no answer
		}
		if chosen < 0 || r.Learned > b.resps[chosen].Learned ||
			(r.Learned == b.resps[chosen].Learned && r.Capability > b.resps[chosen].Capability) {
			chosen = i
		}
	}
	if chosen < 0 {
		chosen = 0
	}
	return Result{Answer: b.resps[chosen].Text, Chosen: chosen, Scores: scores, Unjudged: true}
}
