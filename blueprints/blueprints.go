// Package blueprints owns execution blueprints: how many workers answer a category of task, under which
// deadline, merged by which consensus strategy, with how many answers required. The 22 blueprints ship
// embedded in the binary; a directory named by configuration may override or extend them.
package blueprints

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/validation"
	"go.uber.org/zap"
)

//go:embed *.json
var embedded embed.FS

// Strategy names a consensus strategy.
type Strategy string

// The consensus strategies a blueprint may name.
const (
	Majority Strategy = "majority"
	Weighted Strategy = "weighted"
	Rotating Strategy = "rotating"
	Pairwise Strategy = "pairwise"
)

// Strategies lists every valid strategy.
var Strategies = []Strategy{Majority, Weighted, Rotating, Pairwise}

// Valid reports whether s is a known strategy.
func (s Strategy) Valid() bool {
	switch s {
	case Majority, Weighted, Rotating, Pairwise:
		return true
	}
	return false
}

// Sentinel errors.
var (
	// ErrUnknown is returned for a blueprint name that is not in the set.
	ErrUnknown = errors.New("unknown blueprint")
	// ErrDirUnavailable is returned when the configured directory cannot be read.
	ErrDirUnavailable = errors.New("blueprint directory unavailable")
)

// Blueprint is the execution plan for one category of task.
type Blueprint struct {
	Name           string   `json:"name"`
	Description    string   `json:"description,omitempty"`
	Workers        int      `json:"workers"`
	TimeoutSeconds float64  `json:"timeout_seconds"`
	Strategy       Strategy `json:"strategy"`
	MinResponses   int      `json:"min_responses"`
	// QuorumGraceSeconds, when positive, ends collection that long after min_responses answers arrived
	// instead of waiting for every worker or the deadline.
	QuorumGraceSeconds float64 `json:"quorum_grace_seconds,omitempty"`
}

// Timeout is the collection deadline as a duration.
func (b Blueprint) Timeout() time.Duration { return seconds(b.TimeoutSeconds) }

