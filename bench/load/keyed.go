package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// keyedAdmin is the admin token of the keyed run's servers.
const keyedAdmin = "bench-admin-token-0123456789abcdef"

// keyedResult is one row of the keyed run.
type keyedResult struct {
	Binary, Credential string
	RPS, P50Ms         float64
	ServerCPUPerReqUs  float64
	PostgresCPUPerReq  float64
	Requests           int
}

// keyedRun compares a direct call made with an API key (its budget held in Redis before the call and
// settled after, its charge written with its record) against the same call made with the admin token,
// on conclave recording to PostgreSQL: server CPU and PostgreSQL's CPU (every postgres process) per
// request, in alternated runs of the same process. With a baseline binary (an older build), the same
// is measured for it, on a database of its own, in the same run.
func keyedRun(conclave, baseline, database, redisURL string, warmup, duration time.Duration, out string) error {
	if database == "" {
		return fmt.Errorf("--keyed needs --database")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	mockURL, _, stopMock, err := start(func(addr string) *exec.Cmd { return exec.Command(self, "mock", addr) })
	if err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	defer stopMock()
	dir, err := os.MkdirTemp("", "conclave-keyed-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "config.json")
	raw, _ := json.Marshal(map[string]any{"redis_prefix": fmt.Sprintf("bench-keyed-%d", os.Getpid()), "providers": mockProviders(mockURL)})
	if err := os.WriteFile(cfg, raw, 0o600); err != nil {
		return err
	}
	binaries := [][2]string{{"this build", conclave}}
	if baseline != "" {
		binaries = append(binaries, [2]string{"baseline", baseline})
	}
	var results []keyedResult
	for _, b := range binaries {
		url, drop, err := benchDatabase(b[1], database)
		if err != nil {
			return fmt.Errorf("%s: database: %w", b[0], err)
		}
		rows, err := keyedBinary(b[0], b[1], cfg, url, redisURL, filepath.Join(dir, b[0]+".spool"), chatBody, warmup, duration)
		drop()
		if err != nil {
			return fmt.Errorf("%s: %w", b[0], err)
		}
		results = append(results, rows...)
	}
	printKeyed(results, binaries, baseline != "")
	raw, _ = json.MarshalIndent(results, "", "  ")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(out, ".json")+"-keyed.json", raw, 0o644)
}

// printKeyed prints the keyed run's rows, each binary's keyed against admin-token server CPU and, with
// a baseline binary, PostgreSQL's CPU per keyed request against the baseline's.
func printKeyed(results []keyedResult, binaries [][2]string, withBaseline bool) {
	fmt.Println("| binary | credential | req/s | p50 ms | server CPU µs/req | PostgreSQL CPU µs/req |")
	fmt.Println("|---|---|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Printf("| %s | %s | %.0f | %.3f | %.1f | %.1f |\n", r.Binary, r.Credential, r.RPS, r.P50Ms, r.ServerCPUPerReqUs, r.PostgresCPUPerReq)
	}
	server := func(r keyedResult) float64 { return r.ServerCPUPerReqUs }
	pg := func(r keyedResult) float64 { return r.PostgresCPUPerReq }
	for _, b := range binaries {
		keyed, admin := meanOf(results, b[0], "key", server), meanOf(results, b[0], "admin token", server)
		fmt.Printf("%s: a keyed request's server CPU is %.2f× the admin token's (%.1f against %.1f µs; target ≤ 1.10: %s)\n",
			b[0], keyed/admin, keyed, admin, met(keyed <= 1.1*admin))
		if team := meanOf(results, b[0], "team key", server); team > 0 {
			fmt.Printf("%s: a request of a key in a team (two budgets held) costs %.2f× a key's server CPU (%+.1f µs)\n", b[0], team/keyed, team-keyed)
		}
	}
	if withBaseline {
		now, before := meanOf(results, "this build", "key", pg), meanOf(results, "baseline", "key", pg)
		fmt.Printf("PostgreSQL's CPU per keyed request: %.1f µs against the baseline's %.1f (%.2f×; target ≤ 0.50: %s)\n",
			now, before, now/before, met(now <= before/2))
	}
}

// meanOf is the mean of f over the rows of a binary and credential, 0 without any.
func meanOf(results []keyedResult, binary, credential string, f func(keyedResult) float64) float64 {
	sum, n := 0.0, 0
	for _, r := range results {
		if r.Binary == binary && r.Credential == credential {
			sum, n = sum+f(r), n+1
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// keyedBinary runs one binary: a key with a budget and a key in a team with a budget, then alternated
// runs with each key and the admin token.
func keyedBinary(name, bin, cfg, database, redisURL, spool string, body func(int) []byte, warmup, duration time.Duration) ([]keyedResult, error) {
	url, cmd, stop, err := start(func(addr string) *exec.Cmd {
		c := exec.Command(bin, "serve", "--config", cfg, "--listen", addr, "--log-level", "warn")
		c.Env = append(os.Environ(), "DATABASE_URL="+database, "REDIS_URL="+redisURL, "CONCLAVE_API_TOKEN="+keyedAdmin, "CONCLAVE_SPOOL_PATH="+spool)
		return c
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	var key struct{ Key string }
	if err := adminPost(url+"/admin/keys", map[string]any{"name": "bench", "budget_usd": 1000000}, &key); err != nil || key.Key == "" {
		return nil, fmt.Errorf("create a key: %v", err)
	}
	credentials := [][2]string{{"admin token", keyedAdmin}, {"key", key.Key}}
	// A key in a team (a build without teams has none): each call is held against both budgets.
	var team struct{ ID string }
	if adminPost(url+"/admin/teams", map[string]any{"name": "bench", "budget_usd": 1000000}, &team) == nil && team.ID != "" {
		var member struct{ Key string }
		if err := adminPost(url+"/admin/keys", map[string]any{"name": "bench-team", "budget_usd": 1000000, "team_id": team.ID}, &member); err != nil {
			return nil, fmt.Errorf("create a key in a team: %v", err)
		}
		credentials = append(credentials, [2]string{"team key", member.Key})
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}, Timeout: time.Minute}
	var rows []keyedResult
	for round := range 3 {
		for _, c := range credentials {
			if round == 0 {
				loadAs(client, url+"/v1/chat/completions", c[1], body, 1, warmup)
			}
			before, err := cpuTime(cmd.Process.Pid)
			if err != nil {
				return nil, err
			}
			pgBefore := postgresCPU()
			lat, errs, elapsed := loadAs(client, url+"/v1/chat/completions", c[1], body, 1, duration)
			after, _ := cpuTime(cmd.Process.Pid)
			pgAfter := postgresCPU()
			if len(lat) == 0 || errs > 0 {
				return nil, fmt.Errorf("%s: %d answered, %d failed", c[0], len(lat), errs)
			}
			sortDurations(lat)
			n := float64(len(lat))
			rows = append(rows, keyedResult{Binary: name, Credential: c[0], RPS: n / elapsed.Seconds(), P50Ms: ms(lat[len(lat)/2]), Requests: len(lat),
				ServerCPUPerReqUs: float64((after - before).Microseconds()) / n, PostgresCPUPerReq: float64((pgAfter - pgBefore).Microseconds()) / n})
		}
	}
	return rows, nil
}

// adminPost posts a JSON body with the admin token and reads the 201's answer into out.
func adminPost(url string, body, out any) error {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+keyedAdmin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// postgresCPU is the CPU time of every postgres process on this machine (the server's backends, its
// writers and its checkpointer): what a request costs the database, wherever the work lands.
func postgresCPU() time.Duration {
	entries, _ := os.ReadDir("/proc")
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if t, err := cpuTime(pid); err == nil {
			total += t
		}
	}
	return total
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }
