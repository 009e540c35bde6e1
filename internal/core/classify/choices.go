package classify

var letters = [...]string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}

// ChoiceLetters returns the option letters of a multiple-choice task (A, B, ... in order), or nil. An option
// is a capital A to J at the start of the text or after white space, optionally after "(", followed by
// ")", "." or ":", white space and more text.
func ChoiceLetters(task string) []string {
	var seen [10]bool
	for i := 0; i < len(task); i++ {
		c := task[i]
		if c < 'A' || c > 'J' || (i > 0 && !isSpace(task[i-1]) && !(task[i-1] == '(' && (i == 1 || isSpace(task[i-2])))) {
			continue
		}
		if i+2 < len(task) && (task[i+1] == ')' || task[i+1] == '.' || task[i+1] == ':') && isSpace(task[i+2]) {
			j := i + 2
			for j < len(task) && isSpace(task[j]) {
				j++
			}
			if j < len(task) {
				seen[c-'A'] = true
			}
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

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }
