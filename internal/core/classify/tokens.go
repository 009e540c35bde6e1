package classify

var stopWords = map[string]bool{}

func init() {
	for _, w := range []string{
		"a", "an", "the", "to", "of", "and", "or", "in", "on", "at", "is", "are", "was", "be", "it", "its",
		"for", "with", "this", "that", "these", "those", "i", "we", "you", "my", "our", "me", "us", "your",
		"please", "can", "could", "would", "will", "do", "does", "so", "as", "by", "from", "if", "but",
		"have", "has", "there", "what", "which", "how", "about", "into", "just", "some", "any", "all",
	} {
		stopWords[w] = true
	}
}

// stem strips the commonest English suffixes so that "vulnerabilities", "vulnerability" and
// "summarizing", "summarize" meet. It is deliberately crude: it only has to be consistent.
func stem(w []byte) []byte {
	n := len(w)
	switch {
	case n > 5 && string(w[n-3:]) == "ies":
		w = append(w[:n-3], 'y')
	case n > 5 && string(w[n-3:]) == "ing":
		w = w[:n-3]
	case n > 4 && string(w[n-2:]) == "ed":
		w = w[:n-2]
	case n > 4 && string(w[n-2:]) == "es":
		w = w[:n-2]
	case n > 3 && w[n-1] == 's' && w[n-2] != 's':
		w = w[:n-1]
	}
	if n := len(w); n > 3 && w[n-1] == 'e' {
		w = w[:n-1] // "summarize" meets "summarizing" and "summarized"
	}
	return w
}
