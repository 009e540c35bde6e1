package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/testenv/redistest"
	"github.com/redis/go-redis/v9"
)

// TestHelperProcess is a controller of its own when the test binary runs itself as a child: it takes
// what its environment says, for as long as it says, and prints the server time of each admission.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("REDISLIMIT_CHILD")
	if mode == "" {
		return
	}
	o, _ := redis.ParseURL(redistest.URL())
	c := redis.NewClient(o)
	defer c.Close()
	prefix := os.Getenv("REDISLIMIT_PREFIX")
	ctx := context.Background()
	switch mode {
	case "reserve":
		r := New(c, "groq", ratelimit.Limits{RequestsPerMinute: 20}, Options{Prefix: prefix, Window: 500 * time.Millisecond})
		until := time.Now().Add(2 * time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for g := range 8 {
			wg.Go(func() {
				for i := 0; time.Now().Before(until); i++ {
					d, err := r.Reserve(ctx, fmt.Sprintf("%d-%d-%d", os.Getpid(), g, i), 1)
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						return
					}
					if d.Allowed {
						mu.Lock()
						fmt.Println(d.At.UnixMicro())
						mu.Unlock()
					} else {
						time.Sleep(min(d.RetryAfter, 20*time.Millisecond))
					}
				}
			})
		}
		wg.Wait()
	case "hold":
		r := New(c, "groq", ratelimit.Limits{Concurrency: 5}, Options{Prefix: prefix, Lease: 700 * time.Millisecond})
		for i := range 3 {
			r.Reserve(ctx, fmt.Sprint("held-", i), 1)
		}
		fmt.Println("held")
		time.Sleep(time.Minute) // until killed
	}
	os.Exit(0)
}

func child(t *testing.T, mode, prefix string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "REDISLIMIT_CHILD="+mode, "REDISLIMIT_PREFIX="+prefix)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestTwoProcessesNeverAdmitMoreThanTheLimit(t *testing.T) {
	_, prefix := redistest.New(t)
	var all []time.Time
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 {
		cmd := child(t, "reserve", prefix)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				us, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
				if err != nil {
					continue
				}
				mu.Lock()
				all = append(all, time.UnixMicro(us))
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := CheckWindows(all, 20, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(all) < 60 {
		t.Fatalf("only %d admissions by two processes in 2 s", len(all))
	}
}

func TestAKilledControllersSlotsExpire(t *testing.T) {
	c, prefix := redistest.New(t)
	cmd := child(t, "hold", prefix)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "held" {
		t.Fatalf("the child said %q", sc.Text())
	}
	cmd.Process.Kill()
	cmd.Wait()
	r := New(c, "groq", ratelimit.Limits{Concurrency: 5}, Options{Prefix: prefix, Lease: 700 * time.Millisecond})
	if u, _ := r.Usage(context.Background()); u.InFlight != 3 {
		t.Fatalf("%d slots held by the killed controller, want 3", u.InFlight)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, _ := r.Usage(context.Background())
		if u.InFlight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still held long after their lease", u.InFlight)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
