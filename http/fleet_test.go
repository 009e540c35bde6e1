package httpapi_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/testenv/sshtest"
	"go.uber.org/zap"
)

// newSSHD starts a real sshd whose sessions run the project's worker binary.
func newSSHD(t *testing.T, bin string) *sshtest.SSHD {
	return sshtest.StartSSHD(t, bin+" worker")
}

// withFleet runs the pipeline on a fleet file.
func withFleet(path string) func(*config.Config) {
	return func(c *config.Config) { c.Fleet = path }
}

func TestRequestsRunOnRealSSHHosts(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	agentHost, execHost := newSSHD(t, bin), newSSHD(t, bin)
	// Both sshd instances take one client key: the fleet's.
	os.WriteFile(filepath.Join(filepath.Dir(execHost.Client.File), "authorized_keys"),
		[]byte(fmt.Sprintf("command=%q,restrict %s\n", bin+" worker", agentHost.Client.Authorized())), 0o600)
	path := sshtest.WriteFleet(t, []string{agentHost.KnownHosts, execHost.KnownHosts},
		[]sshtest.FleetHost{{Name: "gpu-01", Mode: fleet.ModeAgent, SSHD: agentHost}, {Name: "cpu-01", Mode: fleet.ModeExec, SSHD: execHost}}, agentHost.Client.File)
	tb := newTestbed(t, withFleet(path))
	seen := map[string]bool{}
	for i := range 6 {
		status, ok, e := tb.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": "general", "workers": 3, "min_responses": 2})
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, e)
		}
		for _, r := range ok.Responses {
			if r.Status != "ok" {
				t.Fatalf("response %+v", r)
			}
			seen[r.Worker] = true
		}
	}
	if !seen["gpu-01"] || !seen["cpu-01"] || len(seen) != 2 {
		t.Fatalf("workers %v: responses name the hosts", seen)
	}
	var workers struct {
		Workers []struct {
			Name      string `json:"name"`
			Transport string `json:"transport"`
		} `json:"workers"`
	}
	tb.do(http.MethodGet, "/workers", nil, &workers)
	for _, w := range workers.Workers {
		if w.Transport != "connected" {
			t.Fatalf("worker %s is %q", w.Name, w.Transport)
		}
	}
}

func TestHostFaultsFallToTheOtherWorkers(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	good := newSSHD(t, bin)
	dying := newSSHD(t, bin)
	changed := newSSHD(t, bin)
	hanging := sshtest.StartSSHD(t, "sleep 3600") // an agent that never answers
	for _, d := range []*sshtest.SSHD{dying, changed, hanging} {
		os.WriteFile(filepath.Join(filepath.Dir(d.Client.File), "authorized_keys"),
			[]byte(fmt.Sprintf("command=%q,restrict %s\n", bin+" worker", good.Client.Authorized())), 0o600)
	}
	os.WriteFile(filepath.Join(filepath.Dir(hanging.Client.File), "authorized_keys"),
		[]byte(fmt.Sprintf("command=%q,restrict %s\n", "sleep 3600", good.Client.Authorized())), 0o600)
	// known_hosts has another key for "changed": its key changed.
	other := sshtest.KnownHosts(t, t.TempDir(), changed.Addr, sshtest.NewKey(t, t.TempDir(), "other").Signer.PublicKey())
	path := sshtest.WriteFleet(t, []string{good.KnownHosts, dying.KnownHosts, other, hanging.KnownHosts}, []sshtest.FleetHost{
		{Name: "good", Mode: fleet.ModeAgent, SSHD: good},
		{Name: "dying", Mode: fleet.ModeAgent, SSHD: dying},
		{Name: "changed-key", Mode: fleet.ModeAgent, SSHD: changed},
		{Name: "hanging", Mode: fleet.ModeAgent, SSHD: hanging},
		{Name: "refusing", Mode: fleet.ModeAgent, Addr: sshtest.Refused(t)},
		{Name: "silent", Mode: fleet.ModeAgent, Addr: sshtest.Silent(t)},
	}, good.Client.File)
	tb := newTestbed(t, func(c *config.Config) {
		withFleet(path)(c)
		c.Retry = config.Retry{Scale: 0.001, Rounds: 3}
	}, quickBlueprints(t, 1))
	dying.Kill() // sshd killed: its sessions with it
	kinds := map[string]map[string]bool{}
	for i := range 12 {
		status, ok, e := tb.route(map[string]any{"task": fmt.Sprintf("%s\n(%d)", mcq, i), "category": "quick", "workers": 3, "min_responses": 1})
		if status != http.StatusOK {
			t.Fatalf("request %d: status %d: %+v", i, status, e)
		}
		for _, r := range tb.results(ok.RequestID) {
			w, kind := r["worker"].(string), r["error_kind"].(string)
			if kinds[w] == nil {
				kinds[w] = map[string]bool{}
			}
			kinds[w][kind] = true
		}
	}
	want := map[string]string{"dying": "ssh_refused", "changed-key": "ssh_refused", "refusing": "ssh_refused", "silent": "host_timeout", "hanging": "host_timeout"}
	for w, kind := range want {
		if !kinds[w][kind] {
			t.Errorf("worker %s: recorded kinds %v, want %s", w, kinds[w], kind)
		}
	}
	if !kinds["good"][""] {
		t.Errorf("the good worker answered nothing: %v", kinds["good"])
	}
	for _, event := range []string{"host_unreachable", "breaker_transition"} {
		if tb.logs.FilterField(zap.String("event", event)).Len() == 0 {
			t.Errorf("no %s event", event)
		}
	}
	// Host faults never count against a provider.
	for _, p := range tb.engine.Providers() {
		if p.Breaker.State.String() != "closed" || p.Faults24h != 0 {
			t.Errorf("provider %s blamed for its hosts: %+v", p.Name, p.Breaker)
		}
	}
}

