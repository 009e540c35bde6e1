package messages

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
)

// Every message that may cross a node must survive the wire: protoactor remote serialises with proto.
func TestMessagesRoundTrip(t *testing.T) {
	in := &Dispatch{
		Job:     &Job{RequestId: "r1", JobId: "j1", Kind: "answer", Model: "m", Provider: "p", Prompt: "2+2?", Attempt: 1},
		ReplyTo: actor.NewPID("node-a:8090", "requests/r1"),
	}
	raw, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := &Dispatch{}
	if err := proto.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) || out.ReplyTo.Id != "requests/r1" {
		t.Fatalf("round trip changed the message: %v", out)
	}
}