// QuorumGrace is the quorum grace period as a duration (zero when unset).
func (b Blueprint) QuorumGrace() time.Duration { return seconds(b.QuorumGraceSeconds) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// maxTimeoutSeconds bounds deadlines to one hour: anything longer is a unit mistake, not a plan.
const maxTimeoutSeconds = 3600

// Validate reports every problem with b at once as validation.Errors.
func (b Blueprint) Validate() error {
	var errs validation.Errors
	if b.Name == "" {
		errs.Add("name", "is required")
	}
	if b.Workers < 1 {
		errs.Add("workers", fmt.Sprintf("must be at least 1, got %d", b.Workers))
	}
	if b.MinResponses < 1 {
		errs.Add("min_responses", fmt.Sprintf("must be at least 1, got %d", b.MinResponses))
	} else if b.Workers >= 1 && b.MinResponses > b.Workers {
		errs.Add("min_responses", fmt.Sprintf("must not exceed workers (%d), got %d", b.Workers, b.MinResponses))
	}
	if !(b.TimeoutSeconds > 0) || math.IsInf(b.TimeoutSeconds, 0) {
		errs.Add("timeout_seconds", fmt.Sprintf("must be greater than 0, got %g", b.TimeoutSeconds))
	} else if b.TimeoutSeconds > maxTimeoutSeconds {
		errs.Add("timeout_seconds", fmt.Sprintf("must be at most %d, got %g", maxTimeoutSeconds, b.TimeoutSeconds))
	}
	if !b.Strategy.Valid() {
		errs.Add("strategy", fmt.Sprintf("unknown strategy %q (want one of majority, weighted, rotating, pairwise)", b.Strategy))
	}
	if b.QuorumGraceSeconds < 0 || math.IsNaN(b.QuorumGraceSeconds) {
		errs.Add("quorum_grace_seconds", fmt.Sprintf("must not be negative, got %g", b.QuorumGraceSeconds))
	}
	return errs.Err()
}

// Overrides are per-request changes to a blueprint; nil fields keep the blueprint's value.
type Overrides struct {
	Workers            *int
	TimeoutSeconds     *float64
	Strategy           *Strategy
	MinResponses       *int
	QuorumGraceSeconds *float64
}

// Changed lists the names of the fields the overrides set, for logging.
func (o Overrides) Changed() []string {
	var names []string
	if o.Workers != nil {
		names = append(names, "workers")
	}
	if o.TimeoutSeconds != nil {
		names = append(names, "timeout_seconds")
	}
	if o.Strategy != nil {
		names = append(names, "strategy")
	}
	if o.MinResponses != nil {
		names = append(names, "min_responses")
	}
	if o.QuorumGraceSeconds != nil {
		names = append(names, "quorum_grace_seconds")
	}
	return names
}

// Apply returns b with the overrides applied, validated as a whole.
func (b Blueprint) Apply(o Overrides) (Blueprint, error) {
	if o.Workers != nil {
		b.Workers = *o.Workers
	}
	if o.TimeoutSeconds != nil {
		b.TimeoutSeconds = *o.TimeoutSeconds
	}
	if o.Strategy != nil {
		b.Strategy = *o.Strategy
	}
	if o.MinResponses != nil {
		b.MinResponses = *o.MinResponses
	}
	if o.QuorumGraceSeconds != nil {
		b.QuorumGraceSeconds = *o.QuorumGraceSeconds
	}
	if err := b.Validate(); err != nil {
		return Blueprint{}, err
	}
	return b, nil
}

// Set is an immutable collection of blueprints by name.
type Set struct {
	byName map[string]Blueprint
	names  []string
	source string
}

// Get returns the named blueprint, or an error wrapping ErrUnknown.
func (s *Set) Get(name string) (Blueprint, error) {
	b, ok := s.byName[name]
	if !ok {
		return Blueprint{}, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return b, nil
}

// Has reports whether the set holds the named blueprint.
func (s *Set) Has(name string) bool { _, ok := s.byName[name]; return ok }

// Names returns the blueprint names in sorted order.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// All returns every blueprint in name order.
func (s *Set) All() []Blueprint {
	out := make([]Blueprint, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}

// Source says where the set came from: "embedded" or the directory path.
func (s *Set) Source() string { return s.source }

// With returns a new set with extra blueprints added (replacing those of the same name), each validated.
func (s *Set) With(extra ...Blueprint) (*Set, error) {
	byName := make(map[string]Blueprint, len(s.byName)+len(extra))
	for n, b := range s.byName {
		byName[n] = b
	}
	for _, b := range extra {
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("blueprint %q: %w", b.Name, err)
		}
		byName[b.Name] = b
	}
	return newSet(byName, s.source), nil
}

// Embedded returns the blueprints compiled into the binary.
func Embedded() (*Set, error) {
	byName, err := readFS(embedded, ".")
	if err != nil {
		return nil, fmt.Errorf("embedded blueprints: %w", err)
	}
	return newSet(byName, "embedded"), nil
}

// LoadDir returns the embedded blueprints overridden and extended by the *.json files in dir. An
// unreadable or missing directory yields an error wrapping ErrDirUnavailable; an invalid file is a
// plain error, because silently ignoring a broken override would hide a configuration mistake.
func LoadDir(dir string) (*Set, error) {
	base, err := Embedded()
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDirUnavailable, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrDirUnavailable, dir)
	}
	overrides, err := readFS(os.DirFS(dir), dir)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]Blueprint, len(base.byName)+len(overrides))
	for n, b := range base.byName {
		byName[n] = b
	}
	for n, b := range overrides {
		byName[n] = b
	}
	return newSet(byName, dir), nil
}

// Load returns the blueprints for a configured directory: the embedded set when dir is empty, and also
// when dir is unavailable, in which case the fallback is logged (the retry table's "blueprint directory
// unavailable: embedded blueprints, 1 attempt, no delay").
func Load(dir string, log *zap.Logger) (*Set, error) {
	if dir == "" {
		return Embedded()
	}
	set, err := LoadDir(dir)
	if errors.Is(err, ErrDirUnavailable) {
		log.Warn("blueprint directory unavailable, using embedded blueprints",
			zap.String("event", "blueprint_fallback"), zap.String("dir", dir), zap.Error(err))
		return Embedded()
	}
	return set, err
}

func newSet(byName map[string]Blueprint, source string) *Set {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return &Set{byName: byName, names: names, source: source}
}

func readFS(fsys fs.FS, label string) (map[string]Blueprint, error) {
	files, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDirUnavailable, err)
	}
	byName := make(map[string]Blueprint, len(files))
	for _, f := range files {
		raw, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("%w: read %s: %w", ErrDirUnavailable, path.Join(label, f), err)
		}
		b, err := parse(raw)
		if err != nil {
			return nil, fmt.Errorf("blueprint %s: %w", path.Join(label, f), err)
		}
		if want := strings.TrimSuffix(f, ".json"); b.Name != want {
			return nil, fmt.Errorf("blueprint %s: name %q does not match file name %q", path.Join(label, f), b.Name, want)
		}
		byName[b.Name] = b
	}
	return byName, nil
}

func parse(raw []byte) (Blueprint, error) {
	var b Blueprint
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Blueprint{}, fmt.Errorf("decode: %w", err)
	}
	if err := b.Validate(); err != nil {
		return Blueprint{}, err
	}
	return b, nil
}
