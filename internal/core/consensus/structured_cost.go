package consensus

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds of the work of checking answers against a schema. The validator evaluates a subschema
// against a value once for each way the schema reaches it: each branch of anyOf, oneOf and allOf,
// each $ref, not, if, then and else and dependent schema is one more evaluation of the same value,
// and branches that reach the same part of a value multiply (a chain of 18 definitions, each an anyOf
// of two $refs to the next, evaluates every value a million times). An evaluation takes about 0.6 µs
// and 330 bytes on a value that fails it.
const (
	// MaxValueEvaluations bounds the evaluations of one value that a schema may ask for, read from the
	// schema alone before any model is asked: 6 ms for a value that fails them all. A union of a few
	// hundred branches, a recursive tree or the JSON Schema meta-schema stay far below it; the chain
	// above passes with 11 definitions (8,190) and is refused from 12 on (16,382).
	MaxValueEvaluations = 10_000
	// MaxAnswerWork bounds the work of checking one answer (all its values, or all the arguments of
	// its calls), counted in evaluations of a small value (a string counts one more for every 16
	// bytes, an object or an array for each of its members): 0.15 s and 80 MB of errors at most, for an
	// answer that fails everywhere. An answer beyond it is invalid, unchecked.
	MaxAnswerWork = 250_000
	// maxCostWork bounds reading a schema's costs (the sets of subschemas the parts of a value can
	// meet, as many as its subschemas unless its unions overlap): 25 ms at most, where the largest
	// realistic schemas take 15,000.
	maxCostWork = 1 << 18
	// costCap is where counts stop growing: far beyond every bound, and far from overflowing.
	costCap = int64(1) << 50
)

// evalCost is what checking a value against a compiled schema can cost: the sets of subschemas that
// can meet one value (each as many times as the schema reaches it), as states, and which state each
// part of a value (a property's value, its name, an item) is in. (The compiler does not assert
// content, so contentSchema applies to nothing.)
type evalCost struct {
	states []costState
	max    int64 // the most evaluations of one value
}

type costState struct {
	count int64 // evaluations of a value
	// The rest of the work of those evaluations, in evaluations of a small value: fixed whatever
	// the value (enum and const comparisons, which stop at the schema's side; required and dependent
	// names), per 16 bytes of a string (minLength, maxLength, pattern, format), per member of an
	// object (each evaluation goes through them all) and per 16 bytes of its names (matched against
	// patternProperties), and per unit of an array's whole contents (uniqueItems hashes it).
	fixed, perByte, perMember, perNameByte, perContent int64
	props                                              map[string]int32 // a named property's value
	other                                              int32            // any other property's value; -1: no subschema meets it
	name                                               int32            // a property's name (propertyNames)
	prefix                                             []int32          // the first items
	rest                                               int32            // the items after them
}

// schemaCost reads what checking values against root costs, and refuses a schema whose evaluations of
// one value can exceed MaxValueEvaluations. extra are compiled schemas the graph of exported fields may
// not reach but a $dynamicRef can (the document's $dynamicAnchors).
func schemaCost(root *jsonschema.Schema, extra []*jsonschema.Schema) (*evalCost, error) {
	b := &costBuilder{index: map[*jsonschema.Schema]int32{}, ids: map[string]int32{}}
	b.collect(append([]*jsonschema.Schema{root}, extra...))
	if err := b.link(); err != nil {
		return nil, err
	}
	if err := b.order(); err != nil {
		return nil, err
	}
	b.seen = make([]uint32, len(b.nodes))
	b.mult = make([]int64, len(b.nodes))
	b.fixed = make([]int64, len(b.nodes))
	for i := range b.fixed {
		b.fixed[i] = -1
	}
	b.intern(costVec{b.index[root]: 1}, -1, "")
	for len(b.queue) > 0 {
		id := b.queue[len(b.queue)-1]
		b.queue = b.queue[:len(b.queue)-1]
		if err := b.visit(id); err != nil {
			return nil, err
		}
	}
	c := &evalCost{states: b.states}
	for _, s := range c.states {
		c.max = max(c.max, s.count)
	}
	return c, nil
}

// costVec counts the applications of subschemas (by index) to one value.
type costVec map[int32]int64

type costBuilder struct {
	nodes   []*jsonschema.Schema
	index   map[*jsonschema.Schema]int32
	inPlace [][]int32 // what each subschema applies to the value itself, once per application
	rank    []int32   // a subschema ranks before those it applies in place
	seen    []uint32  // the closure a subschema was last reached in
	gen     uint32
	mult    []int64 // its applications in that closure

	fixed []int64 // each subschema's fixed work (fixedWork), once read; -1 before

	states  []costState
	pending []costVec // a state's subschemas, until it is visited
	ids     map[string]int32
	parent  []int32  // the state a state was found from
	token   []string // the part of that state's value it is
	queue   []int32
	work    int
}

func (b *costBuilder) add(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if _, ok := b.index[s]; !ok {
		b.index[s] = int32(len(b.nodes))
		b.nodes = append(b.nodes, s)
	}
}

// collect indexes every subschema reachable from roots.
func (b *costBuilder) collect(roots []*jsonschema.Schema) {
	for _, r := range roots {
		b.add(r)
	}
	for i := 0; i < len(b.nodes); i++ {
		for _, c := range append(inPlace(b.nodes[i]), descending(b.nodes[i])...) {
			b.add(c)
		}
	}
}

// applied are the subschemas s applies to its value itself, but for a $dynamicRef: once per
// application, in the order of their keywords.
func applied(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, c := range []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else} {
		if c != nil {
			out = append(out, c)
		}
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, k := range sortedKeys(s.DependentSchemas) {
		out = append(out, s.DependentSchemas[k])
	}
	for _, k := range sortedKeys(s.Dependencies) {
		if c, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, c)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// link builds the in-place edges. A $dynamicRef whose target has its $dynamicAnchor goes where the
// outermost schema being checked puts that anchor: any subschema declaring it, or the one of them that
// applies all the others in place (the meta-schema's root over its vocabularies), since it costs at
// least as much as any of them. A $recursiveRef to a $recursiveAnchor, which the validator may resolve
// to any schema it is in, is refused.
func (b *costBuilder) link() error {
	anchored := map[string][]int32{}
	for i, s := range b.nodes {
		if s.DynamicAnchor != "" {
			anchored[s.DynamicAnchor] = append(anchored[s.DynamicAnchor], int32(i))
		}
	}
	resolved := map[string][]int32{}
	b.inPlace = make([][]int32, len(b.nodes))
	for i, s := range b.nodes {
		if s.RecursiveRef != nil && s.RecursiveRef.RecursiveAnchor {
			return fmt.Errorf("cannot be used: %s has a $recursiveRef to a $recursiveAnchor, whose target is only known as a value is checked; use $ref or $dynamicRef",
				schemaPlace(s.Location))
		}
		edges := make([]int32, 0, 4)
		for _, c := range applied(s) {
			edges = append(edges, b.index[c])
		}
		if d := s.DynamicRef; d != nil {
			if d.Anchor == "" || d.Ref.DynamicAnchor != d.Anchor {
				edges = append(edges, b.index[d.Ref])
			} else {
				targets, ok := resolved[d.Anchor]
				if !ok {
					targets = b.dominant(anchored[d.Anchor])
					resolved[d.Anchor] = targets
				}
				edges = append(edges, targets...)
			}
		}
		b.inPlace[i] = edges
	}
	return nil
}

// dominant returns the candidate that applies all the others in place (by static edges), or all of
// them.
func (b *costBuilder) dominant(cands []int32) []int32 {
	for _, c := range cands {
		reached := map[int32]bool{c: true}
		for stack := []int32{c}; len(stack) > 0; {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, e := range applied(b.nodes[n]) {
				if i := b.index[e]; !reached[i] {
					reached[i] = true
					stack = append(stack, i)
				}
			}
		}
		all := true
		for _, o := range cands {
			all = all && reached[o]
		}
		if all {
			return []int32{c}
		}
	}
	return cands
}

// order ranks the subschemas so that one comes before those it applies in place, and refuses a cycle
// (one a $dynamicRef makes: the static ones are refused before).
func (b *costBuilder) order() error {
	const (
		open = 1
		done = 2
	)
	state := make([]uint8, len(b.nodes))
	b.rank = make([]int32, len(b.nodes))
	next := int32(len(b.nodes))
	var cycle string
	var visit func(n int32)
	visit = func(n int32) {
		state[n] = open
		for _, c := range b.inPlace[n] {
			switch {
			case cycle != "":
				return
			case state[c] == open:
				cycle = schemaPlace(b.nodes[c].Location)
				return
			case state[c] == 0:
				visit(c)
			}
		}
		state[n] = done
		next--
		b.rank[n] = next
	}
	for n := range b.nodes {
		if state[n] == 0 {
			visit(int32(n))
		}
		if cycle != "" {
			return fmt.Errorf("cannot be compiled: %s refers to itself without descending into the value (through a $dynamicRef)", cycle)
		}
	}
	return nil
}

// schemaPlace names a subschema as a JSON pointer into the request's schema (#/$defs/a).
func schemaPlace(loc string) string {
	return "#" + strings.TrimPrefix(strings.TrimPrefix(loc, schemaURL), "#")
}

// intern returns the state of a set of applications (-1 for none), queueing it when it is new.
func (b *costBuilder) intern(v costVec, parent int32, token string) int32 {
	if len(v) == 0 {
		return -1
	}
	keys := make([]int32, 0, len(v))
	for n := range v {
		keys = append(keys, n)
	}
	slices.Sort(keys)
	enc := make([]byte, 0, 8*len(keys))
	for _, n := range keys {
		enc = binary.AppendUvarint(enc, uint64(n))
		enc = binary.AppendUvarint(enc, uint64(v[n]))
	}
	b.work += len(keys)
	if id, ok := b.ids[string(enc)]; ok {
		return id
	}
	id := int32(len(b.states))
	b.ids[string(enc)] = id
	b.states = append(b.states, costState{other: -1, name: -1, rest: -1})
	b.pending = append(b.pending, v)
	b.parent = append(b.parent, parent)
	b.token = append(b.token, token)
	b.queue = append(b.queue, id)
	return id
}

// closure applies a state's subschemas in place, returning every subschema that meets the value with
// its applications in b.mult, in rank order.
func (b *costBuilder) closure(v costVec) []int32 {
	b.gen++
	var reach, stack []int32
	for n := range v {
		stack = append(stack, n)
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if b.seen[n] == b.gen {
			continue
		}
		b.seen[n] = b.gen
		b.mult[n] = 0
		reach = append(reach, n)
		stack = append(stack, b.inPlace[n]...)
		b.work += 1 + len(b.inPlace[n])
	}
	for n, m := range v {
		b.mult[n] = satAdd(b.mult[n], m)
	}
	slices.SortFunc(reach, func(x, y int32) int { return int(b.rank[x] - b.rank[y]) })
	for _, n := range reach {
		for _, c := range b.inPlace[n] {
			b.mult[c] = satAdd(b.mult[c], b.mult[n])
		}
	}
	return reach
}

func satAdd(a, b int64) int64 { return min(a+b, costCap) }

func satMul(a, b int64) int64 {
	if a != 0 && b > costCap/a {
		return costCap
	}
	return a * b
}

func (v costVec) add(b *costBuilder, s *jsonschema.Schema, m int64) {
	if s != nil {
		i := b.index[s]
		v[i] = satAdd(v[i], m)
	}
}

func (v costVec) plus(w costVec) costVec {
	out := make(costVec, len(v)+len(w))
	for n, m := range v {
		out[n] = m
	}
	for n, m := range w {
		out[n] = satAdd(out[n], m)
	}
	return out
}

// visit reads a state: its evaluations and the states of its value's parts.
func (b *costBuilder) visit(id int32) error {
	v := b.pending[id]
	b.pending[id] = nil
	reach := b.closure(v)
	// Built aside and stored at the end: interning the parts' states grows b.states.
	st := costState{other: -1, name: -1, rest: -1}
	defer func() { b.states[id] = st }()
	parts := stateParts{named: map[string]costVec{}, anyProp: costVec{}, names: costVec{}, anyItem: costVec{}}
	for _, n := range reach {
		b.addEvaluations(&st, n)
		parts.gather(b, b.nodes[n], b.mult[n])
	}
	if st.count > MaxValueEvaluations {
		return fmt.Errorf("would take up to %d evaluations of one value (at %s; at most %d): its anyOf, oneOf, allOf and $ref branches multiply",
			st.count, b.path(id), MaxValueEvaluations)
	}
	if err := b.tooIntricate(); err != nil {
		return err
	}
	if err := b.internProperties(&st, id, &parts); err != nil {
		return err
	}
	return b.internItems(&st, id, reach, &parts)
}

// stateParts are the subschemas that a state's evaluations apply to the parts of its value, gathered
// while the state is visited.
type stateParts struct {
	named    map[string]costVec // each named property's value
	anyProp  costVec            // patternProperties (any may match) and unevaluatedProperties
	adds     []additional
	names    costVec // property names
	anyItem  costVec // contains and unevaluatedItems
	prefixes int     // the most items any subschema applies a subschema of its own to
}

// additional is a subschema's additionalProperties, applied mult times.
type additional struct {
	of   *jsonschema.Schema // the schema whose additionalProperties it is
	s    *jsonschema.Schema
	mult int64
}

// addEvaluations adds to st the work of subschema n's evaluations of the state's value.
func (b *costBuilder) addEvaluations(st *costState, n int32) {
	t, m := b.nodes[n], b.mult[n]
	st.count = satAdd(st.count, m)
	st.fixed = satAdd(st.fixed, satMul(m, b.fixedWork(n)))
	perByte := int64(0)
	for _, applies := range []bool{t.MinLength != nil || t.MaxLength != nil, t.Pattern != nil, t.Format != nil} {
		if applies {
			perByte++
		}
	}
	st.perByte = satAdd(st.perByte, satMul(m, perByte))
	st.perMember = satAdd(st.perMember, m)
	st.perNameByte = satAdd(st.perNameByte, satMul(m, int64(len(t.PatternProperties))))
	if t.UniqueItems {
		st.perContent = satAdd(st.perContent, m)
	}
}

// gather adds the subschemas that t, applied m times, applies to the parts of the value.
func (p *stateParts) gather(b *costBuilder, t *jsonschema.Schema, m int64) {
	for name, c := range t.Properties {
		if p.named[name] == nil {
			p.named[name] = costVec{}
		}
		p.named[name].add(b, c, m)
	}
	for _, c := range t.PatternProperties {
		p.anyProp.add(b, c, m)
	}
	if a, ok := t.AdditionalProperties.(*jsonschema.Schema); ok {
		p.adds = append(p.adds, additional{t, a, m})
	}
	p.anyProp.add(b, t.UnevaluatedProperties, m)
	p.names.add(b, t.PropertyNames, m)
	p.anyItem.add(b, t.Contains, m)
	p.anyItem.add(b, t.UnevaluatedItems, m)
	p.prefixes = max(p.prefixes, len(t.PrefixItems))
	if items, ok := t.Items.([]*jsonschema.Schema); ok {
		p.prefixes = max(p.prefixes, len(items))
	}
	b.work += len(t.Properties) + len(t.PatternProperties)
}

// internProperties interns the states of the value's properties (each named one's, and any other's)
// and of their names into st.
func (b *costBuilder) internProperties(st *costState, id int32, p *stateParts) error {
	keys := sortedKeys(p.named)
	if len(keys) > 0 {
		st.props = make(map[string]int32, len(keys))
	}
	for _, k := range keys {
		w := p.named[k].plus(p.anyProp)
		for _, a := range p.adds {
			if _, ok := a.of.Properties[k]; !ok {
				w.add(b, a.s, a.mult)
			}
		}
		b.work += len(p.adds)
		if s := b.intern(w, id, k); s >= 0 {
			st.props[k] = s
		}
		if err := b.tooIntricate(); err != nil {
			return err
		}
	}
	others := p.anyProp.plus(nil)
	for _, a := range p.adds {
		others.add(b, a.s, a.mult)
	}
	st.other = b.intern(others, id, "*")
	st.name = b.intern(p.names, id, "(a name)")
	return nil
}

// internItems interns the states of the value's items (each of the first p.prefixes, and the rest)
// into st.
func (b *costBuilder) internItems(st *costState, id int32, reach []int32, p *stateParts) error {
	for i := 0; i <= p.prefixes; i++ {
		w := p.anyItem.plus(nil)
		for _, n := range reach {
			w.add(b, itemSchema(b.nodes[n], i), b.mult[n])
		}
		b.work += len(reach)
		if i < p.prefixes {
			st.prefix = append(st.prefix, b.intern(w, id, strconv.Itoa(i)))
		} else {
			st.rest = b.intern(w, id, "*")
		}
		if err := b.tooIntricate(); err != nil {
			return err
		}
	}
	return nil
}

// tooIntricate refuses a schema once reading its costs has taken maxCostWork.
func (b *costBuilder) tooIntricate() error {
	if b.work > maxCostWork {
		return fmt.Errorf("is too intricate to bound the work of checking a value: its subschemas meet the parts of a value in more than %d ways", maxCostWork)
	}
	return nil
}

// fixedWork is the work of one evaluation of a subschema that does not grow with the value: its
// enum and const values' sizes (a comparison stops at the smaller side, and first compares lengths),
// its required and dependent names.
func (b *costBuilder) fixedWork(n int32) int64 {
	if b.fixed[n] < 0 {
		t := b.nodes[n]
		w := int64(len(t.Required) + len(t.Dependencies) + len(t.DependentRequired) + len(t.DependentSchemas))
		if t.Enum != nil {
			for _, e := range t.Enum.Values {
				w += valueUnits(e)
			}
		}
		if t.Const != nil {
			w += valueUnits(*t.Const)
		}
		b.work += int(min(w, maxCostWork))
		b.fixed[n] = w
	}
	return b.fixed[n]
}

// valueUnits is a JSON value's size in units of work: one a value and a member, and one per 16 bytes
// of a string or a name.
func valueUnits(v any) int64 {
	switch x := v.(type) {
	case string:
		return 1 + int64(len(x))/16
	case map[string]any:
		n := int64(1)
		for k, e := range x {
			n += 1 + int64(len(k))/16 + valueUnits(e)
		}
		return n
	case []any:
		n := int64(1)
		for _, e := range x {
			n += valueUnits(e)
		}
		return n
	}
	return 1
}

// itemSchema is the subschema s applies to the item at index i, when it applies one (for i beyond
// every prefix: to each item there).
func itemSchema(s *jsonschema.Schema, i int) *jsonschema.Schema {
	if i < len(s.PrefixItems) {
		return s.PrefixItems[i]
	}
	if s.Items2020 != nil {
		return s.Items2020
	}
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		return items
	case []*jsonschema.Schema:
		if i < len(items) {
			return items[i]
		}
	}
	if a, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		return a
	}
	return nil
}

// path names the part of a value a state is in (/a/*/0).
func (b *costBuilder) path(id int32) string {
	var parts []string
	for ; b.parent[id] >= 0; id = b.parent[id] {
		t := b.token[id]
		if len(t) > 32 {
			t = strings.ToValidUTF8(t[:32], "") + "..."
		}
		parts = append(parts, strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	slices.Reverse(parts)
	return "/" + strings.Join(parts, "/")
}

// answerWork walks an answer (a value ParseJSON returned) through the states: the work of checking it,
// counted up to limit (beyond it, some number above limit), or what makes it impossible to check: a
// number the validator would spend seconds reading as an exact fraction, or fail on (1e100000000).
func (c *evalCost) answerWork(v any, limit int64) (work int64, problem string) {
	w := answerWalk{states: c.states, limit: limit}
	w.walk(v, 0)
	return w.work, w.problem
}

// answerWalk is the walk of one answer through the states: the work counted so far, and the problem
// found, if any.
type answerWalk struct {
	states  []costState
	limit   int64
	work    int64
	problem string
}

// walk counts the work of checking v in state s (-1: no subschema meets it), and returns the size of
// v in units (valueUnits) for uniqueItems above it.
func (w *answerWalk) walk(v any, s int32) (size int64) {
	if w.work > w.limit || w.problem != "" {
		return 0
	}
	var st *costState
	if s >= 0 {
		st = &w.states[s]
		w.work = satAdd(w.work, satAdd(st.count, st.fixed))
	}
	switch x := v.(type) {
	case string:
		size = 1 + int64(len(x))/16
		if st != nil {
			w.work = satAdd(w.work, satMul(st.perByte, size))
		}
		return size
	case json.Number:
		if p := schemaNumber(string(x)); p != "" {
			w.problem = p
		}
	case map[string]any:
		return w.object(x, st)
	case []any:
		return w.array(x, st)
	}
	return 1
}

// object walks an object's names and values in state st (nil: none), and returns its size.
func (w *answerWalk) object(x map[string]any, st *costState) (size int64) {
	size = 1
	var names int64
	for k, e := range x {
		names += 1 + int64(len(k))/16
		child := int32(-1)
		if st != nil {
			if st.name >= 0 {
				w.walk(k, st.name)
			}
			child = st.other
			if p, ok := st.props[k]; ok {
				child = p
			}
		}
		size += w.walk(e, child)
	}
	size += names
	if st != nil {
		w.work = satAdd(w.work, satAdd(satMul(st.perMember, int64(len(x))), satMul(st.perNameByte, names)))
	}
	return size
}

// array walks an array's items in state st (nil: none), and returns its size.
func (w *answerWalk) array(x []any, st *costState) (size int64) {
	size = 1
	for i, e := range x {
		child := int32(-1)
		switch {
		case st == nil:
		case i < len(st.prefix):
			child = st.prefix[i]
		default:
			child = st.rest
		}
		size += w.walk(e, child)
	}
	if st != nil {
		w.work = satAdd(w.work, satMul(st.perContent, size))
	}
	return size
}