func TestAKeyTravelsToItsProviderOnlyInsideSSH(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	host := newSSHD(t, bin)
	path := sshtest.WriteFleet(t, []string{host.KnownHosts}, []sshtest.FleetHost{{Name: "gpu-01", Mode: fleet.ModeAgent, SSHD: host}}, host.Client.File)
	local := providertest.New(providertest.OpenAI, nil)
	defer local.Close()
	t.Setenv("FLEET_LOCAL_KEY", localKey)
	off := 0.0
	tb := newTestbed(t, func(c *config.Config) {
		withFleet(path)(c)
		c.Providers = map[string]config.Provider{"local": {Kind: "openai", BaseURL: local.URL + "/v1", APIKeyEnv: "FLEET_LOCAL_KEY", DiscoverySeconds: &off,
			Models: []config.ProviderModel{{ID: "qwen-a", Context: 32768, PriceIn: price("1"), PriceOut: price("2")}}}}
	})
	status, ok, e := tb.route(map[string]any{"task": mcq, "category": "general", "models": []string{"qwen-a"}, "workers": 1, "min_responses": 1})
	if status != http.StatusOK || ok.Responses[0].Worker != "gpu-01" || ok.Cost <= 0 {
		t.Fatalf("status %d: %+v %+v", status, ok, e)
	}
	if got := local.Last().Header.Get("Authorization"); got != "Bearer "+localKey {
		t.Fatalf("the provider got %q", got)
	}
	_, raw := tb.do(http.MethodGet, "/executions/"+ok.RequestID, nil, nil)
	u := &upstreams{testbed: tb, local: local, anthropic: local, gemini: local}
	u.assertNoKey(t, string(raw))
}

func TestSSHDKilledMidRequest(t *testing.T) {
	bin := sshtest.BuildConclave(t, t.TempDir())
	good, dying := newSSHD(t, bin), newSSHD(t, bin)
	os.WriteFile(filepath.Join(filepath.Dir(dying.Client.File), "authorized_keys"),
		[]byte(fmt.Sprintf("command=%q,restrict %s\n", bin+" worker", good.Client.Authorized())), 0o600)
	path := sshtest.WriteFleet(t, []string{good.KnownHosts, dying.KnownHosts},
		[]sshtest.FleetHost{{Name: "good", Mode: fleet.ModeAgent, SSHD: good}, {Name: "dying", Mode: fleet.ModeAgent, SSHD: dying}}, good.Client.File)
	tb := newTestbed(t, func(c *config.Config) {
		withFleet(path)(c)
		c.Sim.LatencyScale = 4 // tier 2 calls last about 2 s: long enough to be cut
		c.Retry = config.Retry{Scale: 0.001, Rounds: 3}
	}, quickBlueprints(t, 30))
	type answer struct {
		status int
		ok     routeResponse
		e      errorResponse
	}
	done := make(chan answer, 1)
	go func() {
		status, ok, e := tb.route(map[string]any{"task": mcq, "category": "quick", "workers": 2, "min_responses": 2,
			"models": []string{"claude-3-haiku-20240307", "openai/gpt-4o-mini"}})
		done <- answer{status, ok, e}
	}()
	// Killed once its job has had time to reach the agent over an established connection.
	for busy := false; !busy; {
		for _, w := range tb.engine.Workers() {
			busy = busy || (w.Name == "dying" && w.InFlight > 0 && w.Transport == string(fleet.Connected))
		}
		select {
		case a := <-done:
			t.Fatalf("the request ended before the dying host had its job: %d %+v %v", a.status, a.ok, tb.engine.Workers())
		case <-time.After(2 * time.Millisecond):
		}
	}
	time.Sleep(400 * time.Millisecond)
	dying.Kill()
	a := <-done
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %+v", a.status, a.e)
	}
	answered := 0
	for _, r := range a.ok.Responses {
		switch {
		case r.Status == "ok" && r.Worker == "good":
			answered++
		case r.Worker != "dying" || r.ErrorKind != "ssh_refused":
			t.Errorf("response %+v: want answers from the good host and the cut job", r)
		}
	}
	if answered != 2 {
		t.Errorf("%d answers, want both on the good host: %+v", answered, a.ok.Responses)
	}
	var cut bool
	for _, r := range tb.results(a.ok.RequestID) {
		cut = cut || (r["worker"] == "dying" && r["error_kind"] == "ssh_refused")
	}
	if !cut {
		t.Errorf("the record does not show the cut job: %v", tb.results(a.ok.RequestID))
	}
	if tb.logs.FilterField(zap.String("event", "host_connection_lost")).Len() == 0 {
		t.Error("no host_connection_lost event")
	}
	for _, p := range tb.engine.Providers() {
		if p.Faults24h != 0 {
			t.Errorf("provider %s blamed for its host: %+v", p.Name, p.Breaker)
		}
	}
}
