package config

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
)

// example is the documented configuration at the repository's root.
const example = "../../../config.example.yaml"

func TestTheExampleLoads(t *testing.T) {
	cfg, err := Load([]string{"--config", example}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) == 0 || cfg.Remote.TLSCA == "" || cfg.RateLimits.MaxQueueSeconds == 0 {
		t.Fatalf("the example loads as %+v", cfg)
	}
}

// TestTheExampleSetsEveryKey walks the Config type's JSON tags (struct fields; the value type of a map
// or a list through the example's entries, taken together) and names every key config.example.yaml
// lacks: a key added to the configuration without documenting it fails here.
func TestTheExampleSetsEveryKey(t *testing.T) {
	raw, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := yamlTree(raw)
	if err != nil {
		t.Fatal(err)
	}
	if missing := lacks(reflect.TypeFor[Config](), tree, ""); len(missing) > 0 {
		t.Fatalf("config.example.yaml lacks %d keys of the configuration; add each with a comment saying what it does and its default:\n  %s",
			len(missing), strings.Join(missing, "\n  "))
	}
	// The walk bites: a key taken out of the example is named.
	delete(tree.(map[string]any)["sim"].(map[string]any)["faults"].(map[string]any), "provider_wide")
	delete(tree.(map[string]any)["remote"].(map[string]any), "tls_ca")
	if missing := lacks(reflect.TypeFor[Config](), tree, ""); !slices.Equal(missing, []string{"remote.tls_ca", "sim.faults.provider_wide"}) {
		t.Fatalf("with two keys taken out, the walk names %v", missing)
	}
}

func TestUsagePointsToTheExample(t *testing.T) {
	var b bytes.Buffer
	PrintUsage(&b)
	if !strings.Contains(b.String(), "config.example.yaml") || !strings.Contains(b.String(), "YAML") {
		t.Fatalf("--help does not point to the example:\n%s", b.String())
	}
}

// lacks lists the keys of type t that the example value v does not set, sorted. A map must have at
// least one entry and a list of objects one item; their entries together must set every key of the
// value type (a named provider needs no kind, a provider of your own does: between them, both show).
func lacks(t reflect.Type, v any, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch {
	case t == reflect.TypeFor[RateLimits]():
		// Its JSON form is its own: max_queue_seconds beside the providers' limits.
		obj, _ := v.(map[string]any)
		if _, ok := obj[maxQueueKey]; !ok {
			out = append(out, path+"."+maxQueueKey)
		}
		entries := map[string]any{}
		for k, e := range obj {
			if k != maxQueueKey {
				entries[k] = e
			}
		}
		out = append(out, lacksEntries(reflect.TypeFor[ratelimit.Limits](), entries, path)...)
	case t.Kind() == reflect.Struct:
		obj, _ := v.(map[string]any)
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || f.Tag.Get("config") == "old" { // an older spelling is read, not shown
				continue
			}
			if name == "" {
				name = f.Name
			}
			sub := join(path, name)
			val, ok := obj[name]
			if !ok {
				out = append(out, sub)
				continue
			}
			out = append(out, lacks(f.Type, val, sub)...)
		}
	case t.Kind() == reflect.Map:
		obj, _ := v.(map[string]any)
		out = append(out, lacksEntries(t.Elem(), obj, path)...)
	case t.Kind() == reflect.Slice && hasKeys(t.Elem()):
		items, _ := v.([]any)
		var all any
		for _, item := range items {
			all = union(all, item)
		}
		if all == nil {
			out = append(out, path+"[].<an example item>")
			break
		}
		out = append(out, lacks(t.Elem(), all, path+"[]")...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// lacksEntries lists the keys of type elem that the entries, taken together, do not set. No entry at
// all lacks the entry itself.
func lacksEntries(elem reflect.Type, entries map[string]any, path string) []string {
	if len(entries) == 0 {
		return []string{path + ".<an example entry>"}
	}
	var all any
	for _, e := range entries {
		all = union(all, e)
	}
	return lacks(elem, all, path+".*")
}

// union merges two example values: the keys of both objects (their common keys merged in turn), the
// items of both lists.
func union(a, b any) any {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		out := make(map[string]any, len(am)+len(bm))
		for k, v := range am {
			out[k] = v
		}
		for k, v := range bm {
			out[k] = union(out[k], v)
		}
		return out
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok {
		return append(slices.Clone(al), bl...)
	}
	if a == nil {
		return b
	}
	return a
}

// hasKeys reports whether values of t are objects with keys of their own.
func hasKeys(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
}
