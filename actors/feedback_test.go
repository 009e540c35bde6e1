package actors

import (
	"fmt"
	"testing"

	"github.com/conclave-ai/conclave/messages"
)

func TestTruthVotesSayWhoWasRight(t *testing.T) {
	answer := "B"
	updates := []*messages.BanditUpdate{
		{Model: "a", Category: "quiz", Reward: 1, Reason: "feedback_correct"},
		{Model: "b", Category: "quiz", Reward: 0, Reason: "feedback_wrong"},
		{Model: "c", Category: "quiz", Reward: 1, Reason: "feedback_correct"},
		{Model: "d", Category: "quiz", Reward: 0, Reason: "feedback_wrong"},
	}
	tests := []struct {
		desc    string
		fb      *messages.RecordFeedback
		updates []*messages.BanditUpdate
		// want is the votes' category, models, groups and verdicts; empty for none.
		want string
	}{
		{"the right answers are one group, each wrong one its own", &messages.RecordFeedback{Answer: &answer}, updates,
			"quiz [a b c d] [0 1 0 2] [true false true false]"},
		{"scores are not a truth", &messages.RecordFeedback{Scores: map[string]float64{"a": 1}}, updates[:1], ""},
		{"nothing judged, nothing told", &messages.RecordFeedback{Answer: &answer}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			v := TruthVotes("r1", tt.fb, tt.updates)
			got := ""
			if v != nil {
				if v.RequestId != "r1" {
					t.Fatalf("request id %q", v.RequestId)
				}
				got = fmt.Sprint(v.Category, " ", v.Models, " ", v.Groups, " ", v.Right)
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
