package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/messages"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestTopByCategory(t *testing.T) {
	arms := []Arm{
		{Model: "a", Category: "x", Mean: 0.2}, {Model: "b", Category: "x", Mean: 0.9}, {Model: "c", Category: "x", Mean: 0.5},
		{Model: "d", Category: "y", Mean: 0.7}, {Model: "e", Category: "y", Mean: 0.7},
	}
	tests := []struct {
		desc string
		n    int
		want string
	}{
		{"the best of each category, best first", 2, "x/b x/c y/d y/e"},
		{"ties go to the model id", 1, "x/b y/d"},
		{"fewer arms than n keeps them all", 5, "x/b x/c x/a y/d y/e"},
	}
	for _, tt := range tests {
		var got []string
		for _, a := range TopByCategory(arms, tt.n) {
			got = append(got, a.Category+"/"+a.Model)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%s: %v, want %s", tt.desc, got, tt.want)
		}
	}
}

// A provider listing more models than MaxModels cannot grow the series without bound.
func TestModelLabelsAreBounded(t *testing.T) {
	m := New(Source{})
	for i := range MaxModels + 100 {
		m.Execution(&messages.Execution{StatusCode: 200, Results: []*messages.WorkerResult{{Model: fmt.Sprintf("m%d", i), Provider: "p", Status: "ok"}}})
	}
	if n := testutil.CollectAndCount(m.calls); n != MaxModels+1 {
		t.Fatalf("%d call series, want %d models and %q", n, MaxModels, Other)
	}
	if v := testutil.ToFloat64(m.calls.WithLabelValues("p", Other, "ok", "")); v != 100 {
		t.Fatalf("%v calls counted as %q, want 100", v, Other)
	}
	if v := testutil.ToFloat64(m.quorum.WithLabelValues("complete")); v != MaxModels+100 {
		t.Fatalf("complete quorums %v", v)
	}
}

func TestANilMetricsRecordsNothing(t *testing.T) {
	var m *Metrics
	m.Request("/x", 200, "general", 0)
	m.Overhead(0)
	m.Execution(&messages.Execution{})
	m.BreakerTransition("p", "open")
	m.ActorMessageDropped("provider", "no_reply_to")
}

func TestDroppedMessagesAndStoppedActorsAreExported(t *testing.T) {
	stopped := map[string]int{}
	m := New(Source{Stopped: func() map[string]int { return stopped }})
	m.ActorMessageDropped("provider", "no_reply_to")
	m.ActorMessageDropped("provider", "no_reply_to")
	if v := testutil.ToFloat64(m.dropped.WithLabelValues("provider", "no_reply_to")); v != 2 {
		t.Fatalf("dropped %v", v)
	}
	tests := []struct {
		desc    string
		stopped map[string]int
		want    string
	}{
		{"providers and workers are at zero before any stop", map[string]int{}, "provider=0 worker=0"},
		{"a stopped arm adds its kind", map[string]int{"arm": 2}, "arm=2 provider=0 worker=0"},
		{"a stopped provider counts", map[string]int{"provider": 1}, "provider=1 worker=0"},
	}
	for _, tt := range tests {
		stopped = tt.stopped
		families, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range families {
			if f.GetName() == "conclave_actors_stopped" {
				for _, s := range f.GetMetric() {
					got = append(got, fmt.Sprintf("%s=%v", s.GetLabel()[0].GetValue(), s.GetGauge().GetValue()))
				}
			}
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%s: %v, want %s", tt.desc, got, tt.want)
		}
	}
}
