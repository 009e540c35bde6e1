// Command load measures Conclave's own overhead: it runs the real `conclave serve` (zero-latency
// simulated provider, so every microsecond is the control plane's) and, as the baseline, a bare net/http
// JSON handler, each as its own process, under closed-loop load at fixed concurrency. It reports
// requests per second, latency p50/p99 and CPU time per request (the server process's user + system time
// over the measured run divided by the requests it served), with ratios to the baseline measured in the
// same run. With --sustained N it instead drives the embedded default as it ships, faults and rate
// limits on, and tallies the answers; with --endurance D it runs the whole pipeline under steady load
// for D and samples the server's RSS and goroutines; with --overload D it drives the embedded default
// with 128 connections for D and checks that every answer comes within max_queue_seconds + 1 s (all
// three in make soak).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

var tasks = []string{
	"Which gas makes up most of Earth's atmosphere?\nA) Oxygen\nB) Nitrogen\nC) Argon\nD) Carbon dioxide",
	"Review this Go handler before I merge it: func h(w http.ResponseWriter, r *http.Request) { id := r.URL.Query().Get(\"id\"); u, _ := db.User(id); json.NewEncoder(w).Encode(u) }",
	"Summarize the key points of this incident: the cache cluster ran out of memory at 02:14, evictions spiked, and p99 latency tripled until the on-call engineer doubled the node count.",
	"Our Kubernetes pods are stuck in CrashLoopBackOff after the last deploy; the logs say the config map is missing. How do we troubleshoot it?",
	"Write unit tests for a function that parses ISO 8601 durations like PT1H30M.",
	"Check this login form for SQL injection and XSS vulnerabilities: query = \"SELECT * FROM users WHERE name='\" + name + \"'\"",
	"Plan the migration of our billing service from MySQL 5.7 to PostgreSQL 16 over two quarters.",
	"Classify the sentiment of these reviews as positive, negative or neutral: 'Great battery', 'Broke in a week', 'It is a phone'.",
}

// baselineRow names the bare net/http handler's row, which every load run measures.
const baselineRow = "baseline net/http"

