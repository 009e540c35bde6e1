package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/encoding/protojson"
)

// routeFlags are the request's fields as flags, with where the request goes.
type routeFlags struct {
	server, token, requestID                 string
	category, models, strategy, quorum, meta string
	params                                   string
	strictParams                             bool
	timeout, quorumGrace, quorumTau          float64
	workers, minResponses                    int
	json                                     bool
	remote, remoteListen                     string
	traceparent                              string
	tlsCert, tlsKey, tlsCA                   string
	fs                                       *flag.FlagSet
}

func newRouteFlags(stderr io.Writer) *routeFlags {
	f := &routeFlags{fs: flag.NewFlagSet("route", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: conclave route [flags] "TASK"   (TASK "-" reads it from stdin)

Sends the task to a running Conclave, shows each model's progress live, then the answer.

Flags:`)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.server, "server", envOr("CONCLAVE_SERVER", "http://127.0.0.1:5000"), "Conclave's address (CONCLAVE_SERVER)")
	fs.StringVar(&f.token, "token", os.Getenv("CONCLAVE_API_TOKEN"), "bearer token (CONCLAVE_API_TOKEN)")
	fs.StringVar(&f.requestID, "request-id", "", "your own id for the request (sent as X-Request-ID)")
	fs.StringVar(&f.traceparent, "traceparent", os.Getenv("TRACEPARENT"), "W3C traceparent of the trace the request joins, when Conclave exports traces (TRACEPARENT)")
	fs.StringVar(&f.category, "category", "", "blueprint to use instead of classifying the task")
	fs.StringVar(&f.models, "models", "", "comma-separated model ids to choose among")
	fs.StringVar(&f.strategy, "strategy", "", "consensus strategy: majority, weighted, rotating or pairwise")
	fs.Float64Var(&f.timeout, "timeout", 0, "seconds to wait for the answer, retries included (unset: the blueprint's bound)")
	fs.IntVar(&f.workers, "workers", 0, "models to ask (unset: the blueprint's)")
	fs.IntVar(&f.minResponses, "min-responses", 0, "answers needed for a full quorum (unset: the blueprint's)")
	fs.Float64Var(&f.quorumGrace, "quorum-grace", 0, "seconds to wait for more answers once the quorum is in (unset: the blueprint's)")
	fs.StringVar(&f.quorum, "quorum", "", "fixed or adaptive (empty: the blueprint's)")
	fs.Float64Var(&f.quorumTau, "quorum-tau", 0, "posterior at which an adaptive quorum stops (unset: the blueprint's)")
	fs.StringVar(&f.meta, "metadata", "", `metadata as a JSON object, e.g. '{"answer_kind":"choice"}'`)
	fs.StringVar(&f.params, "parameters", "", `sampling parameters as a JSON object, e.g. '{"temperature":0.1,"max_tokens":256}'`)
	fs.BoolVar(&f.strictParams, "strict-parameters", false, "refuse the request rather than leave out a parameter a model's provider cannot carry")
	fs.BoolVar(&f.json, "json", false, "print the response as JSON instead of the live view")
	fs.StringVar(&f.remote, "remote", "", "send the request as a protoactor remote message to the node at this address (its --remote) instead of over HTTP")
	fs.StringVar(&f.remoteListen, "remote-listen", "127.0.0.1:0", "this client's own remote address, where the node sends progress and the answer")
	fs.StringVar(&f.tlsCert, "remote-tls-cert", os.Getenv("CONCLAVE_REMOTE_TLS_CERT"), "PEM certificate of this client, for dialing the node and for its answers (CONCLAVE_REMOTE_TLS_CERT)")
	fs.StringVar(&f.tlsKey, "remote-tls-key", os.Getenv("CONCLAVE_REMOTE_TLS_KEY"), "PEM key of that certificate (CONCLAVE_REMOTE_TLS_KEY)")
	fs.StringVar(&f.tlsCA, "remote-tls-ca", os.Getenv("CONCLAVE_REMOTE_TLS_CA"), "PEM CA that signs the node's certificate: mutual TLS (CONCLAVE_REMOTE_TLS_CA)")
	return f
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// body is the route request the flags describe.
func (f *routeFlags) body(task string) (map[string]any, error) {
	b := map[string]any{"task": task}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.category != "" {
		b["category"] = f.category
	}
	if f.models != "" {
		b["models"] = strings.Split(f.models, ",")
	}
	if f.strategy != "" {
		b["strategy"] = f.strategy
	}
	if f.quorum != "" {
		b["quorum"] = f.quorum
	}
	// Numbers go out only when given: the blueprint's values stand otherwise.
	for _, n := range []struct {
		flag, field string
		v           any
	}{
		{"timeout", "timeout", f.timeout}, {"quorum-tau", "quorum_tau", f.quorumTau}, {"quorum-grace", "quorum_grace_seconds", f.quorumGrace},
		{"workers", "workers", f.workers}, {"min-responses", "min_responses", f.minResponses},
	} {
		if set[n.flag] {
			b[n.field] = n.v
		}
	}
	if f.meta != "" {
		var md map[string]any
		if err := json.Unmarshal([]byte(f.meta), &md); err != nil || md == nil {
			return nil, fmt.Errorf("--metadata must be a JSON object: %v", err)
		}
		b["metadata"] = md
	}
	if f.params != "" {
		var p map[string]any
		if err := json.Unmarshal([]byte(f.params), &p); err != nil || p == nil {
			return nil, fmt.Errorf("--parameters must be a JSON object: %v", err)
		}
		b["parameters"] = p
	}
	if f.strictParams {
		b["strict_parameters"] = true
	}
	return b, nil
}

// routeCommand is `conclave route`: one request, its progress live, then the answer.
func routeCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f := newRouteFlags(stderr)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	task, err := f.task(stdin)
	if err != nil {
		return err
	}
	body, err := f.body(task)
	if err != nil {
		return err
	}
	if f.remote != "" {
		return f.routeRemote(ctx, body, stdout)
	}
	return f.routeHTTP(ctx, body, stdout)
}

// task is the one task the arguments left after the flags give, with the flags that follow it read
// too; "-" reads the task from stdin.
func (f *routeFlags) task(stdin io.Reader) (string, error) {
	rest := f.fs.Args()
	if len(rest) == 0 {
		f.fs.Usage()
		return "", errors.New("route: missing TASK")
	}
	task := rest[0]
	if err := f.fs.Parse(rest[1:]); err != nil {
		return "", err
	}
	if f.fs.NArg() > 0 {
		return "", fmt.Errorf("route: one TASK, quoted (got %d more arguments)", f.fs.NArg())
	}
	if task != "-" {
		return task, nil
	}
	raw, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
	if err != nil {
		return "", fmt.Errorf("route: reading the task: %w", err)
	}
	return string(raw), nil
}

// routeHTTP posts the request to /route-thompson and shows the answer: its progress live, or with
// --json (or from a server that does not stream it) the response as JSON.
func (f *routeFlags) routeHTTP(ctx context.Context, body map[string]any, stdout io.Writer) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(f.server, "/")+"/route-thompson", bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	if f.requestID != "" {
		req.Header.Set("X-Request-ID", f.requestID)
	}
	if f.traceparent != "" {
		req.Header.Set("Traceparent", f.traceparent)
	}
	if !f.json {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	defer resp.Body.Close()
	if f.json || resp.Header.Get("Content-Type") != "text/event-stream" {
		return printJSON(resp, stdout)
	}
	return watch(resp.Body, stdout, isTerminal(stdout))
}

// printJSON prints a plain response, indented; a failure is also the command's error.
func printJSON(resp *http.Response, stdout io.Writer) error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("route: reading the answer: %w", err)
	}
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		out.Reset()
		out.Write(raw)
	}
	fmt.Fprintln(stdout, strings.TrimRight(out.String(), "\n"))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("route: %s", resp.Status)
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// view is the live per-model status, redrawn in place on a terminal, printed line by line elsewhere.
type view struct {
	out    io.Writer
	tty    bool
	order  []string
	status map[string]string
	drawn  int
}

func (v *view) set(model, status string) {
	if _, ok := v.status[model]; !ok {
		v.order = append(v.order, model)
	}
	if v.status[model] == status {
		return
	}
	v.status[model] = status
	if !v.tty {
		fmt.Fprintf(v.out, "  %-36s %s\n", model, status)
		return
	}
	if v.drawn > 0 {
		fmt.Fprintf(v.out, "\x1b[%dA", v.drawn) // back to the first status line
	}
	for _, m := range v.order {
		fmt.Fprintf(v.out, "\x1b[2K  %-36s %s\n", m, v.status[m])
	}
	v.drawn = len(v.order)
}

// watch reads a progress stream and shows it.
func watch(r io.Reader, out io.Writer, tty bool) error {
	v := &view{out: out, tty: tty, status: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch name {
		case "answer":
			var a answer
			if err := json.Unmarshal([]byte(data), &a); err != nil {
				return fmt.Errorf("route: the answer: %w", err)
			}
			a.show(out)
			return nil
		case "error":
			var e struct {
				Status int `json:"status"`
				Error  struct {
					Code, Message string
				} `json:"error"`
			}
			_ = json.Unmarshal([]byte(data), &e)
			return fmt.Errorf("route: %d %s: %s", e.Status, e.Error.Code, e.Error.Message)
		}
		var p messages.Progress
		if protojson.Unmarshal([]byte(data), &p) == nil {
			v.step(name, &p)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("route: the stream broke: %w", err)
	}
	return errors.New("route: the stream ended without an answer")
}

// step shows one progress event.
func (v *view) step(name string, p *messages.Progress) {
	switch name {
	case "classified":
		fmt.Fprintf(v.out, "classified as %s (confidence %.2f)\n", p.Category, p.Confidence)
	case "selected":
		fmt.Fprintf(v.out, "blueprint %s, %s, asking %d models\n", p.Blueprint, p.Strategy, len(p.Models))
		for _, m := range p.Models {
			v.set(m, "waiting")
		}
	case "dispatched":
		if p.Attempt > 0 {
			v.set(p.Model, "retried on "+p.Worker)
		} else {
			v.set(p.Model, "waiting on "+p.Worker)
		}
	case "reply":
		v.set(p.Model, replyStatus(p))
	case "retry":
		v.set(p.Model, "retrying after "+strings.ReplaceAll(p.ErrorKind, "_", " "))
	case "consensus":
		if p.ChosenModel != "" {
			fmt.Fprintf(v.out, "consensus (%s): %s's answer\n", p.Strategy, p.ChosenModel)
		} else {
			fmt.Fprintf(v.out, "consensus (%s)\n", p.Strategy)
		}
	}
}

func replyStatus(p *messages.Progress) string {
	switch p.Status {
	case "ok":
		return fmt.Sprintf("answered in %.1f s", p.LatencyMs/1000)
	case "timeout":
		return "timed out"
	case "cancelled":
		return "cancelled"
	case "not_sent":
		return "not sent (" + strings.ReplaceAll(p.ErrorKind, "_", " ") + ")"
	}
	if p.ErrorKind != "" {
		return "failed: " + strings.ReplaceAll(p.ErrorKind, "_", " ")
	}
	return p.Status
}

// answer is what the live view shows of the response.
type answer struct {
	RequestID string    `json:"request_id"`
	Answer    string    `json:"answer"`
	Degraded  bool      `json:"degraded"`
	Cost      money.USD `json:"cost"`
	Phases    struct {
		TotalMs float64 `json:"total_ms"`
	} `json:"phases"`
	Responses []answered `json:"responses"`
}

type answered struct {
	Contributed bool   `json:"contributed"`
	Decider     bool   `json:"decider"`
	Status      string `json:"status"`
}

func (a answer) show(out io.Writer) {
	agreed, answered, deciders := 0, 0, 0
	for _, r := range a.Responses {
		if r.Status == "ok" {
			answered++
			if r.Contributed {
				agreed++
			}
			if r.Decider {
				deciders++
			}
		}
	}
	note := ""
	if deciders > 0 { // a majority vote the best-learned answers decided; the others broke ties
		note += fmt.Sprintf(", %d decided", deciders)
	}
	if a.Degraded {
		note += ", degraded"
	}
	fmt.Fprintf(out, "\nanswer (%d of %d agree%s, %s, $%s, request %s):\n%s\n", agreed, answered, note,
		time.Duration(a.Phases.TotalMs*float64(time.Millisecond)).Round(time.Millisecond), a.Cost, a.RequestID, a.Answer)
}
