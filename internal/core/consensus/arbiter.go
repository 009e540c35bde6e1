package consensus

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/blueprints"
)

// The arbiter protocol: an arbiter model gets the task and the numbered responses with their weighted
// scores, and answers with one JSON object (constrained to VerdictSchema where the provider can):
//
//	{"choice": 2, "answer": "the unified answer",
//	 "scores": [{"relevance": 0.9, "correctness": 0.8, "completeness": 0.7}, ...],
//	 "agreement": ["..."], "disagreement": ["..."],
//	 "preferences": [{"first": 1, "second": 2, "winner": 1}, ...]}   (pairwise only)
//
// Rotating takes the choice and the unified answer; weighted votes with the scores as each response's
// quality and takes the unified answer for free text; pairwise ranks by the preferences.

// AsksArbiter reports whether a strategy asks an arbiter model (majority only votes).
func AsksArbiter(s blueprints.Strategy) bool {
	return s == blueprints.Rotating || s == blueprints.Weighted || s == blueprints.Pairwise
}

// Judged is a response as the arbiter sees it.
type Judged struct {
	Text     string
	Weighted float64
}

// arbiterSystem is the arbiter's standing instruction.
const arbiterSystem = "You are the arbiter between several answers to the same task. Judge each answer on its relevance, correctness and " +
	"completeness, say where they agree and where they disagree, and write the best possible answer to the task from them. " +
	"Reply with one JSON object and nothing else."

// ArbiterPrompt returns the system and user messages an arbiter model gets for a strategy.
func ArbiterPrompt(strategy blueprints.Strategy, task string, responses []Judged) (system, user string) {
	var b strings.Builder
	b.WriteString("Task:\n")
	b.WriteString(task)
	b.WriteString("\n\nAnswers, each with its weighted score (prior trust in its model, from 0 to 1):\n")
	for i, r := range responses {
		fmt.Fprintf(&b, "\n[%d] (weighted score %.2f)\n%s\n", i+1, r.Weighted, r.Text)
	}
	n := len(responses)
	fmt.Fprintf(&b, "\nReply with JSON only: {\"choice\": <the number of the best answer, 1 to %d>, \"answer\": <the unified answer, or \"\" when the best answer says it all>, "+
		"\"scores\": [<for each answer in order: {\"relevance\": 0-1, \"correctness\": 0-1, \"completeness\": 0-1}>], "+
		"\"agreement\": [<points the answers agree on>], \"disagreement\": [<points where they differ>]", n)
	if strategy == blueprints.Pairwise {
		b.WriteString(`, "preferences": [<for every pair of answers i < j: {"first": i, "second": j, "winner": i, j, or 0 for a tie}>]`)
	}
	b.WriteString("}.")
	return arbiterSystem, b.String()
}

// VerdictSchema is the JSON schema of the arbiter's reply for a strategy, strict enough for providers
// that enforce one (every property required, no others).
func VerdictSchema(strategy blueprints.Strategy) json.RawMessage {
	score := `{"type":"object","additionalProperties":false,"required":["relevance","correctness","completeness"],` +
		`"properties":{"relevance":{"type":"number"},"correctness":{"type":"number"},"completeness":{"type":"number"}}}`
	points := `{"type":"array","items":{"type":"string"}}`
	props := `"choice":{"type":"integer"},"answer":{"type":"string"},"scores":{"type":"array","items":` + score + `},"agreement":` + points + `,"disagreement":` + points
	required := `"choice","answer","scores","agreement","disagreement"`
	if strategy == blueprints.Pairwise {
		props += `,"preferences":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["first","second","winner"],` +
			`"properties":{"first":{"type":"integer"},"second":{"type":"integer"},"winner":{"type":"integer"}}}}`
		required += `,"preferences"`
	}
	return json.RawMessage(`{"type":"object","additionalProperties":false,"required":[` + required + `],"properties":{` + props + `}}`)
}

// Verdict is an arbiter model's judgement of the responses.
type Verdict struct {
	// Choice is the index of the response the arbiter judged best.
	Choice int
	// Answer, when not empty, is the arbiter's unified answer.
	Answer string
	// Scores, when it has one entry per response, rates each response in [0, 1] (the mean of its
	// relevance, correctness and completeness).
	Scores []float64
	// Agreement and Disagreement are the arbiter's points, replacing the local ones when given.
	Agreement    []string
	Disagreement []string
	// Prefer, for pairwise, is the probability that response i beats response j, or nil.
	Prefer [][]float64
}

