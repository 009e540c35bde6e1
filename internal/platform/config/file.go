package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/conclave-ai/conclave/internal/core/providerstate"
	"gopkg.in/yaml.v3"
)

// decodeFile reads a configuration file over cfg: YAML when its name ends in .yaml or .yml, JSON
// otherwise. Both come to the same decoder: YAML is turned into the JSON it stands for, so the JSON
// field names, the custom unmarshalling (rate_limits, secrets) and the bounds are the same in both.
// A key the configuration does not have is refused with its path.
func decodeFile(path string, raw []byte, cfg *Config) error {
	var tree any
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		var err error
		if tree, err = yamlTree(raw); err != nil {
			return err
		}
		if raw, err = json.Marshal(tree); err != nil {
			return err
		}
	default:
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // the tree is only read for its keys: numbers stay as written
		if err := dec.Decode(&tree); err != nil {
			return err
		}
		if _, err := dec.Token(); err != io.EOF {
			return errors.New("more than one JSON value in the file")
		}
	}
	if err := configShape.unknown(tree, ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // kept as a second line: the shape check above names the path
	if err := dec.Decode(cfg); err != nil {
		return err
	}
	return cfg.oldSpellings(tree)
}

// oldSpellings moves what a file set under a key's older spelling to its place; a file that sets both
// spellings is refused, rather than one silently winning.
func (c *Config) oldSpellings(tree any) error {
	if c.RecordsMaxBytes == nil {
		return nil
	}
	top, _ := tree.(map[string]any)
	if records, ok := top["records"].(map[string]any); ok {
		if _, set := records["max_bytes"]; set {
			return errors.New("records_max_bytes and records.max_bytes are both set: keep records.max_bytes")
		}
	}
	c.Records.MaxBytes, c.RecordsMaxBytes = *c.RecordsMaxBytes, nil
	return nil
}

// maxAliasValues bounds the values a YAML file may reach through aliases: a few nested aliases can
// otherwise stand for billions of values (the "billion laughs").
const maxAliasValues = 100_000

// yamlConverter turns YAML nodes into the values encoding/json decodes: map[string]any, []any,
// strings, numbers (json.Number), booleans and nil.
type yamlConverter struct {
	aliasBudget int
	// aliasDepth counts the aliases the current node is reached through; inAlias the anchors being
	// expanded, to refuse one that contains itself.
	aliasDepth int
	inAlias    map[*yaml.Node]bool
}

// yamlTree reads a YAML configuration into the value its JSON form decodes to. An empty document is
// an empty configuration; more than one document, keys that are not strings, and values JSON has no
// form for (binary, NaN, infinities, custom tags) are refused with their line.
func yamlTree(raw []byte) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, nil // only comments, or nothing: the defaults
		}
		return nil, err
	}
	var more yaml.Node
	if err := dec.Decode(&more); err != io.EOF {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a second YAML document: a configuration file holds one", more.Line)
	}
	c := &yamlConverter{aliasBudget: maxAliasValues, inAlias: map[*yaml.Node]bool{}}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return c.value(doc.Content[0], "")
}

func (c *yamlConverter) value(n *yaml.Node, path string) (any, error) {
	if c.aliasDepth > 0 {
		if c.aliasBudget--; c.aliasBudget < 0 {
			return nil, fmt.Errorf("line %d: aliases expand to more than %d values", n.Line, maxAliasValues)
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		if c.inAlias[n.Alias] {
			return nil, fmt.Errorf("line %d: %s: the anchor %q contains itself", n.Line, where(path), n.Value)
		}
		c.inAlias[n.Alias] = true
		c.aliasDepth++
		v, err := c.value(n.Alias, path)
		c.aliasDepth--
		delete(c.inAlias, n.Alias)
		return v, err
	case yaml.MappingNode:
		if n.Tag != "!!map" {
			return nil, fmt.Errorf("line %d: %s: the tag %s has no JSON form", n.Line, where(path), n.Tag)
		}
		out := make(map[string]any, len(n.Content)/2)
		lines := map[string]int{}
		if err := c.mapping(n, path, out, lines); err != nil {
			return nil, err
		}
		return out, nil
	case yaml.SequenceNode:
		if n.Tag != "!!seq" {
			return nil, fmt.Errorf("line %d: %s: the tag %s has no JSON form", n.Line, where(path), n.Tag)
		}
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, err := c.value(item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.ScalarNode:
		return scalar(n, path)
	}
	return nil, fmt.Errorf("line %d: %s: unexpected YAML node", n.Line, where(path))
}

// mapping adds a mapping's entries to out. Merge keys (<<) bring in the entries of another mapping
// that the mapping does not set itself, as YAML defines them; a key set twice is refused, where JSON
// would silently keep the last.
func (c *yamlConverter) mapping(n *yaml.Node, path string, out map[string]any, lines map[string]int) error {
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		for k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return fmt.Errorf("line %d: %s: the key %q is not a string (JSON keys are strings: quote it)", k.Line, where(path), k.Value)
		}
		if line, ok := lines[k.Value]; ok {
			return fmt.Errorf("line %d: %s: the key %q is already set at line %d", k.Line, where(path), k.Value, line)
		}
		lines[k.Value] = k.Line
		val, err := c.value(v, join(path, k.Value))
		if err != nil {
			return err
		}
		out[k.Value] = val
	}
	// Merged entries come after the mapping's own, which they never replace.
	for _, m := range merges {
		if err := c.merge(m, path, out); err != nil {
			return err
		}
	}
	return nil
}

// merge adds to out the entries of a merge key's value (a mapping, or a list of mappings) that out
// does not set yet.
func (c *yamlConverter) merge(m *yaml.Node, path string, out map[string]any) error {
	sources := []*yaml.Node{m}
	if m.Kind == yaml.SequenceNode {
		sources = m.Content
	}
	for _, src := range sources {
		v, err := c.value(src, path)
		if err != nil {
			return err
		}
		merged, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("line %d: %s: a merge (<<) takes a mapping or a list of mappings", src.Line, where(path))
		}
		for key, val := range merged {
			if _, set := out[key]; !set {
				out[key] = val
			}
		}
	}
	return nil
}

// scalar converts a scalar by its resolved tag.
func scalar(n *yaml.Node, path string) (any, error) {
	switch n.Tag {
	case "!!str":
		return n.Value, nil
	case "!!timestamp":
		// A date-like value is text to the configuration (a node id, a path), as it would be in JSON.
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", n.Line, where(path), err)
		}
		switch x := v.(type) {
		case bool:
			return x, nil
		case int:
			return json.Number(strconv.Itoa(x)), nil
		case int64:
			return json.Number(strconv.FormatInt(x, 10)), nil
		case uint64:
			return json.Number(strconv.FormatUint(x, 10)), nil
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("line %d: %s: %s has no JSON form", n.Line, where(path), n.Value)
			}
			return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
		}
		return nil, fmt.Errorf("line %d: %s: %s has no JSON form", n.Line, where(path), n.Value)
	}
	return nil, fmt.Errorf("line %d: %s: the tag %s has no JSON form", n.Line, where(path), n.Tag)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func where(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

// shape is the configuration's keys as a tree, read from the JSON tags of its types: what a file may
// set (Load refuses any other key), and what config.example.yaml must show.
type shape struct {
	// fields are the keys an object has; with elem set, the keys it reserves beside its entries.
	fields map[string]*shape
	// elem, for a map, is the shape of every other key's value; for a list, of every item.
	elem *shape
	list bool
	// typ is the Go type the shape was read from, for messages.
	typ reflect.Type
}

// leaf reports whether a value of this shape has no keys of its own.
func (s *shape) leaf() bool { return s.fields == nil && s.elem == nil }

// open reports whether the object takes keys of its own choosing (a map).
func (s *shape) open() bool { return !s.list && s.elem != nil }

var configShape = shapeOf(reflect.TypeFor[Config]())

func shapeOf(t reflect.Type) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := &shape{typ: t}
	switch {
	case t == reflect.TypeFor[RateLimits]():
		// Its own JSON form: providers by name, and max_queue_seconds beside them.
		s.fields = map[string]*shape{maxQueueKey: {typ: reflect.TypeFor[float64]()}}
		s.elem = shapeOf(reflect.TypeFor[providerstate.Limits]())
	case t.Kind() == reflect.Struct:
		s.fields = map[string]*shape{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			s.fields[name] = shapeOf(f.Type)
		}
	case t.Kind() == reflect.Map:
		s.elem = shapeOf(t.Elem())
	case t.Kind() == reflect.Slice:
		if e := shapeOf(t.Elem()); !e.leaf() {
			s.elem, s.list = e, true
		}
	}
	return s
}

// unknown refuses every key of v that its shape does not have, naming each by its path. A value of
// the wrong type is left to the decoder, which says so.
func (s *shape) unknown(v any, path string) error {
	var errs []string
	s.walk(v, path, &errs)
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	if len(errs) > 20 {
		errs = append(errs[:20], fmt.Sprintf("and %d more", len(errs)-20))
	}
	return errors.New(strings.Join(errs, "; "))
}

func (s *shape) walk(v any, path string, errs *[]string) {
	switch {
	case s.list:
		items, _ := v.([]any)
		for i, item := range items {
			s.elem.walk(item, fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case !s.leaf():
		obj, _ := v.(map[string]any)
		for key, val := range obj {
			switch f, ok := s.fields[key]; {
			case ok:
				f.walk(val, join(path, key), errs)
			case s.open():
				s.elem.walk(val, join(path, key), errs)
			default:
				*errs = append(*errs, fmt.Sprintf("unknown key %q", join(path, key)))
			}
		}
	}
}
