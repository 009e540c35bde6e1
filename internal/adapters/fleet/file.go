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
		switch {
		case !hostName.MatchString(h.Name):
			bad(i, "name %q must be 1 to 63 letters, digits, '.', '_' or '-'", h.Name)
		case seen[h.Name]:
			bad(i, "name %q is used twice", h.Name)
		}
		seen[h.Name] = true
		if h.Address == "" {
			bad(i, "address is required")
		}
		if h.Port < 1 || h.Port > 65535 {
			bad(i, "port must be from 1 to 65535")
		}
		if h.User == "" {
			bad(i, "user is required")
		}
		if h.KeyFile == "" {
			bad(i, "key_file is required")
		}
		if h.Tier < 1 || h.Tier > 3 {
			bad(i, "tier must be 1, 2 or 3")
		}
		if h.Slots < 1 || h.Slots > 1024 {
			bad(i, "slots must be from 1 to 1024")
		}
		if h.Mode != ModeAgent && h.Mode != ModeExec {
			bad(i, "mode must be agent or exec, got %q", h.Mode)
		}
		if h.MaxSessions < 1 || h.MaxSessions > 1000 {
			bad(i, "max_sessions must be from 1 to 1000")
		}
		if len(h.Labels) > 32 {
			bad(i, "at most 32 labels")
		}
	}
	return errors.Join(errs...)
}

// Specs are the hosts as workers.
func (f File) Specs() []WorkerSpec {
	out := make([]WorkerSpec, len(f.Hosts))
	for i, h := range f.Hosts {
		out[i] = WorkerSpec{Name: h.Name, Tier: h.Tier, Slots: h.Slots}
	}
	return out
}
