package actors

import (
	"fmt"

	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
)

// refuseAnswer drops an answer the in-flight bound refused: the call fails with no blame (the
// provider, the model and the host answered), keeping what it cost.
func refuseAnswer(res *messages.JobResult, kind resilience.Kind, limit int64) {
	if kind == "" {
		return
	}
	res.Ok, res.Text, res.ToolCalls, res.ErrorKind, res.ErrorScope = false, "", nil, string(kind), ""
	res.HttpStatus, res.RetryAfterSeconds = 0, 0
	if kind == resilience.Overloaded {
		res.ErrorMessage = fmt.Sprintf("the answer was dropped: the requests in flight hold max_inflight_bytes (%d bytes) already", limit)
	} else {
		res.ErrorMessage = "the answer came after its request ended"
	}
}

// answerBytes is what an answer holds: its text and its tool calls.
func answerBytes(res *messages.JobResult) int64 {
	n := len(res.Text)
	for _, c := range res.ToolCalls {
		n += len(c.Id) + len(c.Name) + len(c.Arguments)
	}
	return int64(n)
}

// deltaBytes is what a streamed piece adds to its answer.
func deltaBytes(d *messages.Delta) int64 {
	n := len(d.Text)
	for _, c := range d.ToolCalls {
		n += len(c.Id) + len(c.Name) + len(c.Arguments)
	}
	return int64(n)
}
