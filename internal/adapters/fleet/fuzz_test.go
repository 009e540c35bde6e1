package fleet

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/conclave-ai/conclave/messages"
)

// FuzzReadFrame: whatever a peer sends, reading frames ends in frames or an error, never a panic, and
// what is read is a frame that writes back to bytes that read again alike.
func FuzzReadFrame(f *testing.F) {
	var good bytes.Buffer
	_ = WriteFrame(&good, &messages.AgentFrame{Body: &messages.AgentFrame_Job{Job: &messages.AgentJob{Job: &messages.Job{JobId: "j1", Prompt: "hi"}}}})
	_ = WriteFrame(&good, &messages.AgentFrame{Body: &messages.AgentFrame_Hello{Hello: &messages.AgentHello{}}})
	f.Add(good.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 5, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for range 64 {
			fr, err := ReadFrame(r)
			if err != nil {
				return
			}
			var again bytes.Buffer
			if err := WriteFrame(&again, fr); err != nil {
				t.Fatalf("a frame read does not write: %v", err)
			}
			if _, err := ReadFrame(bufio.NewReader(&again)); err != nil {
				t.Fatalf("a frame written does not read: %v", err)
			}
		}
	})
}
