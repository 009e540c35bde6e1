package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sample is the server process's memory and goroutines at one moment of an endurance run. HeapGoalMiB
// is the heap size at which the next collection starts: a fixed multiple (GOGC) of the heap the last one
// found live, so it shows live growth without the collector's headroom that RSS keeps.
type sample struct {
	At          time.Duration
	Requests    int64
	RSSMiB      float64
	HeapGoalMiB float64
	Goroutines  int
}

// endurance runs conclave for d under steady load through the whole pipeline (limits raised, the
// simulated provider's faults on at their default rates, a millisecond-scale latency, info logs) and
// samples its resident memory and goroutines, so that growth after the warm-up shows.
func endurance(conclave string, d time.Duration, concurrency int) error {
	cfg, err := writeConfig(map[string]any{
		"sim":          map[string]any{"seed": 1, "latency_scale": 0.002},
		"rate_limits":  unlimited(),
		"worker_slots": 64,
	})
	if err != nil {
		return err
	}
	defer os.Remove(cfg)
	url, cmd, stop, err := start(func(addr string) *exec.Cmd {
		return exec.Command(conclave, "serve", "--config", cfg, "--listen", addr, "--log-level", "info")
	})
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}, Timeout: time.Minute}
	var sent atomic.Int64
	var mu sync.Mutex
	tally := map[string]int{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for i := w; ; i += concurrency {
				select {
				case <-done:
					return
				default:
				}
				body, _ := json.Marshal(map[string]string{"task": tasks[i%len(tasks)]})
				key := "transport error"
				if resp, err := client.Post(url+"/route-thompson", "application/json", bytes.NewReader(body)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					key = strconv.Itoa(resp.StatusCode)
				}
				sent.Add(1)
				mu.Lock()
				tally[key]++
				mu.Unlock()
			}
		})
	}
	every := max(d/30, 10*time.Second)
	began := time.Now()
	var samples []sample
	for {
		s, err := sampleOf(cmd.Process.Pid, url)
		if err != nil {
			close(done)
			wg.Wait()
			return err
		}
		s.At, s.Requests = time.Since(began).Round(time.Second), sent.Load()
		samples = append(samples, s)
		fmt.Fprintf(os.Stderr, "endurance %8s  %9d requests  RSS %7.1f MiB  heap goal %7.1f MiB  %5d goroutines\n",
			s.At, s.Requests, s.RSSMiB, s.HeapGoalMiB, s.Goroutines)
		if time.Since(began) >= d {
			break
		}
		time.Sleep(min(every, d-time.Since(began)))
	}
	close(done)
	wg.Wait()
	reportEndurance(samples, tally, concurrency)
	return nil
}

// reportEndurance prints the samples and the growth after the warm-up (the first fifth of the run).
func reportEndurance(samples []sample, tally map[string]int, concurrency int) {
	last := samples[len(samples)-1]
	fmt.Printf("%d requests at concurrency %d in %s (%.0f req/s)\n\n", last.Requests, concurrency, last.At, float64(last.Requests)/last.At.Seconds())
	printTally(tally)
	fmt.Println("\n| time | requests | RSS MiB | heap goal MiB | goroutines |\n|---:|---:|---:|---:|---:|")
	for _, s := range samples {
		fmt.Printf("| %s | %d | %.1f | %.1f | %d |\n", s.At, s.Requests, s.RSSMiB, s.HeapGoalMiB, s.Goroutines)
	}
	warm := samples[len(samples)/5]
	var maxRSS, maxGoal float64
	maxG := 0
	for _, s := range samples[len(samples)/5:] {
		maxRSS, maxGoal, maxG = max(maxRSS, s.RSSMiB), max(maxGoal, s.HeapGoalMiB), max(maxG, s.Goroutines)
	}
	growth := func(from, to float64) float64 { return 100 * (to - from) / from }
	fmt.Printf("\nafter the warm-up (from %s): RSS %.1f MiB then at most %.1f and %.1f at the end (%+.1f %%); "+
		"heap goal %.1f MiB then at most %.1f and %.1f at the end (%+.1f %%); goroutines %d then at most %d and %d at the end\n",
		warm.At, warm.RSSMiB, maxRSS, last.RSSMiB, growth(warm.RSSMiB, last.RSSMiB),
		warm.HeapGoalMiB, maxGoal, last.HeapGoalMiB, growth(warm.HeapGoalMiB, last.HeapGoalMiB), warm.Goroutines, maxG, last.Goroutines)
}

// sampleOf reads a process's resident memory from /proc, and its heap goal and goroutines from its /metrics.
func sampleOf(pid int, url string) (sample, error) {
	var s sample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read the server's status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			s.RSSMiB = kb / 1024
		}
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return s, fmt.Errorf("read the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			s.Goroutines, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
		if rest, ok := strings.CutPrefix(sc.Text(), "go_memstats_next_gc_bytes "); ok {
			b, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			s.HeapGoalMiB = b / (1 << 20)
		}
	}
	return s, sc.Err()
}
