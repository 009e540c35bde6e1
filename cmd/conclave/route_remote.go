package main

import (
	"fmt"
	"io"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/logging"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/node"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
)

// remoteWait is the longest the command waits for a node's answer: the longest request a blueprint
// allows, and some.
const remoteWait = 15 * time.Minute

// routeRemote sends the request as a protoactor remote message, as a workflow engine written in Go
// would: this command is such a node, with an actor system and a remote endpoint of its own.
func (f *routeFlags) routeRemote(body []byte, stdout io.Writer) error {
	req := &messages.RouteRequest{}
	// The flags' JSON body and the message share their field names.
	if err := (protojson.UnmarshalOptions{}).Unmarshal(body, req); err != nil {
		return fmt.Errorf("route: %w", err)
	}
	req.RequestId = f.requestID
	system := actor.NewActorSystem(logging.ActorLogger(zap.NewNop())) // the command's output is the view
	r, err := node.StartRemote(system, f.remoteListen)
	if err != nil {
		return err
	}
	defer r.Shutdown(false)
	v := &view{out: stdout, tty: isTerminal(stdout), status: map[string]string{}}
	var progress func(*messages.Progress)
	shown := func() {} // waits until every step is on the screen
	if !f.json {
		steps := make(chan *messages.Progress, 1024)
		done := make(chan struct{})
		shown = func() { close(steps); <-done }
		go func() {
			defer close(done)
			for p := range steps {
				v.step(p.Event, p)
			}
		}()
		progress = func(p *messages.Progress) {
			select {
			case steps <- p:
			default: // the view is behind: a step is not worth blocking the actor
			}
		}
	}
	exec, err := node.Route(system, f.remote, req, f.token, remoteWait, progress)
	shown()
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	if f.json {
		out, _ := protojson.MarshalOptions{UseProtoNames: true, Multiline: true}.Marshal(exec)
		fmt.Fprintln(stdout, string(out))
	}
	if exec.StatusCode != 200 {
		return fmt.Errorf("route: %d %s: %s", exec.StatusCode, exec.GetError().GetCode(), exec.GetError().GetMessage())
	}
	if !f.json {
		a := answer{RequestID: exec.RequestId, Answer: exec.Answer, Degraded: exec.Degraded, Cost: exec.Cost}
		a.Phases.TotalMs = exec.GetPhases().GetTotalMs()
		for _, r := range exec.Results {
			a.Responses = append(a.Responses, answered{Contributed: r.Contributed, Status: r.Status})
		}
		a.show(stdout)
	}
	return nil
}
