package classify

import (
	"strings"
	"testing"
)

func TestChoiceLetters(t *testing.T) {
	tests := []struct {
		task string
		want string
	}{
		{"Pick one:\nA) red\nB) green\nC) blue", "A B C"},
		{"Which? (A) one (B) two (C) three (D) four", "A B C D"},
		{"Options: A. yes B. no", "A B"},
		{"Explain how TCP works.", ""},
		{"A) only one option", ""},
	}
	for _, tt := range tests {
		if got := strings.Join(ChoiceLetters(tt.task), " "); got != tt.want {
			t.Errorf("ChoiceLetters(%q) = %q, want %q", tt.task, got, tt.want)
		}
	}
}