type result struct {
	Server      string  `json:"server"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	RPS         float64 `json:"requests_per_second"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	CPUPerReqUs float64 `json:"cpu_us_per_request"`
	// UpstreamCPUPerReqUs is the mock provider's CPU time per request (passthrough runs).
	UpstreamCPUPerReqUs float64 `json:"upstream_cpu_us_per_request,omitempty"`
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "baseline" {
		serveBaseline(os.Args[2])
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "mock" {
		serveMock(os.Args[2])
		return
	}
	o := parseOptions()
	if run := o.instead(); run != nil {
		if err := run(); err != nil {
			fail(err)
		}
		return
	}
	loadRun(o)
}

// options are the command line's flags.
type options struct {
	conclave                  string
	duration, warmup          time.Duration
	levels, out               string
	sustained, sustainedConns int
	overloadFor               time.Duration
	overloadConns             int
	overloadLog               string
	enduranceFor              time.Duration
	database                  string
	profile                   bool
	only                      string
	through, keyed, cache     bool
	redisURL, baselineBin     string
}

// parseOptions reads the command line.
func parseOptions() options {
	var o options
	flag.StringVar(&o.conclave, "conclave", "bin/conclave", "the conclave binary")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per run")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up per run")
	flag.StringVar(&o.levels, "concurrency", "1,16", "concurrency levels")
	flag.StringVar(&o.out, "out", "reports/bench-load.json", "JSON report")
	flag.IntVar(&o.sustained, "sustained", 0, "instead: send this many requests to the embedded default (faults and rate limits on) and tally the answers")
	flag.IntVar(&o.sustainedConns, "sustained-concurrency", 32, "concurrency of the sustained run")
	flag.DurationVar(&o.overloadFor, "overload", 0, "instead: drive the embedded default as it ships with --overload-concurrency connections this long and check that every answer comes within max_queue_seconds + 1 s")
	flag.IntVar(&o.overloadConns, "overload-concurrency", 128, "connections of the overload run")
	flag.StringVar(&o.overloadLog, "overload-log", "", "keep the overload run's server log (info) in this file")
	flag.DurationVar(&o.enduranceFor, "endurance", 0, "instead: run conclave this long under steady load through the whole pipeline (faults on, limits raised) and sample its RSS and goroutines")
	flag.StringVar(&o.database, "database", "", "also run conclave recording to PostgreSQL: a fresh database is made from this URL's server and dropped after")
	flag.BoolVar(&o.profile, "profile", true, "after the load run, profile conclave once more under the same load and print the CPU profile's top entries")
	flag.StringVar(&o.only, "only", "", "run only the rows whose names start with one of these comma-separated prefixes (the baseline always runs)")
	flag.BoolVar(&o.through, "passthrough", false, "instead: one model through the OpenAI adapter to a local mock, against calling the mock directly, at 1 connection")
	flag.BoolVar(&o.keyed, "keyed", false, "instead: a direct call made with an API key (a budget held and settled) against the same made with the admin token, "+
		"conclave recording to PostgreSQL (--database) and holding budgets in Redis (--redis); server and PostgreSQL CPU per request")
	flag.StringVar(&o.redisURL, "redis", "redis://127.0.0.1:6379/0", "the Redis of the --keyed run")
	flag.StringVar(&o.baselineBin, "baseline-conclave", "", "with --keyed: an older conclave binary measured the same way, in the same run, for comparison")
	flag.BoolVar(&o.cache, "cache", false, "instead: hits of the exact answer cache, in memory and in Redis (--redis), against the same direct call "+
		"that skips the cache; server CPU per request and round trips")
	flag.Parse()
	return o
}

// instead is the run the flags ask for in place of the load run, nil for none. When several are asked
// for, the first of keyed, passthrough, endurance, overload and sustained wins.
func (o options) instead() func() error {
	switch {
	case o.keyed:
		return func() error {
			return keyedRun(o.conclave, o.baselineBin, o.database, o.redisURL, o.warmup, o.duration, o.out)
		}
	case o.through:
		return func() error { return passthrough(o.conclave, o.warmup, o.duration, o.out) }
	case o.cache:
		return func() error { return cacheRun(o.conclave, o.redisURL, o.warmup, o.duration, o.out) }
	case o.enduranceFor > 0:
		return func() error { return endurance(o.conclave, o.enduranceFor, 16) }
	case o.overloadFor > 0:
		return func() error { return overload(o.conclave, o.overloadFor, o.overloadConns, o.overloadLog) }
	case o.sustained > 0:
		return func() error { return soak(o.conclave, o.sustained, o.sustainedConns) }
	}
	return nil
}

// serverRow is a row of the load run: a server, how to start it on an address, and its request bodies.
type serverRow struct {
	name string
	cmd  func(addr string) *exec.Cmd
	body func(int) []byte
}

// loadRun measures every row at every concurrency level, prints the table and the targets, writes the
// JSON report and, when asked, profiles conclave. It exits on the first failure.
func loadRun(o options) {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	cfgPath, err := benchConfig()
	if err != nil {
		fail(err)
	}
	defer os.Remove(cfgPath)
	servers := loadRows(self, o.conclave, cfgPath, o.only)
	if o.database != "" {
		row, cleanup := databaseRow(o.conclave, cfgPath, o.database)
		defer cleanup()
		servers = append(servers, row)
	}
	results := measureAll(servers, o.levels, o.warmup, o.duration)
	report(results)
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err == nil {
		raw, _ := json.MarshalIndent(results, "", "  ")
		_ = os.WriteFile(o.out, raw, 0o644)
	}
	if o.profile {
		levels := strings.Split(o.levels, ",")
		c, _ := strconv.Atoi(strings.TrimSpace(levels[len(levels)-1]))
		if err := profileTop(o.conclave, cfgPath, c, o.duration, strings.TrimSuffix(o.out, ".json")+"-cpu.pprof"); err != nil {
			fail(fmt.Errorf("profile: %w", err))
		}
	}
}

// loadRows are the baseline and the conclave rows, those not named by only left out (when set).
func loadRows(self, conclave, cfgPath, only string) []serverRow {
	serve := func(level string) func(addr string) *exec.Cmd {
		return func(addr string) *exec.Cmd {
			return exec.Command(conclave, "serve", "--config", cfgPath, "--listen", addr, "--log-level", level)
		}
	}
	majority, rotating, single := panel("majority", 6), panel("rotating", 6), panel("majority", 1)
	servers := []serverRow{
		{baselineRow, func(addr string) *exec.Cmd { return exec.Command(self, "baseline", addr) }, majority},
		{targetServer, serve("info"), majority},
		{oneModelServer, serve("info"), single},
		{"majority×6 (warn logs)", serve("warn"), majority},
		{"rotating×6 (info logs)", serve("info"), rotating},
	}
	return slices.DeleteFunc(servers, func(s serverRow) bool {
		return only != "" && s.name != baselineRow && !slices.ContainsFunc(strings.Split(only, ","), func(p string) bool { return strings.HasPrefix(s.name, p) })
	})
}

// databaseRow is the row of conclave recording to a fresh PostgreSQL database made on the server of
// database, each server with a spool of its own; cleanup removes the spools and drops the database.
func databaseRow(conclave, cfgPath, database string) (serverRow, func()) {
	url, drop, err := benchDatabase(conclave, database)
	if err != nil {
		fail(fmt.Errorf("database: %w", err))
	}
	spoolDir, err := os.MkdirTemp("", "conclave-bench-spool-")
	if err != nil {
		fail(err)
	}
	cleanup := func() {
		os.RemoveAll(spoolDir)
		drop()
	}
	return serverRow{"majority×6 (info, PostgreSQL)", func(addr string) *exec.Cmd {
		cmd := exec.Command(conclave, "serve", "--config", cfgPath, "--listen", addr, "--log-level", "info",
			"--spool-path", filepath.Join(spoolDir, addr+".spool"))
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		return cmd
	}, panel("majority", 6)}, cleanup
}

// measureAll measures every row at each of the comma-separated concurrency levels, printing each
// result as it comes.
func measureAll(servers []serverRow, levels string, warmup, duration time.Duration) []result {
	var results []result
	for _, level := range strings.Split(levels, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(level))
		if err != nil {
			fail(err)
		}
		for _, s := range servers {
			r, err := measure(s.name, s.cmd, s.body, c, warmup, duration)
			if err != nil {
				fail(fmt.Errorf("%s at concurrency %d: %w", s.name, c, err))
			}
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "%-30s c=%-3d %8.0f req/s  p50 %7.3f ms  p99 %7.3f ms  cpu %7.1f µs/req  (%d requests, %d errors)\n",
				r.Server, r.Concurrency, r.RPS, r.P50Ms, r.P99Ms, r.CPUPerReqUs, r.Requests, r.Errors)
		}
	}
	return results
}

