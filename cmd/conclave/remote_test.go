package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/adapters/remotedoor"
	"github.com/conclave-ai/conclave/internal/testenv/remotetest"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"github.com/conclave-ai/conclave/internal/testenv/tlstest"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The remote tests run every node as a process of its own, as in production: protoactor's remote sets
// gRPC's global logger each time it starts, so two in one process race.

const remoteToken = "remote-token-0123456789"

// remoteClient runs `conclave route --remote addr` with args, as another node would, without the
// environment's token.
func remoteClient(bin, addr string, args ...string) (string, error) {
	cmd := exec.Command(bin, append([]string{"route", "--remote", addr}, args...)...)
	cmd.Env = append(os.Environ(), "CONCLAVE_API_TOKEN=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), err
}

// TestRouteOverRemoteMessages: a controller started with --remote answers route requests from another
// node (the built command in a process of its own, with its own actor system) like HTTP requests,
// progress included; a request without the token gets no answer at all.
func TestRouteOverRemoteMessages(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	srv := serveProcess(t, bin, []string{"CONCLAVE_API_TOKEN=" + remoteToken}, io.Discard, "--remote", "127.0.0.1:0", "--sim-latency-scale", "0")
	const task = "Which is larger?\nA) 2^10\nB) 10^3"
	text, err := remoteClient(bin, srv.remote, "--token", remoteToken, "--category", "general", "--workers", "3", task)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"blueprint general", "asking 3 models", "answered in ", "answer ("} {
		if !strings.Contains(text, want) {
			t.Fatalf("the remote live view lacks %q:\n%s", want, text)
		}
	}
	text, err = remoteClient(bin, srv.remote, "--json", "--token", remoteToken, "--request-id", "wf-7", "--timeout", "30", task)
	if err != nil {
		t.Fatal(err)
	}
	var exec struct {
		RequestID       string `json:"request_id"`
		ClientRequestID string `json:"client_request_id"`
		Answer          string `json:"answer"`
		NodeID          string `json:"node_id"`
	}
	if err := json.Unmarshal([]byte(text), &exec); err != nil || exec.Answer == "" || exec.ClientRequestID != "wf-7" || exec.RequestID == "wf-7" || exec.NodeID == "" {
		t.Fatalf("remote --json: %s (%v)", text, err)
	}
	// A message without the token, or with another, is dropped at the gate: no answer comes.
	for _, token := range []string{"", "another-token-0123456789"} {
		if _, err := remoteClient(bin, srv.remote, "--token", token, "--timeout", "1", task); err == nil || !strings.Contains(err.Error(), "did not answer") {
			t.Fatalf("a message with the token %q: %v", token, err)
		}
	}
	if _, err := remoteClient(bin, srv.remote, "--token", remoteToken, " \t"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("an invisible task: %v", err)
	}
}

