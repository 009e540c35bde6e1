package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"

	"gopkg.in/yaml.v3"
)

// File is a fleet file: the worker hosts Conclave dispatches to over SSH, and the known_hosts file
// their keys are verified against. It is YAML (JSON is valid YAML).
type File struct {
	KnownHosts string `yaml:"known_hosts" json:"known_hosts"`
	Hosts      []Host `yaml:"hosts" json:"hosts"`
}

// Host is one worker host.
type Host struct {
	Name    string `yaml:"name" json:"name"`
	Address string `yaml:"address" json:"address"`
	Port    int    `yaml:"port" json:"port"`
	User    string `yaml:"user" json:"user"`
	KeyFile string `yaml:"key_file" json:"key_file"`
	// Tier 1 hosts are preferred for compute-heavy tasks (default 2); Slots is how many jobs it runs at
	// once (DefaultSlots).
	Tier  int `yaml:"tier" json:"tier"`
	Slots int `yaml:"slots" json:"slots"`
	// Mode is agent (a persistent session) or exec (one per job).
	Mode   string   `yaml:"mode" json:"mode"`
	Labels []string `yaml:"labels" json:"labels"`
	// Command is what the session runs (DefaultCommand); a forced command in authorized_keys wins.
	Command string `yaml:"command" json:"command"`
	// MaxSessions stays under the server's MaxSessions (DefaultMaxSessions, OpenSSH's default).
	MaxSessions int `yaml:"max_sessions" json:"max_sessions"`
}

// Defaults of a host.
const (
	DefaultCommand     = "conclave worker"
	DefaultMaxSessions = 10
	MaxHosts           = 1024
)

var hostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// LoadFile reads and checks a fleet file; every problem is listed.
func LoadFile(path string) (File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("fleet: %w", err)
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("fleet %s: %w", path, err)
	}
	if err := f.normalize(); err != nil {
		return File{}, fmt.Errorf("fleet %s: %w", path, err)
	}
	return f, nil
}

// normalize fills the defaults and checks every host.
func (f *File) normalize() error {
	var errs []error
	bad := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("hosts[%d]: "+format, append([]any{i}, args...)...))
	}
	if len(f.Hosts) == 0 {
		errs = append(errs, errors.New("no hosts"))
	}
	if len(f.Hosts) > MaxHosts {
		errs = append(errs, fmt.Errorf("%d hosts, at most %d", len(f.Hosts), MaxHosts))
	}
	seen := map[string]bool{}
	for i := range f.Hosts {
		h := &f.Hosts[i]
		h.fillDefaults()
		switch {
		case !hostName.MatchString(h.Name):
			bad(i, "name %q must be 1 to 63 letters, digits, '.', '_' or '-'", h.Name)
		case seen[h.Name]:
			bad(i, "name %q is used twice", h.Name)
		}
		seen[h.Name] = true
		for _, problem := range h.problems() {
			bad(i, "%s", problem)
		}
	}
	return errors.Join(errs...)
}

// fillDefaults gives every field left unset its default.
func (h *Host) fillDefaults() {
	if h.Port == 0 {
		h.Port = 22
	}
	if h.Tier == 0 {
		h.Tier = 2
	}
	if h.Slots == 0 {
		h.Slots = DefaultSlots
	}
	if h.Mode == "" {
		h.Mode = ModeAgent
	}
	if h.Command == "" {
		h.Command = DefaultCommand
	}
	if h.MaxSessions == 0 {
		h.MaxSessions = DefaultMaxSessions
	}
}

// problems lists what is wrong with a host's fields other than its name, in the fields' order.
func (h *Host) problems() []string {
	var out []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	check(h.Address != "", "address is required")
	check(within(h.Port, 1, 65535), "port must be from 1 to 65535")
	check(h.User != "", "user is required")
	check(h.KeyFile != "", "key_file is required")
	check(within(h.Tier, 1, 3), "tier must be 1, 2 or 3")
	check(within(h.Slots, 1, 1024), "slots must be from 1 to 1024")
	check(h.Mode == ModeAgent || h.Mode == ModeExec, "mode must be agent or exec, got %q", h.Mode)
	check(within(h.MaxSessions, 1, 1000), "max_sessions must be from 1 to 1000")
	check(len(h.Labels) <= 32, "at most 32 labels")
	return out
}

// within says whether lo <= v <= hi.
func within(v, lo, hi int) bool { return v >= lo && v <= hi }

// Specs are the hosts as workers.
func (f File) Specs() []WorkerSpec {
	out := make([]WorkerSpec, len(f.Hosts))
	for i, h := range f.Hosts {
		out[i] = WorkerSpec{Name: h.Name, Tier: h.Tier, Slots: h.Slots}
	}
	return out
}
