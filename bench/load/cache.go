package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cacheRun measures hits of the exact answer cache: the same direct call asked again and again with a
// time to live, answered from the cache after the first, in memory (the embedded default) and in
// Redis; against the same call asking for no cache, answered by the simulated model each time. Server
// CPU per request, and the round trip, which bounds the server's time of a hit.
func cacheRun(conclave, redisURL string, warmup, duration time.Duration, out string) error {
	body := func(cache string) func(int) []byte {
		return func(int) []byte {
			return []byte(`{"model":"llama3.1-8b","cache":` + cache + `,"messages":[{"role":"user","content":"Which gas makes up most of Earth's atmosphere?"}]}`)
		}
	}
	cfg, err := benchConfig() // no faults and no limits: the baseline's calls all answer
	if err != nil {
		return err
	}
	defer os.Remove(cfg)
	var results []result
	for _, store := range []struct{ name, redis string }{{"memory", ""}, {"redis", redisURL}} {
		url, cmd, stop, err := start(func(addr string) *exec.Cmd {
			c := exec.Command(conclave, "serve", "--config", cfg, "--listen", addr, "--log-level", "warn")
			c.Env = append(os.Environ(), "REDIS_URL="+store.redis)
			return c
		})
		if err != nil {
			return fmt.Errorf("conclave (%s): %w", store.name, err)
		}
		for _, row := range []struct{ name, cache string }{{"hit (" + store.name + ")", `{"ttl":600}`}, {"no cache (" + store.name + ")", `{"no-cache":true}`}} {
			for _, c := range []int{1, 16} {
				r, err := measureAt(row.name, url+"/v1/chat/completions", body(row.cache), c, warmup, duration, cmd.Process.Pid)
				if err != nil {
					stop()
					return fmt.Errorf("%s: %w", row.name, err)
				}
				results = append(results, r)
			}
		}
		stop()
	}
	fmt.Println("| path | connections | req/s | p50 ms | p99 ms | server CPU µs/req |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Printf("| %s | %d | %.0f | %.3f | %.3f | %.1f |\n", r.Server, r.Concurrency, r.RPS, r.P50Ms, r.P99Ms, r.CPUPerReqUs)
	}
	for _, r := range results {
		if strings.HasPrefix(r.Server, "hit") && r.Concurrency == 1 {
			fmt.Printf("Target (%s): a hit's round trip p99 %.3f ms, so its server time is less (target ≤ 2 ms: %s)\n", r.Server, r.P99Ms, met(r.P99Ms <= 2))
		}
	}
	raw, _ := json.MarshalIndent(results, "", "  ")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(out, ".json")+"-cache.json", raw, 0o644)
}
