package classify

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// What a classifying model (config classify.model) is asked, and how its answer is read. A model is
// asked only about a task the local classifier is unsure of; its answer replaces the local category
// when it names exactly one category.

// describe says in a few words what each category is for, so that a model need not guess from names.
var describe = map[Category]string{
	CodeReview:      "review of existing code or a diff for problems",
	SecurityAudit:   "security weaknesses, vulnerabilities, threat review",
	Architecture:    "system design, components, boundaries, scaling",
	Implementation:  "write new code or a feature",
	Refactoring:     "restructure existing code without changing behaviour",
	Debugging:       "find why the caller's code misbehaves or crashes",
	Testing:         "write or improve tests",
	Documentation:   "write docs, READMEs, docstrings, guides",
	Research:        "what is known on a topic, evidence, literature",
	Classification:  "sort or label given items into classes",
	Summarization:   "condense a given text",
	Planning:        "plans, schedules, roadmaps, steps",
	Evaluation:      "judge, grade or score something against criteria",
	Troubleshooting: "operational problems with systems, infrastructure, tools or devices",
	General:         "everyday questions and chat that fit nothing else",
	Translation:     "turn text from one human language into another",
	DataAnalysis:    "analyse data, statistics, queries over data",
	Brainstorming:   "generate many ideas or options",
	Explanation:     "explain how something works, teach a concept",
	Comparison:      "weigh two or more options against each other",
	Configuration:   "set up or tune configuration files and settings",
	Migration:       "move between versions, platforms, databases or languages",
}

// MaxPromptTaskBytes bounds the task quoted to a classifying model: what a task asks for is rarely
// past its start and end, and the call must stay cheap.
const MaxPromptTaskBytes = 4000

// ModelPrompt is the prompt that asks a model for a task's category.
func ModelPrompt(task string) string {
	var b strings.Builder
	b.WriteString("Classify the task below into exactly one category: what the task asks for, not what it mentions. Categories:\n")
	for _, c := range Categories {
		b.WriteString("- ")
		b.WriteString(string(c))
		b.WriteString(": ")
		b.WriteString(describe[c])
		b.WriteByte('\n')
	}
	b.WriteString("Answer with the category's name alone.\n\nTask:\n<<<\n")
	b.WriteString(clipMiddle(task, MaxPromptTaskBytes))
	b.WriteString("\n>>>\n")
	return b.String()
}

// clipMiddle keeps the start and the end of s, at most limit bytes in all, on rune boundaries.
func clipMiddle(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	head, tail := limit/2, limit/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	start := len(s) - tail
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[:head] + "\n[…]\n" + s[start:]
}

// ParseModelAnswer reads a classifying model's answer: the one category it names, written as the
// category's name (any case, spaces or hyphens for underscores, quotes and punctuation around it).
// An answer that names no category, or more than one, is not an answer.
func ParseModelAnswer(answer string) (Category, bool) {
	if len(answer) > 200 { // a name and a little more; an essay is not an answer
		return "", false
	}
	norm := strings.Map(func(r rune) rune {
		switch {
		case r == ' ' || r == '-' || r == '_':
			return '_'
		case unicode.IsLetter(r):
			return unicode.ToLower(r)
		}
		return ' '
	}, strings.TrimSpace(answer))
	padded := "_" + strings.Join(strings.Fields(norm), "_") + "_"
	var found Category
	for _, c := range Categories {
		if strings.Contains(padded, "_"+string(c)+"_") {
			if found != "" {
				return "", false
			}
			found = c
		}
	}
	return found, found != ""
}