// profileTop runs conclave (info logs, six-way majority) once more under the same load with its debug listener on,
// takes a CPU profile of the server for the measured time, keeps it, and prints its top entries: where
// the control plane's time goes, beside the figures above. This run's own figures are not reported (the
// profiler costs CPU too).
func profileTop(conclave, cfgPath string, concurrency int, duration time.Duration, keep string) error {
	debug, err := freeAddr()
	if err != nil {
		return err
	}
	url, _, stop, err := start(func(addr string) *exec.Cmd {
		return exec.Command(conclave, "serve", "--config", cfgPath, "--listen", addr, "--log-level", "info", "--debug-listen", debug)
	})
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}, Timeout: time.Minute}
	body := panel("majority", 6)
	load(client, url+"/route-thompson", body, concurrency, time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		load(client, url+"/route-thompson", body, concurrency, duration+time.Second)
	}()
	secs := max(int(duration.Seconds()), 1)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debug, secs))
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-done
	if err != nil {
		return err
	}
	if err := os.WriteFile(keep, raw, 0o644); err != nil {
		return err
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=20", conclave, keep).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w", err)
	}
	fmt.Printf("\nCPU profile of conclave (info logs, c=%d, %d s; kept in %s), top entries:\n", concurrency, secs, keep)
	fmt.Println(strings.TrimSpace(string(top)))
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "load:", err)
	os.Exit(1)
}

// benchConfig writes the load run's configuration: zero simulated latency and faults, no rate limits.
func benchConfig() (string, error) {
	return writeConfig(map[string]any{
		"sim":          map[string]any{"seed": 1, "latency_scale": 0, "faults": map[string]float64{"server_error_rate": 0, "timeout_rate": 0, "rate_limit_rate": 0}},
		"rate_limits":  unlimited(),
		"worker_slots": 64,
	})
}

// unlimited lifts every provider's rate limits, so that load measures the control plane.
func unlimited() map[string]any {
	limits := map[string]any{}
	for _, p := range []string{"openrouter", "anthropic", "gemini", "groq", "cerebras", "deepseek"} {
		limits[p] = map[string]int{"requests_per_minute": 0, "tokens_per_minute": 0, "concurrency": 0}
	}
	return limits
}

