package consensus

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ArbiterPrompt is the instruction an arbiter model receives: the task and the numbered candidate
// answers, with a request for a JSON verdict that ParseVerdict reads.
func ArbiterPrompt(task string, candidates []string) string {
	var b strings.Builder
	b.WriteString("You are the arbiter between several answers to the same task. Judge which answer is most correct and complete.\n\nTask:\n")
	b.WriteString(task)
	b.WriteString("\n\nCandidate answers:\n")
	for i, c := range candidates {
		fmt.Fprintf(&b, "\n[%d]\n%s\n", i+1, c)
	}
	fmt.Fprintf(&b, "\nReply with JSON only: {\"choice\": <number of the best answer, 1 to %d>, \"scores\": [<a score from 0 to 1 for each answer, in order>]}.", len(candidates))
	return b.String()
}

// ParseVerdict reads an arbiter's reply to ArbiterPrompt over n candidates. It accepts the JSON object
// anywhere in the reply (models like to add prose around it) and converts the 1-based choice.
func ParseVerdict(reply string, n int) (Verdict, error) {
	start, end := strings.Index(reply, "{"), strings.LastIndex(reply, "}")
	if start < 0 || end < start {
		return Verdict{}, fmt.Errorf("arbiter reply has no JSON object: %.80q", reply)
	}
	var raw struct {
		Choice json.RawMessage `json:"choice"`
		Scores []float64       `json:"scores"`
	}
	if err := json.Unmarshal([]byte(reply[start:end+1]), &raw); err != nil {
		return Verdict{}, fmt.Errorf("arbiter reply: %w", err)
	}
	choice, err := strconv.Atoi(strings.Trim(string(raw.Choice), `"`))
	if err != nil {
		return Verdict{}, fmt.Errorf("arbiter choice %s is not a number", raw.Choice)
	}
	if choice < 1 || choice > n {
		return Verdict{}, fmt.Errorf("arbiter choice %d outside 1..%d", choice, n)
	}
	v := Verdict{Choice: choice - 1}
	if len(raw.Scores) == n {
		v.Scores = raw.Scores
	}
	return v, nil
}
