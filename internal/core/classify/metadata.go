package classify

import (
	"regexp"
	"strings"
)

// Complexity is a coarse estimate of how hard a task is.
type Complexity string

// Complexities.
const (
	ComplexityLow    Complexity = "low"
	ComplexityMedium Complexity = "medium"
	ComplexityHigh   Complexity = "high"
)

// Metadata describes a task beyond its category.
type Metadata struct {
	// Language is the programming language the task is about, or "" when none is evident.
	Language   string     `json:"language,omitempty"`
	Complexity Complexity `json:"complexity"`
	// ContextLength is the estimated size of the task in tokens: one token per four bytes of text (rounded
	// up), the usual rule of thumb for English and code with BPE tokenizers.
	ContextLength int `json:"context_length"`
	// AnswerKind is what kind of answer the task asks for, as far as its text shows: "choice" when it
	// lists lettered options, otherwise "text" (a caller who knows better says so in the request).
	AnswerKind string `json:"answer_kind"`
}

// EstimateTokens estimates the token count of text.
func EstimateTokens(text string) int { return (len(text) + 3) / 4 }

var (
	fencePattern = regexp.MustCompile("```([A-Za-z0-9_+#-]+)")
	filePattern  = regexp.MustCompile(`\b[\w./-]+\.(go|py|ts|tsx|js|jsx|mjs|java|kt|rs|c|h|cc|cpp|hpp|rb|cs|php|sql|sh|bash|swift|scala|ex|exs|hs|lua|dart|r|m|tf|yaml|yml)\b`)
)

// fenceNames maps code-fence info strings to language names.
var fenceNames = map[string]string{
	"go": "go", "golang": "go", "python": "python", "py": "python", "typescript": "typescript", "ts": "typescript",
	"tsx": "typescript", "javascript": "javascript", "js": "javascript", "jsx": "javascript", "java": "java",
	"kotlin": "kotlin", "kt": "kotlin", "rust": "rust", "rs": "rust", "c": "c", "cpp": "cpp", "c++": "cpp",
	"ruby": "ruby", "rb": "ruby", "csharp": "csharp", "cs": "csharp", "c#": "csharp", "php": "php", "sql": "sql",
	"bash": "bash", "sh": "bash", "shell": "bash", "zsh": "bash", "swift": "swift", "scala": "scala",
	"elixir": "elixir", "haskell": "haskell", "lua": "lua", "dart": "dart", "r": "r", "terraform": "terraform",
	"hcl": "terraform", "yaml": "yaml", "yml": "yaml",
}

var extNames = map[string]string{
	"go": "go", "py": "python", "ts": "typescript", "tsx": "typescript", "js": "javascript", "jsx": "javascript",
	"mjs": "javascript", "java": "java", "kt": "kotlin", "rs": "rust", "c": "c", "h": "c", "cc": "cpp", "cpp": "cpp",
	"hpp": "cpp", "rb": "ruby", "cs": "csharp", "php": "php", "sql": "sql", "sh": "bash", "bash": "bash",
	"swift": "swift", "scala": "scala", "ex": "elixir", "exs": "elixir", "hs": "haskell", "lua": "lua",
	"dart": "dart", "r": "r", "m": "objective-c", "tf": "terraform", "yaml": "yaml", "yml": "yaml",
}

// syntaxHints are fragments characteristic of a language; each hit is one vote.
var syntaxHints = []struct {
	lang  string
	hints []string
}{
	{"go", []string{"func ", ":= ", "package main", "fmt.", "err != nil", "go func", "chan ", "defer "}},
	{"python", []string{"def ", "import ", "self.", "elif ", "print(", "__init__", "None", "    return "}},
	{"typescript", []string{": string", ": number", "interface ", "=> {", "export const", "import {"}},
	{"javascript", []string{"console.log", "const ", "let ", "=> {", "require(", "function ("}},
	{"java", []string{"public static void", "System.out", "public class", "private final", "@Override", "new ArrayList"}},
	{"rust", []string{"fn ", "let mut", "impl ", "&mut ", "Option<", "unwrap()", "pub fn"}},
	{"c", []string{"#include", "printf(", "malloc(", "int main("}},
	{"cpp", []string{"std::", "#include <", "template<", "nullptr"}},
	{"sql", []string{"SELECT ", "FROM ", "WHERE ", "JOIN ", "INSERT INTO", "GROUP BY"}},
	{"bash", []string{"#!/bin/bash", "#!/bin/sh", "echo $", "fi\n", "$(", "sudo "}},
	{"ruby", []string{"puts ", "def ", "end\n", "attr_accessor", ".each do"}},
	{"csharp", []string{"using System", "public async Task", "Console.WriteLine", "var "}},
	{"php", []string{"<?php", "$this->", "echo "}},
	{"kotlin", []string{"fun ", "val ", "data class"}},
}

