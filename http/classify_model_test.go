package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"go.uber.org/zap"
)

// classifyingPrompt starts what a classifying model is asked (classify.ModelPrompt).
var classifyingPrompt = classify.ModelPrompt("")[:40]

// classifyingCalls counts the calls a provider was asked to classify a task in.
func classifyingCalls(s *providertest.Server) int {
	n := 0
	for _, r := range s.Requests() {
		if strings.Contains(string(r.Body), classifyingPrompt) {
			n++
		}
	}
	return n
}

// unsureTasks are tasks of no language, for the local classifier to be unsure of; which of them it is
// unsure of moves with its weights, so the test takes the first that fit.
var unsureTasks = []string{"zxqv blorptang fimble", "xq zzv kkw plm", "qqq wwwv zzzk", "vrk plonq zed mib", "jj kx wub trell"}

// unsureTask returns the first of unsureTasks after skip that c is unsure of and does not call
// translation (the category the classifying model answers), and its place.
func unsureTask(t *testing.T, c *classify.Classifier, skip int) (string, classify.Result, int) {
	t.Helper()
	for i := skip; i < len(unsureTasks); i++ {
		if r := c.Classify(unsureTasks[i]); r.LowConfidence && r.Best != classify.Translation {
			return unsureTasks[i], r, i
		}
	}
	t.Fatalf("the test needs a task the classifier is unsure of and does not call translation: none of %q after %d", unsureTasks, skip)
	return "", classify.Result{}, 0
}

// A task the local classifier is unsure of goes to classify.model once; its category is the model's,
// the record says so, and the same task again is answered from the cache. A task the classifier is
// sure of asks no model; a model slower than the budget leaves the local answer.
func TestAClassifyingModelDecidesWhatTheClassifierCannot(t *testing.T) {
	u := newUpstreams(t, func(c *config.Config) {
		c.Classify = config.Classify{Model: "qwen-a", BudgetSeconds: 0.5, CacheSize: 100}
	})
	c, err := classify.New(classify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	unsure, _, at := unsureTask(t, c, 0)
	for i := range 2 {
		status, resp, bad := u.route(map[string]any{"task": unsure, "workers": 1, "min_responses": 1})
		if status != 200 {
			t.Fatalf("request %d: %d %+v", i, status, bad)
		}
		if resp.Category != "translation" {
			t.Fatalf("request %d: category %q, want the model's translation", i, resp.Category)
		}
		rec := u.record(resp.RequestID)
		cls, _ := rec["classification"].(map[string]any)
		if cls["classified_by"] != "qwen-a" || cls["category"] != "translation" {
			t.Fatalf("request %d: recorded classification %v", i, cls)
		}
		if n := classifyingCalls(u.local); n != 1 {
			t.Fatalf("request %d: the model was asked %d times, want once (then the cache)", i, n)
		}
	}

	sure := "Translate into French: the meeting moves to Thursday at ten."
	if r := c.Classify(sure); r.LowConfidence {
		t.Fatalf("the test needs a task the classifier is sure of: %+v", r)
	}
	if status, resp, bad := u.route(map[string]any{"task": sure, "workers": 1, "min_responses": 1}); status != 200 || resp.Category != "translation" {
		t.Fatalf("a clear task: %d %q %+v", status, resp.Category, bad)
	}
	if n := classifyingCalls(u.local); n != 1 {
		t.Fatalf("a clear task asked the classifying model (%d calls)", n)
	}

	slow, local, _ := unsureTask(t, c, at+1) // another task: the first is in the cache
	u.local.Queue(providertest.Response{Delay: 3 * time.Second})
	status, resp, bad := u.route(map[string]any{"task": slow, "workers": 1, "min_responses": 1})
	if status != 200 || resp.Category != string(local.Category) {
		t.Fatalf("past the budget: %d, category %q, want the local %q; %+v", status, resp.Category, local.Category, bad)
	}
	if cls, _ := u.record(resp.RequestID)["classification"].(map[string]any); cls["classified_by"] != nil && cls["classified_by"] != "" {
		t.Fatalf("past the budget the record names a classifying model: %v", cls)
	}
	if u.logs.FilterField(zap.String("event", "classify_model_failed")).Len() == 0 {
		t.Fatal("no classify_model_failed line for the model past its budget")
	}
}