// Bounds of what a verdict may carry into a record.
const (
	maxVerdictPoints     = 10
	maxVerdictPointBytes = 500
)

// ParseVerdict reads an arbiter's reply over n responses. It accepts the JSON object anywhere in the
// reply (models like to add prose around it), a choice given as a string, and scores either as numbers
// or as {relevance, correctness, completeness}; scores of the wrong count and invalid preferences are
// dropped, and an invalid choice is an error.
func ParseVerdict(reply string, n int) (Verdict, error) {
	start, end := strings.Index(reply, "{"), strings.LastIndex(reply, "}")
	if start < 0 || end < start {
		return Verdict{}, fmt.Errorf("arbiter reply has no JSON object: %.80q", reply)
	}
	var raw struct {
		Choice       json.RawMessage   `json:"choice"`
		Answer       string            `json:"answer"`
		Scores       []json.RawMessage `json:"scores"`
		Agreement    []string          `json:"agreement"`
		Disagreement []string          `json:"disagreement"`
		Preferences  []preference      `json:"preferences"`
	}
	if err := json.Unmarshal([]byte(reply[start:end+1]), &raw); err != nil {
		return Verdict{}, fmt.Errorf("arbiter reply: %w", err)
	}
	choice, err := strconv.Atoi(strings.Trim(string(raw.Choice), `"`))
	if err != nil {
		return Verdict{}, fmt.Errorf("arbiter choice %.40s is not a number", raw.Choice)
	}
	if choice < 1 || choice > n {
		return Verdict{}, fmt.Errorf("arbiter choice %d outside 1..%d", choice, n)
	}
	return Verdict{
		Choice: choice - 1, Answer: strings.TrimSpace(raw.Answer), Agreement: points(raw.Agreement), Disagreement: points(raw.Disagreement),
		Scores: verdictScores(raw.Scores, n), Prefer: verdictPreferences(raw.Preferences, n),
	}, nil
}

// preference is an arbiter's verdict on one pair of responses, numbered from 1.
type preference struct {
	First, Second, Winner int
}

// verdictScores reads the arbiter's scores of the n responses, or nil when they are not one valid
// score per response.
func verdictScores(raw []json.RawMessage, n int) []float64 {
	if len(raw) != n {
		return nil
	}
	scores := make([]float64, n)
	for i, s := range raw {
		score, ok := parseScore(s)
		if !ok {
			return nil
		}
		scores[i] = score
	}
	return scores
}

// verdictPreferences reads the arbiter's preferences into a matrix over the n responses: 1 where the
// row's response won, 0 where it lost, 0.5 where no valid preference says. Nil when there are none.
func verdictPreferences(prefs []preference, n int) [][]float64 {
	if len(prefs) == 0 {
		return nil
	}
	prefer := make([][]float64, n)
	for i := range prefer {
		prefer[i] = make([]float64, n)
		for j := range prefer[i] {
			prefer[i][j] = 0.5
		}
	}
	for _, p := range prefs {
		a, b := p.First-1, p.Second-1
		if a < 0 || b < 0 || a >= n || b >= n || a == b {
			continue
		}
		switch p.Winner {
		case p.First:
			prefer[a][b], prefer[b][a] = 1, 0
		case p.Second:
			prefer[a][b], prefer[b][a] = 0, 1
		}
	}
	return prefer
}

// parseScore reads a score: a number, or the mean of relevance, correctness and completeness.
func parseScore(raw json.RawMessage) (float64, bool) {
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return clamp01(f), true
	}
	var parts struct{ Relevance, Correctness, Completeness *float64 }
	if json.Unmarshal(raw, &parts) != nil || parts.Relevance == nil || parts.Correctness == nil || parts.Completeness == nil {
		return 0, false
	}
	return (clamp01(*parts.Relevance) + clamp01(*parts.Correctness) + clamp01(*parts.Completeness)) / 3, true
}

func points(ps []string) []string {
	var out []string
	for _, p := range ps {
		if p = strings.TrimSpace(p); p != "" && len(out) < maxVerdictPoints {
			if len(p) > maxVerdictPointBytes {
				p = strings.ToValidUTF8(p[:maxVerdictPointBytes], "") + "..."
			}
			out = append(out, p)
		}
	}
	return out
}
