package classify

var letters = [...]string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}

// ChoiceLetters returns the option letters of a multiple-choice task (A, B, ... in order), or nil. An option
// is a capital A to J at the start of the text or after white space, optionally after "(", followed by
// ")", "." or ":", white space and more text.
func ChoiceLetters(task string) []string {
	var seen [10]bool
	for i := 0; i < len(task); i++ {
		if c := task[i]; 'A' <= c && c <= 'J' && optionStarts(task, i) && optionMarked(task, i) {
			seen[c-'A'] = true
		}
	}
	n := 0
	for n < len(seen) && seen[n] {
		n++
	}
	if n < 2 {
		return nil
	}
	return letters[:n:n]
}

// optionStarts reports whether an option's letter may stand at i: at the start of the text or after
// white space, optionally after "(".
func optionStarts(task string, i int) bool {
	return i == 0 || isSpace(task[i-1]) || task[i-1] == '(' && (i == 1 || isSpace(task[i-2]))
}

// optionMarked reports whether the letter at i is followed by ")", "." or ":", white space and more
// text.
func optionMarked(task string, i int) bool {
	if i+2 >= len(task) || !isOptionMark(task[i+1]) || !isSpace(task[i+2]) {
		return false
	}
	j := i + 2
	for j < len(task) && isSpace(task[j]) {
		j++
	}
	return j < len(task)
}

// isOptionMark reports whether c may follow an option's letter.
func isOptionMark(c byte) bool { return c == ')' || c == '.' || c == ':' }

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }
