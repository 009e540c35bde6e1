package providers

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/resilience"
)

// ReplayProvider is the provider name of recorded answers (catalog.ReplayProvider).
const ReplayProvider = catalog.ReplayProvider

// ReplayRecord is one prompt of a replay dataset with every recorded model's answer to it.
type ReplayRecord struct {
	ID       string                    `json:"id"`
	Dataset  string                    `json:"dataset"`
	Category string                    `json:"category"`
	Kind     string                    `json:"kind"`
	Prompt   string                    `json:"prompt"`
	Gold     *string                   `json:"gold"`
	Answers  map[string]ReplayResponse `json:"responses"`
}

// ReplayResponse is one model's recorded answer.
type ReplayResponse struct {
	Answer     *string  `json:"answer"`
	Correct    *bool    `json:"correct"`
	Preference *float64 `json:"preference"`
	Text       string   `json:"text"`
}

// Reply is what the replayed model says: its extracted answer, or for open tasks its text.
func (r ReplayResponse) Reply() string {
	if r.Answer != nil {
		return *r.Answer
	}
	return r.Text
}

// ReplayData is a loaded set of replay datasets, indexed by prompt.
type ReplayData struct {
	Records []*ReplayRecord
	byKey   map[string]*ReplayRecord
	// Merged counts records dropped because an earlier record had the same prompt (and so the same
	// replayed answers).
	Merged int
}

// LoadReplay reads <dir>/<dataset>.dev.jsonl.gz for each dataset (every such file when datasets is
// empty). Records repeating an earlier prompt are merged into it, since a replay is keyed by prompt.
func LoadReplay(dir string, datasets []string) (*ReplayData, error) {
	if len(datasets) == 0 {
		files, err := filepath.Glob(filepath.Join(dir, "*.dev.jsonl.gz"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			datasets = append(datasets, strings.TrimSuffix(filepath.Base(f), ".dev.jsonl.gz"))
		}
		sort.Strings(datasets)
	}
	if len(datasets) == 0 {
		return nil, fmt.Errorf("no replay files in %s", dir)
	}
	d := &ReplayData{byKey: map[string]*ReplayRecord{}}
	for _, name := range datasets {
		path := filepath.Join(dir, name+".dev.jsonl.gz")
		if err := d.loadFile(path); err != nil {
			return nil, fmt.Errorf("replay %s: %w", path, err)
		}
	}
	return d, nil
}

func (d *ReplayData) loadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	return d.Read(gz)
}

// Read adds the JSON Lines records of r.
func (d *ReplayData) Read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		rec := &ReplayRecord{}
		if err := json.Unmarshal(sc.Bytes(), rec); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if rec.Prompt == "" || len(rec.Answers) == 0 {
			return fmt.Errorf("line %d: record %q has no prompt or no responses", line, rec.ID)
		}
		if !d.Add(rec) {
			d.Merged++
		}
	}
	return sc.Err()
}

// Add adds a record unless its prompt is already known; it reports whether it was added.
func (d *ReplayData) Add(rec *ReplayRecord) bool {
	if d.byKey == nil {
		d.byKey = map[string]*ReplayRecord{}
	}
	if _, dup := d.byKey[rec.Prompt]; dup {
		return false
	}
	d.byKey[rec.Prompt] = rec
	d.Records = append(d.Records, rec)
	return true
}

// Lookup returns the record of a prompt.
func (d *ReplayData) Lookup(prompt string) (*ReplayRecord, bool) {
	r, ok := d.byKey[prompt]
	return r, ok
}

// Models returns every model that answers at least one prompt, sorted.
func (d *ReplayData) Models() []string {
	seen := map[string]bool{}
	for _, r := range d.Records {
		for m := range r.Answers {
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Catalog describes the replayed models for selection: all under the replay provider, alike in
// everything but their name and the family it names (catalog.FamilyOf), so that only what they answer
// tells them apart.
func (d *ReplayData) Catalog() (*catalog.Catalog, error) {
	var models []catalog.Model
	for _, m := range d.Models() {
		models = append(models, catalog.Model{ID: m, Provider: ReplayProvider, Family: catalog.FamilyOf(m), ContextWindow: 1 << 20,
			MaxOutputTokens: 4096, Capabilities: []string{"chat"}, Tier: 2})
	}
	return catalog.New(models)
}

// Latency is a model's simulated response time: a fixed time, or a log-normal distribution around
// Median with spread Sigma (the standard deviation of its logarithm).
type Latency struct {
	Median time.Duration `json:"median"`
	Sigma  float64       `json:"sigma"`
}

// Replay answers each (model, prompt) with that model's recorded answer. Unknown models and prompts the
// model has no record for are errors.
type Replay struct {
	data *ReplayData
	seed uint64
	// Latency applies to every model without its own entry in PerModel.
	Latency  Latency
	PerModel map[string]Latency
}

// NewReplay serves data.
func NewReplay(data *ReplayData, seed uint64) *Replay {
	return &Replay{data: data, seed: seed, PerModel: map[string]Latency{}}
}

// ErrNoRecord is the cause of a replay miss.
var ErrNoRecord = errors.New("no recorded answer")

// Complete implements Backend.
func (r *Replay) Complete(ctx context.Context, call Call) (Reply, error) {
	if call.Kind == KindArbiter {
		// Recorded models never judged anything: the arbiter falls back to the local one.
		return Reply{}, &resilience.Error{Kind: resilience.MalformedRequest, Provider: call.Provider, Model: call.Model,
			Err: fmt.Errorf("%w: replayed models do not judge", ErrNoRecord)}
	}
	rec, ok := r.data.Lookup(call.Task)
	if !ok {
		return Reply{}, &resilience.Error{Kind: resilience.MalformedRequest, Provider: call.Provider, Model: call.Model,
			Err: fmt.Errorf("%w: unknown prompt", ErrNoRecord)}
	}
	resp, ok := rec.Answers[call.Model]
	if !ok {
		return Reply{}, &resilience.Error{Kind: resilience.ModelNotFound, Provider: call.Provider, Model: call.Model, Status: 404,
			Err: fmt.Errorf("%w: model has no answer to %s", ErrNoRecord, rec.ID)}
	}
	if err := wait(ctx, r.latency(call)); err != nil {
		return Reply{}, err
	}
	text := resp.Reply()
	return Reply{Text: text, Usage: Usage{InputTokens: (len(call.Task) + 3) / 4, OutputTokens: (len(text) + 3) / 4}}, nil
}

func (r *Replay) latency(call Call) time.Duration {
	l, ok := r.PerModel[call.Model]
	if !ok {
		l = r.Latency
	}
	if l.Median <= 0 {
		return 0
	}
	if l.Sigma <= 0 {
		return l.Median
	}
	h := fnv.New64a()
	io.WriteString(h, call.Model)
	io.WriteString(h, call.Task)
	rng := rand.New(rand.NewPCG(h.Sum64(), r.seed^uint64(call.Attempt)))
	return time.Duration(float64(l.Median) * math.Exp(l.Sigma*rng.NormFloat64()))
}
