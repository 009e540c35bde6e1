package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/core/admission"
)

// overload drives the embedded default as it ships (no configuration: the simulated provider, its
// faults and the default rate limits) with concurrency connections for d, and reports the answers by
// status and their latency. Far more requests come than the providers' limits allow, so most must be
// refused: the run fails when any answer, refusal or not, took longer than the queue bound plus a
// second. logs, when set, keeps the server's log (info) there.
func overload(conclave string, d time.Duration, concurrency int, logs string) error {
	out := io.Discard
	if logs != "" {
		f, err := os.Create(logs)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	url, _, stop, err := start(func(addr string) *exec.Cmd {
		cmd := exec.Command(conclave, "serve", "--listen", addr)
		cmd.Stdout, cmd.Stderr = out, out
		return cmd
	})
	if err != nil {
		return err
	}
	defer stop()
	// The client waits longer than any request may take, so that a held request shows as itself.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}, Timeout: 10 * time.Minute}
	began := time.Now()
	answers := overloadLoad(client, url, began.Add(d), concurrency)
	elapsed := time.Since(began)
	if len(answers) == 0 {
		return fmt.Errorf("no answer in %s", d)
	}
	fmt.Printf("overload: %d answers at concurrency %d in %s (sent for %s)\n\n", len(answers), concurrency, elapsed.Round(time.Millisecond), d)
	longest := printLatencies(answers)
	bound := admission.DefaultMaxQueue + time.Second // max_queue_seconds as conclave ships it, plus a second
	if longest > bound {
		return fmt.Errorf("overload: the longest answer took %s, beyond max_queue_seconds + 1 s (%s)", longest.Round(time.Millisecond), bound)
	}
	fmt.Printf("overload: pass, the longest answer took %s (bound: max_queue_seconds + 1 s = %s)\n", longest.Round(time.Millisecond), bound)
	return nil
}

// timedAnswer is an answer's key (see answerKey) and how long it took.
type timedAnswer struct {
	key     string
	latency time.Duration
}

// overloadLoad sends requests to url over concurrency connections until end, each connection sending
// its next request when the last is answered, and returns every answer.
func overloadLoad(client *http.Client, url string, end time.Time, concurrency int) []timedAnswer {
	var mu sync.Mutex
	var answers []timedAnswer
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			var mine []timedAnswer
			for i := w; time.Now().Before(end); i += concurrency {
				body, _ := json.Marshal(map[string]string{"task": tasks[i%len(tasks)]})
				t := time.Now()
				resp, err := client.Post(url+"/route-thompson", "application/json", bytes.NewReader(body))
				key := answerKey(resp, err)
				mine = append(mine, timedAnswer{key, time.Since(t)})
			}
			mu.Lock()
			answers = append(answers, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return answers
}

// printLatencies prints the answers' latencies by key and over all of them, and returns the longest.
func printLatencies(answers []timedAnswer) time.Duration {
	lat := make([]time.Duration, len(answers))
	byKey := map[string][]time.Duration{}
	for i, a := range answers {
		lat[i] = a.latency
		byKey[a.key] = append(byKey[a.key], a.latency)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Println("| answer | requests | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|")
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l := byKey[k]
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		fmt.Printf("| %s | %d | %.0f | %.0f | %.0f |\n", k, len(l), ms(quantile(l, 0.5)), ms(quantile(l, 0.99)), ms(l[len(l)-1]))
	}
	longest := lat[len(lat)-1]
	fmt.Printf("| all | %d | %.0f | %.0f | %.0f |\n\n", len(lat), ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(longest))
	return longest
}

// quantile is the q-quantile of sorted latencies.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*q))]
}
