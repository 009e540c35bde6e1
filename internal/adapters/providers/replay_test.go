package providers

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/testenv"
)

const replayFixture = `{"id":"quiz/1","dataset":"quiz","category":"quiz","kind":"choice","prompt":"Pick one\nA) x\nB) y","gold":"B","responses":{"m1":{"answer":"B","correct":true},"m2":{"answer":"A","correct":false},"m3":{"answer":null,"correct":false}}}
{"id":"quiz/2","dataset":"quiz","category":"quiz","kind":"number","prompt":"2+2?","gold":"4","responses":{"m1":{"answer":"4","correct":true}}}
{"id":"quiz/3","dataset":"quiz","category":"quiz","kind":"number","prompt":"2+2?","gold":"4","responses":{"m1":{"answer":"5","correct":false}}}
{"id":"chat/1","dataset":"chat","category":"chat","kind":"open","prompt":"Say hi","gold":null,"responses":{"m4":{"answer":null,"correct":null,"text":"Hello there!"}}}
`

func fixture(t *testing.T) *ReplayData {
	t.Helper()
	d := &ReplayData{}
	if err := d.Read(strings.NewReader(replayFixture)); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReplayAnswersWhatWasRecorded(t *testing.T) {
	d := fixture(t)
	if len(d.Records) != 3 || d.Merged != 1 {
		t.Fatalf("%d records, %d merged; want 3 and the repeated prompt merged", len(d.Records), d.Merged)
	}
	r := NewReplay(d, 1)
	tests := []struct {
		desc  string
		call  Call
		want  string
		kind  resilience.Kind
		nores bool
	}{
		{desc: "recorded answer", call: Call{Kind: KindAnswer, Model: "m1", Task: "Pick one\nA) x\nB) y"}, want: "B"},
		{desc: "a repeated prompt replays the first record", call: Call{Kind: KindAnswer, Model: "m1", Task: "2+2?"}, want: "4"},
		{desc: "no extracted answer is an empty reply", call: Call{Kind: KindAnswer, Model: "m3", Task: "Pick one\nA) x\nB) y"}, want: ""},
		{desc: "open tasks replay the text", call: Call{Kind: KindAnswer, Model: "m4", Task: "Say hi"}, want: "Hello there!"},
		{desc: "a model without a record for the prompt", call: Call{Kind: KindAnswer, Model: "m2", Task: "2+2?"}, kind: resilience.ModelNotFound},
		{desc: "an unknown prompt", call: Call{Kind: KindAnswer, Model: "m1", Task: "never asked"}, kind: resilience.MalformedRequest},
		{desc: "replayed models do not judge", call: Call{Kind: KindArbiter, Model: "m1", Task: "2+2?", Candidates: []string{"4"}}, kind: resilience.MalformedRequest},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			reply, err := r.Complete(context.Background(), tt.call)
			if tt.kind != "" {
				if resilience.KindOf(err) != tt.kind || !errors.Is(err, ErrNoRecord) {
					t.Fatalf("err %v, want kind %s", err, tt.kind)
				}
				return
			}
			if err != nil || reply.Text != tt.want {
				t.Fatalf("reply %q, %v; want %q", reply.Text, err, tt.want)
			}
		})
	}
	cat, err := d.Catalog()
	if err != nil || cat.Len() != 4 {
		t.Fatalf("catalog: %v", err)
	}
	if m, _ := cat.Get("m1"); m.Provider != ReplayProvider {
		t.Fatalf("model %+v", m)
	}
}

func TestReplayLatency(t *testing.T) {
	r := NewReplay(fixture(t), 1)
	r.Latency = Latency{Median: time.Hour}
	r.PerModel["m2"] = Latency{} // answers at once
	call := Call{Kind: KindAnswer, Model: "m1", Task: "Pick one\nA) x\nB) y"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.Complete(ctx, call); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a slow model answered before its latency: %v", err)
	}
	call.Model = "m2"
	if reply, err := r.Complete(context.Background(), call); err != nil || reply.Text != "A" {
		t.Fatalf("per-model latency ignored: %v", err)
	}
	// A distribution is deterministic per (model, prompt, attempt) and centred on the median.
	r.Latency = Latency{Median: 100 * time.Millisecond, Sigma: 0.5}
	a, b := r.latency(Call{Model: "m1", Task: "p"}), r.latency(Call{Model: "m1", Task: "p"})
	if a != b || a <= 0 {
		t.Fatalf("latencies %v and %v", a, b)
	}
}

func TestLoadReplayFiles(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	gz.Write([]byte(replayFixture))
	gz.Close()
	if err := os.WriteFile(filepath.Join(dir, "quiz.dev.jsonl.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := LoadReplay(dir, nil)
	if err != nil || len(d.Records) != 3 {
		t.Fatalf("load: %v", err)
	}
	if _, err := LoadReplay(dir, []string{"missing"}); err == nil {
		t.Fatal("a missing dataset loaded")
	}
}

// TestSharedReplayData checks the loader against the real recorded data when it is beside the project.
func TestSharedReplayData(t *testing.T) {
	dir := testenv.SharedDir(t, "data", "replay")
	d, err := LoadReplay(dir, []string{"gsm", "crux"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Records) != 666+386 || len(d.Models()) < 41 {
		t.Fatalf("%d records, %d models", len(d.Records), len(d.Models()))
	}
	r := NewReplay(d, 1)
	rec := d.Records[0]
	for m, resp := range rec.Answers {
		reply, err := r.Complete(context.Background(), Call{Kind: KindAnswer, Model: m, Task: rec.Prompt})
		if err != nil || reply.Text != resp.Reply() {
			t.Fatalf("%s: %q %v", m, reply.Text, err)
		}
	}
}