// writeConfig writes a configuration file and returns its path.
func writeConfig(cfg map[string]any) (string, error) {
	f, err := os.CreateTemp("", "conclave-bench-*.json")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return f.Name(), json.NewEncoder(f).Encode(cfg)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start runs a server process on a free address and waits for it to be healthy.
func start(command func(string) *exec.Cmd) (string, *exec.Cmd, func(), error) {
	addr, err := freeAddr()
	if err != nil {
		return "", nil, nil, err
	}
	cmd := command(addr)
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	if err := cmd.Start(); err != nil {
		return "", nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	url := "http://" + addr
	if err := waitHealthy(url); err != nil {
		stop()
		return "", nil, nil, err
	}
	return url, cmd, stop, nil
}

// sixWay is the body of request i: one of the tasks, asked of six models merged by strategy.
// panel is the body of a request to n models that waits for all of them.
func panel(strategy string, n int) func(int) []byte {
	return func(i int) []byte {
		raw, _ := json.Marshal(map[string]any{"task": tasks[i%len(tasks)], "workers": n, "min_responses": n, "strategy": strategy})
		return raw
	}
}

func measure(name string, command func(string) *exec.Cmd, body func(int) []byte, concurrency int, warmup, duration time.Duration) (result, error) {
	url, cmd, stop, err := start(command)
	if err != nil {
		return result{}, err
	}
	defer stop()
	return measureAt(name, url+"/route-thompson", body, concurrency, warmup, duration, cmd.Process.Pid)
}

// measureAt runs a warm-up and a measured closed loop against url, charging the CPU time of the
// processes pids to its requests (the first is the server's; the others' time is reported apart).
func measureAt(name, url string, body func(int) []byte, concurrency int, warmup, duration time.Duration, pids ...int) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}, Timeout: time.Minute}
	load(client, url, body, concurrency, warmup)
	before := make([]time.Duration, len(pids))
	for i, pid := range pids {
		var err error
		if before[i], err = cpuTime(pid); err != nil {
			return result{}, err
		}
	}
	lat, errs, elapsed := load(client, url, body, concurrency, duration)
	cpu := make([]time.Duration, len(pids))
	for i, pid := range pids {
		after, err := cpuTime(pid)
		if err != nil {
			return result{}, err
		}
		cpu[i] = after - before[i]
	}
	if len(lat) == 0 {
		return result{}, errors.New("no request succeeded")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	served := len(lat) + errs
	r := result{
		Server: name, Concurrency: concurrency, Requests: served, Errors: errs,
		RPS:         float64(served) / elapsed.Seconds(),
		P50Ms:       ms(lat[len(lat)/2]),
		P99Ms:       ms(lat[min(len(lat)-1, len(lat)*99/100)]),
		CPUPerReqUs: float64(cpu[0].Microseconds()) / float64(served),
	}
	if len(cpu) > 1 {
		r.UpstreamCPUPerReqUs = float64(cpu[1].Microseconds()) / float64(served)
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func waitHealthy(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("server did not become healthy")
}

// load runs a closed loop: each of concurrency clients sends its next request when the last is answered.
func load(client *http.Client, url string, body func(int) []byte, concurrency int, d time.Duration) ([]time.Duration, int, time.Duration) {
	return loadAs(client, url, "", body, concurrency, d)
}

// loadAs is load with a bearer credential on every request ("" for none).
func loadAs(client *http.Client, url, credential string, body func(int) []byte, concurrency int, d time.Duration) ([]time.Duration, int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for i := w; ctx.Err() == nil; i += concurrency {
				t := time.Now()
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body(i)))
				req.Header.Set("Content-Type", "application/json")
				if credential != "" {
					req.Header.Set("Authorization", "Bearer "+credential)
				}
				resp, err := client.Do(req)
				if err != nil {
					bad++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad++
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			errs += bad
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	return all, errs, time.Since(start)
}

// cpuTime is a process's user + system CPU time from /proc/<pid>/stat (fields 14 and 15, in clock ticks
// of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces; fields are counted after its closing parenthesis.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// serveBaseline is the bare net/http JSON handler the control plane is compared with: it decodes the
// same request body and encodes a small JSON answer.
func serveBaseline(addr string) {
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	http.HandleFunc("/route-thompson", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Task string `json:"task"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"request_id": "baseline", "answer": req.Task[:min(len(req.Task), 20)], "degraded": false})
	})
	if err := http.ListenAndServe(addr, nil); err != nil {
		fail(err)
	}
}

func report(results []result) {
	base := map[int]result{}
	for _, r := range results {
		if strings.HasPrefix(r.Server, "baseline") {
			base[r.Concurrency] = r
		}
	}
	fmt.Println("| server | concurrency | req/s | p50 ms | p99 ms | CPU µs/req | CPU vs baseline | req/s vs baseline |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		b := base[r.Concurrency]
		fmt.Printf("| %s | %d | %.0f | %.3f | %.3f | %.1f | %.1f× | %.2f× |\n", r.Server, r.Concurrency, r.RPS, r.P50Ms, r.P99Ms,
			r.CPUPerReqUs, r.CPUPerReqUs/b.CPUPerReqUs, r.RPS/b.RPS)
	}
	// What each model beyond the first costs: the six-way request against the one-model request, in the
	// same run, over the five extra models.
	six, one := map[int]result{}, map[int]result{}
	for _, r := range results {
		switch r.Server {
		case targetServer:
			six[r.Concurrency] = r
		case oneModelServer:
			one[r.Concurrency] = r
		}
	}
	for c, o := range one {
		b := base[c]
		fmt.Printf("\nOne model (c=%d): %.1f µs/req, %.1f× the baseline (target ≤ %d×: %s)", c, o.CPUPerReqUs, o.CPUPerReqUs/b.CPUPerReqUs,
			targetOneRatio, met(o.CPUPerReqUs/b.CPUPerReqUs <= targetOneRatio))
		if x, ok := six[c]; ok {
			extra := (x.CPUPerReqUs - o.CPUPerReqUs) / 5
			fmt.Printf("; each model beyond it %.1f µs (target ≤ %d: %s)", extra, targetPerModel, met(extra <= targetPerModel))
		}
		fmt.Println()
	}
	for _, r := range results {
		if r.Server == targetServer && r.Concurrency == targetConcurrency {
			b := base[r.Concurrency]
			fmt.Printf("\nTargets (%s, c=%d): CPU %.1f µs/req (target ≤ %d: %s), %.1f× the baseline (target ≤ %d×: %s), %.0f req/s (target ≥ %d: %s)\n",
				r.Server, r.Concurrency, r.CPUPerReqUs, targetCPU, met(r.CPUPerReqUs <= targetCPU), r.CPUPerReqUs/b.CPUPerReqUs, targetRatio,
				met(r.CPUPerReqUs/b.CPUPerReqUs <= targetRatio), r.RPS, targetRPS, met(r.RPS >= targetRPS))
		}
	}
}

// The overhead targets the load run is read against.
const (
	targetServer      = "majority×6 (info logs)"
	oneModelServer    = "majority×1 (info logs)"
	targetConcurrency = 16
	targetCPU         = 150    // µs of server CPU per request
	targetRatio       = 6      // times the bare handler's CPU per request
	targetOneRatio    = 3      // a one-model request, times the bare handler's CPU per request
	targetPerModel    = 12     // µs of server CPU per request for each model beyond the first
	targetRPS         = 10_000 // requests per second
	targetPassthrough = 60     // µs of server CPU per request beyond the mock's own
)

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// soak runs the embedded default as it ships (simulated faults, default rate limits and breakers) under
// a closed loop of n requests, and tallies every answer by status and error code, whether each 503
// said when to come back, and the providers' breakers at the end: the only refusals should be the rate
// limits', each with a Retry-After.
func soak(conclave string, n, concurrency int) error {
	url, _, stop, err := start(func(addr string) *exec.Cmd {
		return exec.Command(conclave, "serve", "--listen", addr, "--log-level", "warn")
	})
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}, Timeout: 10 * time.Minute}
	began := time.Now()
	tally := soakLoad(client, url, n, concurrency)
	elapsed := time.Since(began)
	view, err := providerBreakers(url)
	if err != nil {
		return err
	}
	fmt.Printf("%d requests at concurrency %d in %s (%.0f req/s)\n\n", n, concurrency, elapsed.Round(time.Second), float64(n)/elapsed.Seconds())
	printTally(tally)
	fmt.Println("\n| provider | breaker | models out of the pool |\n|---|---|---:|")
	for _, p := range view.Providers {
		fmt.Printf("| %s | %s | %d |\n", p.Name, p.Breaker.State, len(p.Models))
	}
	return nil
}

// soakLoad sends n requests to url over concurrency connections, each sending its next request when the
// last is answered, and counts the answers by answerKey.
func soakLoad(client *http.Client, url string, n, concurrency int) map[string]int {
	var mu sync.Mutex
	tally := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				body, _ := json.Marshal(map[string]string{"task": tasks[i%int64(len(tasks))]})
				resp, err := client.Post(url+"/route-thompson", "application/json", bytes.NewReader(body))
				key := answerKey(resp, err)
				mu.Lock()
				tally[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return tally
}

// answerKey names an answer by its status and error code, and for a 503 whether it said when to come
// back (Retry-After); a request that got no answer is a transport error. It closes the answer's body.
func answerKey(resp *http.Response, err error) string {
	if err != nil {
		return "transport error"
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	key := strconv.Itoa(resp.StatusCode)
	if e.Error.Code != "" {
		key += " " + e.Error.Code
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
		key += " (Retry-After)"
	}
	return key
}

// providersView is what a soak reads of GET /providers: each provider's breaker and the models it
// keeps out of the pool.
type providersView struct {
	Providers []struct {
		Name    string `json:"name"`
		Breaker struct {
			State string `json:"state"`
		} `json:"breaker"`
		Models map[string]any `json:"models"`
	} `json:"providers"`
}

// providerBreakers reads the providers' breakers from the server at url.
func providerBreakers(url string) (providersView, error) {
	var view providersView
	resp, err := http.Get(url + "/providers")
	if err != nil {
		return view, err
	}
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	return view, err
}

// printTally prints how many requests got each answer, in the answers' order.
func printTally(tally map[string]int) {
	fmt.Println("| answer | requests |\n|---|---:|")
	keys := make([]string, 0, len(tally))
	for k := range tally {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("| %s | %d |\n", k, tally[k])
	}
}

// mockCompletion is the mock provider's answer, the size of a short real one.
const mockCompletion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1767225600,"model":"mock-1",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Nitrogen: about 78% of dry air by volume, against 21% oxygen and under 1% argon. The answer is (B).","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":41,"completion_tokens":33,"total_tokens":74}}`

// serveMock is an OpenAI-compatible provider that answers at once: it reads the request as a real
// server would and sends a canned completion.
func serveMock(addr string) {
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	http.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"mock-1","object":"model","created":1767225600,"owned_by":"bench"}]}`)
	})
	http.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error","param":null,"code":null}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-request-id", "req_bench")
		io.WriteString(w, mockCompletion)
	})
	if err := http.ListenAndServe(addr, nil); err != nil {
		fail(err)
	}
}

// passthrough measures what Conclave adds to one call: one model (workers 1, min_responses 1) through
// the OpenAI adapter to the mock, against the same chat completion sent to the mock directly, one
// connection at a time. The figures are the server's CPU per request against the mock's, and the
// added p50 latency.
func passthrough(conclave string, warmup, duration time.Duration, out string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	mockURL, mock, stopMock, err := start(func(addr string) *exec.Cmd { return exec.Command(self, "mock", addr) })
	if err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	defer stopMock()
	cfg, err := passthroughConfig(mockURL)
	if err != nil {
		return err
	}
	defer os.Remove(cfg)
	var results []result
	base, err := measureAt("mock directly", mockURL+"/v1/chat/completions", chatBody, 1, warmup, duration, mock.Process.Pid)
	if err != nil {
		return fmt.Errorf("mock directly: %w", err)
	}
	base.UpstreamCPUPerReqUs = base.CPUPerReqUs
	results = append(results, base)
	for _, level := range []string{"info", "warn"} {
		rows, err := passthroughLevel(conclave, cfg, level, mock.Process.Pid, warmup, duration)
		if err != nil {
			return err
		}
		results = append(results, rows...)
	}
	printPassthrough(results, base)
	raw, _ := json.MarshalIndent(results, "", "  ")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(out, ".json")+"-passthrough.json", raw, 0o644)
}

// mockProviders configures the mock at mockURL as conclave's one provider: OpenAI-compatible, its one
// model mock-1, without discovery or rate limits.
func mockProviders(mockURL string) map[string]any {
	return map[string]any{"mock": map[string]any{
		"kind": "openai", "base_url": mockURL + "/v1", "discovery_interval_seconds": 0,
		"models":     []map[string]any{{"id": "mock-1", "context": 32768, "price_in": 0.1, "price_out": 0.4}},
		"rate_limit": map[string]int{"requests_per_minute": 0, "tokens_per_minute": 0, "concurrency": 0}}}
}

// passthroughConfig writes the configuration of conclave in front of the mock, and returns its path.
func passthroughConfig(mockURL string) (string, error) {
	cfg, err := os.CreateTemp("", "conclave-passthrough-*.json")
	if err != nil {
		return "", err
	}
	err = json.NewEncoder(cfg).Encode(map[string]any{"providers": mockProviders(mockURL)})
	cfg.Close()
	if err != nil {
		os.Remove(cfg.Name())
		return "", err
	}
	return cfg.Name(), nil
}

// chatBody is the body of chat completion i: one of the tasks, asked of mock-1.
func chatBody(i int) []byte {
	raw, _ := json.Marshal(map[string]any{"model": "mock-1", "max_tokens": 1024, "stream": false,
		"messages": []map[string]string{{"role": "user", "content": tasks[i%len(tasks)]}}})
	return raw
}

// routedBody is the body of route request i: one of the tasks, asked of mock-1 alone.
func routedBody(i int) []byte {
	raw, _ := json.Marshal(map[string]any{"task": tasks[i%len(tasks)], "models": []string{"mock-1"}, "workers": 1, "min_responses": 1})
	return raw
}

// passthroughLevel runs conclave at a log level in front of the mock and measures a routed request,
// then the same model as a direct call on chat completions: the plain gateway path.
func passthroughLevel(conclave, cfg, level string, mockPid int, warmup, duration time.Duration) ([]result, error) {
	url, cmd, stop, err := start(func(addr string) *exec.Cmd {
		return exec.Command(conclave, "serve", "--config", cfg, "--listen", addr, "--log-level", level)
	})
	if err != nil {
		return nil, fmt.Errorf("conclave: %w", err)
	}
	defer stop()
	routed, err := measureAt("conclave ("+level+" logs) to the mock", url+"/route-thompson", routedBody, 1, warmup, duration, cmd.Process.Pid, mockPid)
	if err != nil {
		return nil, fmt.Errorf("conclave (%s logs): %w", level, err)
	}
	direct, err := measureAt("conclave direct call ("+level+" logs) to the mock", url+"/v1/chat/completions", chatBody, 1, warmup, duration,
		cmd.Process.Pid, mockPid)
	if err != nil {
		return nil, fmt.Errorf("conclave (%s logs): %w", level, err)
	}
	return []result{routed, direct}, nil
}

// printPassthrough prints the passthrough table against base, the mock called directly, and the target
// of every path through conclave.
func printPassthrough(results []result, base result) {
	fmt.Println("| path | req/s | p50 ms | p99 ms | added p50 µs | server CPU µs/req | mock CPU µs/req | server CPU vs mock's |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		added, server := "", ""
		if r.Server != base.Server {
			added = fmt.Sprintf("%.0f", (r.P50Ms-base.P50Ms)*1000)
			server = fmt.Sprintf("%.1f", r.CPUPerReqUs)
		}
		fmt.Printf("| %s | %.0f | %.3f | %.3f | %s | %s | %.1f | %s |\n", r.Server, r.RPS, r.P50Ms, r.P99Ms, added, server, r.UpstreamCPUPerReqUs,
			ratio(r, base))
	}
	for _, r := range results {
		if r.Server != base.Server {
			beyond := r.CPUPerReqUs - r.UpstreamCPUPerReqUs
			fmt.Printf("Target (%s): %.1f µs of server CPU per request beyond the mock's own (target ≤ %d: %s)\n", r.Server, beyond,
				targetPassthrough, met(beyond <= targetPassthrough))
		}
	}
}

func ratio(r, base result) string {
	if r.Server == base.Server || base.CPUPerReqUs == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f×", r.CPUPerReqUs/base.CPUPerReqUs)
}

// benchDatabase makes a database of its own on the server of base, migrated by the conclave binary,
// and returns its URL and how to drop it.
func benchDatabase(conclave, base string) (string, func(), error) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("conclave_bench_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return "", nil, err
	}
	drop := func() {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(ctx)
	}
	u, err := neturl.Parse(base)
	if err != nil {
		drop()
		return "", nil, err
	}
	u.Path = "/" + name
	migrate := exec.Command(conclave, "migrate", "up")
	migrate.Env = append(os.Environ(), "DATABASE_URL="+u.String())
	if out, err := migrate.CombinedOutput(); err != nil {
		drop()
		return "", nil, fmt.Errorf("migrate: %v: %s", err, out)
	}
	return u.String(), drop, nil
}