// TestTheRemoteDoorLetsOnlyAnAuthenticatedRouteRequestIn: from this process, which holds no token,
// every message type the actors speak and protoactor's system messages go to every actor the engine
// has and to names it does not, followed by the attacks that once worked (a dispatch to a worker, an
// acquisition without a reply address, forged rewards, a forged breaker opening, rewards for invented
// models). Afterwards the arms are unchanged, every breaker is closed, no call reached the upstream,
// no actor was spawned, and the server answers over HTTP and to a route request with the token.
func TestTheRemoteDoorLetsOnlyAnAuthenticatedRouteRequestIn(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	upstream := providertest.New(providertest.OpenAI, nil)
	t.Cleanup(upstream.Close)
	config := filepath.Join(t.TempDir(), "conclave.json")
	cfg := fmt.Sprintf(`{"providers": {"local": {"kind": "openai", "base_url": %q, "discovery_interval_seconds": 0,
		"models": [{"id": "local-a", "context": 8192}, {"id": "local-b", "context": 8192}, {"id": "local-c", "context": 8192}]}}}`, upstream.URL)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := serveProcess(t, bin, []string{"CONCLAVE_API_TOKEN=" + remoteToken}, io.Discard, "--remote", "127.0.0.1:0", "--config", config)
	api := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.http+path, nil)
		req.Header.Set("Authorization", "Bearer "+remoteToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return body
	}
	metric := func(name string) float64 {
		t.Helper()
		total := 0.0
		for _, line := range strings.Split(string(api("/metrics")), "\n") {
			if rest, ok := strings.CutPrefix(line, name); ok && (rest[0] == ' ' || rest[0] == '{') {
				v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				total += v
			}
		}
		return total
	}
	var names []string
	type named struct {
		Name string `json:"name"`
	}
	var workers struct{ Workers []named }
	var provs struct{ Providers []named }
	if err := json.Unmarshal(api("/workers"), &workers); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(api("/providers"), &provs); err != nil {
		t.Fatal(err)
	}
	names = append(names, remotedoor.RouteActor, "conclave", "conclave/fleet", "conclave/providers", "conclave/bandit", "conclave/requests",
		"conclave/recorder", "conclave/consensus", "conclave/consensus/0", "conclave/bandit/reliability", "activator", "no-such-actor", "")
	for _, w := range workers.Workers {
		names = append(names, "conclave/fleet/"+w.Name)
	}
	for _, p := range provs.Providers {
		names = append(names, "conclave/providers/"+p.Name)
	}
	armsBefore, generalBefore, actorsBefore := api("/models"), api("/models?category=general"), metric("conclave_actors")

	msgs := remotetest.EveryMessage(t)
	msgs = append(msgs, &actor.Stop{}, &actor.PoisonPill{}, &actor.Terminated{Who: actor.NewPID("127.0.0.1:1", "x")}, &actor.Watch{Watcher: actor.NewPID("127.0.0.1:1", "x")},
		&messages.Dispatch{Job: &messages.Job{JobId: "j1", Model: "local-a", Prompt: "spend the operator's key"}, ReplyTo: actor.NewPID("127.0.0.1:1", "sink")},
		&messages.Acquire{JobId: "j2", Model: "local-a", Tokens: 10},
		&messages.PeerBreakerOpened{Provider: "local", OpenUntil: timestamppb.New(time.Now().Add(time.Hour)), Node: "elsewhere"},
		&messages.RemoteRoute{Request: &messages.RouteRequest{Task: "no token", Models: []string{"local-a"}}})
	forged := &messages.Rewards{}
	for i := range 1000 {
		forged.Rewards = append(forged.Rewards, &messages.Reward{Model: "local-a", Category: "general", Reward: 1},
			&messages.Reward{Model: fmt.Sprintf("invented-%d", i), Category: "general", Reward: 1})
	}
	msgs = append(msgs, forged)

	peer := remotetest.Dial(t, srv.remote)
	sender := actor.NewPID("127.0.0.1:1", "future$x")
	sent := 0
	for _, name := range names {
		for _, m := range msgs {
			for _, from := range []*actor.PID{sender, nil} {
				peer.Send(t, remotetest.Batch(t, remotetest.Envelope{Msg: m, Target: actor.NewPID(srv.remote, name), Sender: from}))
				sent++
			}
		}
	}
	// A route request signed with another token, and one that is not signed the way the node signs.
	wrong, err := remotedoor.Sign([]byte("another-token-0123456789"), time.Now(), remotedoor.Addressed{Target: remotedoor.RouteActor, Sender: sender}, msgs[len(msgs)-2])
	if err != nil {
		t.Fatal(err)
	}
	for _, header := range []map[string]string{{remotedoor.AuthHeader: wrong}, {remotedoor.AuthHeader: remoteToken}, {"token": remoteToken}} {
		peer.Send(t, remotetest.Batch(t, remotetest.Envelope{Msg: msgs[len(msgs)-2], Target: actor.NewPID(srv.remote, remotedoor.RouteActor), Sender: sender, Header: header}))
		sent++
	}
	for deadline := time.Now().Add(30 * time.Second); metric("conclave_remote_refused_total") < float64(sent); {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d messages refused", metric("conclave_remote_refused_total"), sent)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if n := len(upstream.Requests()); n != 0 {
		t.Fatalf("%d calls reached the upstream", n)
	}
	if !bytes.Equal(api("/models"), armsBefore) || !bytes.Equal(api("/models?category=general"), generalBefore) {
		t.Fatal("the arms moved")
	}
	if after := metric("conclave_actors"); after != actorsBefore {
		t.Fatalf("%v actors before, %v after", actorsBefore, after)
	}
	if metric("conclave_breaker_state{gen_ai_provider_name=\"local\",state=\"open\"}") != 0 || !strings.Contains(string(api("/providers")), `"state":"closed"`) {
		t.Fatalf("a breaker opened: %s", api("/providers"))
	}
	if metric("conclave_actors_stopped") != 0 {
		t.Fatal("an actor was stopped")
	}

	// The server still answers, over HTTP and through the door with the token.
	raw, _ := json.Marshal(map[string]any{"task": "What is 2 + 2?", "models": []string{"local-a"}})
	req, _ := http.NewRequest(http.MethodPost, srv.http+"/route-thompson", bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+remoteToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a normal request after the attack: %d", resp.StatusCode)
	}
	if _, err := remoteClient(bin, srv.remote, "--json", "--token", remoteToken, "--models", "local-b", "--timeout", "30", "What is 3 + 3?"); err != nil {
		t.Fatalf("a route request with the token: %v", err)
	}
	if _, err := remoteClient(bin, srv.remote, "--json", "--models", "local-b", "--timeout", "1", "What is 3 + 3?"); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("the same request without the token: %v", err)
	}
	if n := len(upstream.Requests()); n != 2 {
		t.Fatalf("%d calls reached the upstream: want the two requests made with the token", n)
	}
}

