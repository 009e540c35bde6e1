package secret

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Source finds keys by name: in a secrets file when one is configured and names the key, otherwise in
// the environment. Its zero value reads the environment only.
type Source struct {
	// File is the secrets file's path, or empty.
	File string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

var keyName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidName reports whether name can name a key (an environment variable's name).
func ValidName(name string) bool { return keyName.MatchString(name) }

// maxFileBytes bounds a secrets file.
const maxFileBytes = 1 << 20

// ReadFile reads a secrets file of NAME=value lines ('#' starts a comment line). The file must not be
// readable or writable by anyone but its owner: a key that others can read is a key given away.
func ReadFile(path string) (map[string]String, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets file %s is readable by others (mode %04o): make it 0600", path, perm)
	}
	if info.Size() > maxFileBytes {
		return nil, fmt.Errorf("secrets file %s: %d bytes, more than a secrets file should hold", path, info.Size())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	out := map[string]String{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.Trim(strings.TrimSpace(value), `"'`)
		if !ok || !ValidName(name) {
			// Never quote the line: it may hold a key.
			return nil, fmt.Errorf("secrets file %s, line %d: want NAME=value", path, n)
		}
		out[name] = String(value)
	}
	return out, sc.Err()
}

// Lookup returns the key of a name, and where it was found ("file" or "environment"), or an error
// that says where it was looked for.
func (s Source) Lookup(name string) (String, string, error) {
	if s.File != "" {
		keys, err := ReadFile(s.File)
		if err != nil {
			return "", "", err
		}
		if k, ok := keys[name]; ok && k.Set() {
			return k, "file", nil
		}
	}
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv(name); v != "" {
		return String(v), "environment", nil
	}
	where := "the environment"
	if s.File != "" {
		where = s.File + " or the environment"
	}
	return "", "", fmt.Errorf("%s is not set in %s", name, where)
}
