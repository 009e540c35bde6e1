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
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/problems"
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
	// Quorum is fixed (empty: ask every selected model at once) or adaptive: ask the selected models
	// best-first in waves of MinResponses, at most Workers of them, and stop once the leading answer's
	// posterior reaches QuorumTau. A share QuorumAudit of requests asks all of them anyway, so the
	// accuracy estimates keep learning from models a settled answer would not have asked.
	Quorum      string  `json:"quorum,omitempty"`
	QuorumTau   float64 `json:"quorum_tau,omitempty"`
	QuorumAudit float64 `json:"quorum_audit,omitempty"`
	// CacheTTLSeconds, when positive, keeps the blueprint's answers in the exact answer cache that
	// long: an identical request is answered from it, at no cost (a request's or its key's choice
	// comes first).
	CacheTTLSeconds int `json:"cache_ttl_seconds,omitempty"`
}

// MaxCacheTTLSeconds is the longest a blueprint keeps its answers: 30 days.
const MaxCacheTTLSeconds = 30 * 24 * 3600

// Quorum modes.
const (
	FixedQuorum    = "fixed"
	AdaptiveQuorum = "adaptive"
)

// Defaults of the adaptive quorum.
const (
	DefaultQuorumTau   = 0.95
	DefaultQuorumAudit = 0.1
)

// Adaptive reports whether the blueprint asks its models in waves.
func (b Blueprint) Adaptive() bool { return b.Quorum == AdaptiveQuorum }

// Tau is the posterior at which an adaptive quorum stops.
func (b Blueprint) Tau() float64 {
	if b.QuorumTau > 0 {
		return b.QuorumTau
	}
	return DefaultQuorumTau
}

// Audit is the share of requests on which an adaptive quorum asks every model.
func (b Blueprint) Audit() float64 {
	if b.QuorumAudit > 0 {
		return b.QuorumAudit
	}
	return DefaultQuorumAudit
}

// Timeout is the collection deadline as a duration.
func (b Blueprint) Timeout() time.Duration { return seconds(b.TimeoutSeconds) }