// ExtractMetadata derives language, complexity, context length and answer kind from a task.
func ExtractMetadata(task string) Metadata {
	lang, code := detectLanguage(task)
	kind := "text"
	if ChoiceLetters(task) != nil {
		kind = "choice"
	}
	return Metadata{ContextLength: EstimateTokens(task), Language: lang, Complexity: estimateComplexity(task, EstimateTokens(task), code), AnswerKind: kind}
}

// detectLanguage trusts, in order: a code fence's info string, a file name's extension, then the
// language with the most syntax hints (at least two, so prose mentioning "import" is not Python). It
// also reports whether the task carries code (a fence or syntax), as opposed to naming a file.
func detectLanguage(task string) (lang string, code bool) {
	fenced := strings.Contains(task, "```")
	if fenced {
		if m := fencePattern.FindStringSubmatch(task); m != nil {
			if lang, ok := fenceNames[strings.ToLower(m[1])]; ok {
				return lang, true
			}
		}
	}
	if mayNameFile(task) {
		if m := filePattern.FindStringSubmatch(task); m != nil {
			if lang, ok := extNames[strings.ToLower(m[1])]; ok {
				return lang, fenced || syntaxLanguage(task) != ""
			}
		}
	}
	lang = syntaxLanguage(task)
	return lang, fenced || lang != ""
}

// fileExtensions are the extensions filePattern knows.
var fileExtensions = strings.Split("go|py|ts|tsx|js|jsx|mjs|java|kt|rs|c|h|cc|cpp|hpp|rb|cs|php|sql|sh|bash|swift|scala|ex|exs|hs|lua|dart|r|m|tf|yaml|yml", "|")

// mayNameFile reports whether task could hold a match of filePattern: a name's character, a dot and one
// of the extensions ending a word. Most tasks hold none, and the pattern costs microseconds to fail.
func mayNameFile(task string) bool {
	for i := 1; i+1 < len(task); i++ {
		if task[i] != '.' || !(wordByte(task[i-1]) || task[i-1] == '/' || task[i-1] == '-' || task[i-1] == '.') {
			continue
		}
		for _, ext := range fileExtensions {
			if end := i + 1 + len(ext); strings.HasPrefix(task[i+1:], ext) && (end == len(task) || !wordByte(task[end])) {
				return true
			}
		}
	}
	return false
}

// wordByte is an ASCII byte of \w.
func wordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func syntaxLanguage(task string) string {
	// A hint whose first or last byte the task lacks cannot be in it: most hints of most tasks are
	// settled by that, without a search.
	var present [4]uint64
	for i := 0; i < len(task); i++ {
		present[task[i]>>6] |= 1 << (task[i] & 63)
	}
	has := func(c byte) bool { return present[c>>6]&(1<<(c&63)) != 0 }
	best, bestVotes := "", 1
	for _, h := range syntaxHints {
		votes := 0
		for _, frag := range h.hints {
			if has(frag[0]) && has(frag[len(frag)-1]) && strings.Contains(task, frag) {
				votes++
			}
		}
		if votes > bestVotes {
			best, bestVotes = h.lang, votes
		}
	}
	return best
}

// heavyWords mark tasks whose difficulty is not visible in their length.
var heavyWords = []string{
	"distributed", "concurren", "scalab", "production", "migrat", "architect", "security", "performance",
	"race", "deadlock", "consisten", "latency", "throughput", "multi-tenant", "fault", "end-to-end",
}

// estimateComplexity scores a task: a point per 150 estimated tokens, a point when it carries code, a
// point per distinct heavy word (at most two), half a point per stated requirement beyond the third
// (sentence or list item). Below 1 is low, 3 or more is high.
func estimateComplexity(task string, tokens int, hasCode bool) Complexity {
	score := float64(tokens) / 150
	if hasCode {
		score++
	}
	lower := strings.ToLower(task)
	heavy := 0
	for _, w := range heavyWords {
		if strings.Contains(lower, w) {
			heavy++
		}
	}
	score += float64(min(heavy, 2))
	requirements := strings.Count(task, ". ") + strings.Count(task, "\n- ") + strings.Count(task, "\n* ") + strings.Count(task, "?")
	if requirements > 3 {
		score += 0.5 * float64(requirements-3)
	}
	switch {
	case score >= 3:
		return ComplexityHigh
	case score >= 1:
		return ComplexityMedium
	}
	return ComplexityLow
}
