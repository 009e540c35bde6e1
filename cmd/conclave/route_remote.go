package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/remotedoor"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
)

// remoteWait is the longest the command waits for a node's answer without --timeout: the longest
// request a blueprint allows, and some. With --timeout it waits that long and remoteMargin more.
const (
	remoteWait   = 15 * time.Minute
	remoteMargin = 5 * time.Second
)

// routeRemote sends the request as a protoactor remote message, as a workflow engine written in Go
// would: this command is such a node, with an actor system and a remote endpoint of its own.
func (f *routeFlags) routeRemote(ctx context.Context, body map[string]any, stdout io.Writer) error {
	req, err := routeRequestOf(body)
	if err != nil {
		return err
	}
	req.RequestId, req.TraceParent = f.requestID, f.traceparent
	client, err := remotedoor.NewClient(remotedoor.ClientOptions{Listen: f.remoteListen, Token: secret.String(f.token), Log: zap.NewNop(), // the command's output is the view
		TLS: remotedoor.TLSFiles{Cert: f.tlsCert, Key: f.tlsKey, CA: f.tlsCA}})
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	defer client.Close()
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
	wait := remoteWait
	if req.TimeoutSeconds != nil {
		wait = time.Duration(*req.TimeoutSeconds*float64(time.Second)) + remoteMargin
	}
	exec, err := client.Route(ctx, f.remote, req, wait, progress)
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
		a := answer{RequestID: exec.RequestId, Answer: exec.Answer, Degraded: exec.Degraded, Cost: money.USD(exec.CostNanos)}
		a.Phases.TotalMs = exec.GetPhases().GetTotalMs()
		for _, r := range exec.Results {
			a.Responses = append(a.Responses, answered{Contributed: r.Contributed, Decider: r.Decider, Status: r.Status})
		}
		a.show(stdout)
	}
	return nil
}

// routeRequestOf is the message of the flags' JSON body. The two share their field names, but for the
// timeout and the parameters, which the message holds as its ask's sampling (one stop list, one output
// limit).
func routeRequestOf(body map[string]any) (*messages.RouteRequest, error) {
	if t, ok := body["timeout"]; ok {
		delete(body, "timeout")
		body["timeout_seconds"] = t
	}
	if p, ok := body["parameters"].(map[string]any); ok {
		delete(body, "parameters")
		if stop, one := p["stop"].(string); one {
			p["stop"] = []string{stop}
		}
		if n, ok := p["max_completion_tokens"]; ok {
			delete(p, "max_completion_tokens")
			p["max_tokens"] = n
		}
		body["ask"] = map[string]any{"sampling": p}
	}
	raw, _ := json.Marshal(body)
	req := &messages.RouteRequest{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(raw, req); err != nil {
		return nil, fmt.Errorf("route: %w", err)
	}
	return req, nil
}