// TestTheRemoteDoorOverMutualTLS: with a certificate, key and CA, only a node whose certificate the CA
// signed gets through, and the answer comes back over TLS too.
func TestTheRemoteDoorOverMutualTLS(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	ca := tlstest.NewCA(t, "conclave")
	server, member := ca.Issue(t, "node-a"), ca.Issue(t, "node-b")
	stranger := tlstest.NewCA(t, "elsewhere").Issue(t, "node-x")
	env := []string{"CONCLAVE_API_TOKEN=" + remoteToken, "CONCLAVE_REMOTE_TLS_CERT=" + server.Cert, "CONCLAVE_REMOTE_TLS_KEY=" + server.Key,
		"CONCLAVE_REMOTE_TLS_CA=" + ca.Cert}
	logs := &lockedBuffer{}
	srv := serveProcess(t, bin, env, logs, "--remote", "127.0.0.1:0", "--sim-latency-scale", "0")
	tlsArgs := func(p tlstest.Pair) []string {
		return []string{"--remote-tls-cert", p.Cert, "--remote-tls-key", p.Key, "--remote-tls-ca", ca.Cert}
	}
	out, err := remoteClient(bin, srv.remote, append(tlsArgs(member), "--json", "--token", remoteToken, "--timeout", "30", "What is 2 + 2?")...)
	var answered struct {
		StatusCode int `json:"status_code"`
	}
	if err != nil || json.Unmarshal([]byte(out), &answered) != nil || answered.StatusCode != 200 {
		t.Fatalf("a node the CA signed: %v\n%s", err, out)
	}
	for _, args := range [][]string{tlsArgs(stranger), nil} {
		if _, err := remoteClient(bin, srv.remote, append(args, "--token", remoteToken, "--timeout", "1", "What is 2 + 2?")...); err == nil ||
			!strings.Contains(err.Error(), "did not answer") {
			t.Fatalf("a node with %q: %v", args, err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), `"reason":"tls_handshake"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no refused handshake logged:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A remote listener beyond loopback starts only with the token and TLS, or when remote.insecure says
// so, and then it warns.
func TestARemoteListenerBeyondLoopbackNeedsATokenAndTLS(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	ca := tlstest.NewCA(t, "conclave")
	pair := ca.Issue(t, "node-a")
	withTLS := []string{"--remote-tls-cert", pair.Cert, "--remote-tls-key", pair.Key}
	for _, tc := range []struct {
		desc string
		env  []string
		args []string
		want string
	}{
		{"no token, no TLS", nil, nil, "CONCLAVE_API_TOKEN"},
		{"a token without TLS", []string{"CONCLAVE_API_TOKEN=" + remoteToken}, nil, "remote.tls_cert"},
		{"TLS without a token", nil, withTLS, "CONCLAVE_API_TOKEN"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--remote", "0.0.0.0:0"}, tc.args...)...)
			cmd.Env = append(os.Environ(), append([]string{"CONCLAVE_API_TOKEN="}, tc.env...)...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("got %v: %s", err, out)
			}
		})
	}
	logs := &lockedBuffer{}
	serveProcess(t, bin, []string{"CONCLAVE_API_TOKEN="}, logs, "--remote", "0.0.0.0:0", "--remote-insecure", "true")
	warning := regexp.MustCompile(`"event":"remote_insecure".*"without":\["token","tls"\]`)
	for deadline := time.Now().Add(10 * time.Second); !warning.MatchString(logs.String()); { // logs are written every 100 ms
		if time.Now().After(deadline) {
			t.Fatalf("no warning at start:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	serveProcess(t, bin, []string{"CONCLAVE_API_TOKEN=" + remoteToken}, io.Discard, append([]string{"--remote", "0.0.0.0:0"}, withTLS...)...)
}
