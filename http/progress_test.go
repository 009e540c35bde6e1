package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/platform/config"
)

type sseEvent struct {
	name string
	data map[string]any
}

// progressEvents posts a route request asking for events and reads them all.
func progressEvents(t *testing.T, tb *testbed, body map[string]any) (*http.Response, []sseEvent) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/route-thompson", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("event %s: %v", cur.name, err)
			}
		case line == "" && cur.name != "":
			events = append(events, cur)
			cur = sseEvent{}
		}
	}
	return resp, events
}

func TestRouteStreamsProgress(t *testing.T) {
	tb := newTestbed(t, nil)
	resp, events := progressEvents(t, tb, map[string]any{"task": mcq, "workers": 3, "min_responses": 2})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var names []string
	count := map[string]int{}
	for _, e := range events {
		names = append(names, e.name)
		count[e.name]++
	}
	if len(events) < 2 || names[0] != "classified" || names[1] != "selected" || names[len(names)-1] != "answer" || names[len(names)-2] != "consensus" {
		t.Fatalf("events in order %v", names)
	}
	if count["dispatched"] != 3 || count["reply"] != 3 {
		t.Fatalf("events %v", count)
	}
	answer := events[len(events)-1].data
	id, _ := answer["request_id"].(string)
	if rec := tb.record(id); rec["answer"] != answer["answer"] || answer["answer"] == "" {
		t.Fatalf("answer %v, record %v", answer["answer"], rec["answer"])
	}
	for _, e := range events[:len(events)-1] {
		if e.data["request_id"] != id {
			t.Fatalf("%s event of another request: %v", e.name, e.data)
		}
	}
	if models, _ := events[1].data["models"].([]any); len(models) != 3 {
		t.Fatalf("selected %v", events[1].data)
	}
	for _, e := range events {
		if e.name == "reply" && (e.data["model"] == nil || e.data["status"] != "ok" || e.data["worker"] == nil) {
			t.Fatalf("reply %v", e.data)
		}
	}
}

func TestRouteProgressEndsWithTheError(t *testing.T) {
	tb := newTestbed(t, func(c *config.Config) { c.Retry = config.Retry{Scale: 0.001, Rounds: 1} }, quickBlueprints(t, 0.2))
	for _, p := range allProviders {
		tb.engine.Sim.SetFault(p, providers.Fault{TimeoutRate: 1})
	}
	_, events := progressEvents(t, tb, map[string]any{"task": mcq, "category": "quick"})
	last := events[len(events)-1]
	if last.name != "error" || last.data["status"] != float64(http.StatusServiceUnavailable) {
		t.Fatalf("the stream ended with %s %v", last.name, last.data)
	}
	retried := false
	for _, e := range events {
		retried = retried || e.name == "retry"
	}
	if !retried {
		t.Fatalf("no retry event among %d events", len(events))
	}
}