// QuorumGrace is the quorum grace period as a duration (zero when unset).
func (b Blueprint) QuorumGrace() time.Duration { return seconds(b.QuorumGraceSeconds) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Bounds of a blueprint. A deadline above an hour is a unit mistake, not a plan; one below a tenth of a
// second is one too, and would make every provider's normal latency a fault. More than 64 workers would
// fan one task out to a good part of the catalog.
const (
	MinTimeoutSeconds = 0.1
	MaxTimeoutSeconds = 3600
	MaxWorkers        = 64
)

// Validate reports every problem with b at once as problems.Errors.
func (b Blueprint) Validate() error {
	var errs problems.Errors
	b.validatePanel(&errs)
	b.validateQuorum(&errs)
	return errs.Err()
}

// validatePanel adds the problems with b's name, its panel (workers and min_responses), its deadline
// and its strategy to errs.
func (b Blueprint) validatePanel(errs *problems.Errors) {
	if b.Name == "" {
		errs.Add("name", "is required")
	}
	if b.Workers < 1 || b.Workers > MaxWorkers {
		errs.Add("workers", fmt.Sprintf("must be between 1 and %d, got %d", MaxWorkers, b.Workers))
	}
	if b.MinResponses < 1 {
		errs.Add("min_responses", fmt.Sprintf("must be at least 1, got %d", b.MinResponses))
	} else if b.Workers >= 1 && b.MinResponses > b.Workers {
		errs.Add("min_responses", fmt.Sprintf("must not exceed workers (%d), got %d", b.Workers, b.MinResponses))
	}
	if !(b.TimeoutSeconds >= MinTimeoutSeconds && b.TimeoutSeconds <= MaxTimeoutSeconds) {
		errs.Add("timeout_seconds", fmt.Sprintf("must be between %g and %d, got %g", MinTimeoutSeconds, MaxTimeoutSeconds, b.TimeoutSeconds))
	}
	if !b.Strategy.Valid() {
		errs.Add("strategy", fmt.Sprintf("unknown strategy %q (want one of majority, weighted, rotating, pairwise)", b.Strategy))
	}
}

// validateQuorum adds the problems with b's quorum settings to errs.
func (b Blueprint) validateQuorum(errs *problems.Errors) {
	if !(b.QuorumGraceSeconds >= 0 && b.QuorumGraceSeconds <= MaxTimeoutSeconds) {
		errs.Add("quorum_grace_seconds", fmt.Sprintf("must be between 0 and %d, got %g", MaxTimeoutSeconds, b.QuorumGraceSeconds))
	}
	if b.Quorum != "" && b.Quorum != FixedQuorum && b.Quorum != AdaptiveQuorum {
		errs.Add("quorum", fmt.Sprintf("must be fixed or adaptive, got %q", b.Quorum))
	}
	if !(b.QuorumTau >= 0 && b.QuorumTau < 1) {
		errs.Add("quorum_tau", fmt.Sprintf("must be in (0, 1), got %g", b.QuorumTau))
	}
	if !(b.QuorumAudit >= 0 && b.QuorumAudit <= 1) {
		errs.Add("quorum_audit", fmt.Sprintf("must be between 0 and 1, got %g", b.QuorumAudit))
	}
	if b.CacheTTLSeconds < 0 || b.CacheTTLSeconds > MaxCacheTTLSeconds {
		errs.Add("cache_ttl_seconds", fmt.Sprintf("must be between 0 and %d, got %d", MaxCacheTTLSeconds, b.CacheTTLSeconds))
	}
}

// Overrides are per-request changes to a blueprint; nil fields keep the blueprint's value. A request's
// timeout is not one of them: it bounds the caller's wait, while the blueprint's timeout stays each
// call's budget (and the measure of whether a call that timed out is to blame).
type Overrides struct {
	Workers            *int
	Strategy           *Strategy
	MinResponses       *int
	QuorumGraceSeconds *float64
	Quorum             *string
	QuorumTau          *float64
}

// Changed lists the names of the fields the overrides set, for logging.
func (o Overrides) Changed() []string {
	var names []string
	if o.Workers != nil {
		names = append(names, "workers")
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
	if o.Quorum != nil {
		names = append(names, "quorum")
	}
	if o.QuorumTau != nil {
		names = append(names, "quorum_tau")
	}
	return names
}

// Apply returns b with the overrides applied, validated as a whole.
func (b Blueprint) Apply(o Overrides) (Blueprint, error) {
	if o.Workers != nil {
		b.Workers = *o.Workers
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
	if o.Quorum != nil {
		b.Quorum = *o.Quorum
	}
	if o.QuorumTau != nil {
		b.QuorumTau = *o.QuorumTau
	}
	if err := b.Validate(); err != nil {
		return Blueprint{}, err
	}
	return b, nil
}

// Set is an immutable collection of blueprints by name.
type Set struct {
	byName   map[string]Blueprint
	names    []string
	source   string
	rejected []Rejection
}

// Rejection is a blueprint file that was left out, and why.
type Rejection struct {
	File  string `json:"file"`
	Error string `json:"error"`
}

// Rejected lists the files of the directory that were left out.
func (s *Set) Rejected() []Rejection { return s.rejected }

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
	set := newSet(byName, s.source)
	set.rejected = s.rejected
	return set, nil
}

// Embedded returns the blueprints compiled into the binary.
func Embedded() (*Set, error) {
	byName, rejected, err := readFS(embedded, ".")
	if err == nil && len(rejected) > 0 {
		err = errors.New(rejected[0].File + ": " + rejected[0].Error)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded blueprints: %w", err)
	}
	return newSet(byName, "embedded"), nil
}

// LoadDir returns the embedded blueprints overridden and extended by the *.json files in dir. An
// unreadable or missing directory yields an error wrapping ErrDirUnavailable. An invalid file is left
// out and listed in Rejected, with the valid files beside it kept: one broken override must not take
// the others (or the service) down, and the rejection says which file to fix.
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
	overrides, rejected, err := readFS(os.DirFS(dir), dir)
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
	set := newSet(byName, dir)
	set.rejected = rejected
	return set, nil
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
	if err != nil {
		return nil, err
	}
	for _, r := range set.Rejected() {
		log.Error("blueprint file rejected", zap.String("event", "blueprint_rejected"), zap.String("file", r.File), zap.String("error", r.Error))
	}
	return set, nil
}

func newSet(byName map[string]Blueprint, source string) *Set {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return &Set{byName: byName, names: names, source: source}
}

// maxFileBytes bounds a blueprint file: a few hundred bytes is the norm.
const maxFileBytes = 64 << 10

// readFS reads every *.json file of fsys: the valid blueprints by name, and the files rejected.
func readFS(fsys fs.FS, label string) (map[string]Blueprint, []Rejection, error) {
	files, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrDirUnavailable, err)
	}
	byName := make(map[string]Blueprint, len(files))
	var rejected []Rejection
	for _, f := range files {
		b, err := readFile(fsys, f)
		if err != nil {
			rejected = append(rejected, Rejection{File: path.Join(label, f), Error: err.Error()})
			continue
		}
		byName[b.Name] = b
	}
	return byName, rejected, nil
}

func readFile(fsys fs.FS, name string) (Blueprint, error) {
	if info, err := fs.Stat(fsys, name); err != nil {
		return Blueprint{}, err
	} else if info.Size() > maxFileBytes {
		return Blueprint{}, fmt.Errorf("%d bytes, more than the %d a blueprint may have", info.Size(), maxFileBytes)
	}
	raw, err := fs.ReadFile(fsys, name)
	if err != nil {
		return Blueprint{}, err
	}
	b, err := parse(raw)
	if err != nil {
		return Blueprint{}, err
	}
	if want := strings.TrimSuffix(name, ".json"); b.Name != want {
		return Blueprint{}, fmt.Errorf("name %q does not match the file name %q", b.Name, want)
	}
	return b, nil
}

func parse(raw []byte) (Blueprint, error) {
	var b Blueprint
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Blueprint{}, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return Blueprint{}, errors.New("decode: trailing data after the blueprint")
	}
	if err := b.Validate(); err != nil {
		return Blueprint{}, err
	}
	return b, nil
}
