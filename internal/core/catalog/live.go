package catalog

import (
	"fmt"
	"slices"
	"sync/atomic"
)

// Live is the catalog in use. Discovery replaces it whole; readers load the current one, which stays
// valid for as long as they hold it.
type Live struct{ p atomic.Pointer[Catalog] }

// NewLive returns a live catalog starting at c.
func NewLive(c *Catalog) *Live {
	l := &Live{}
	l.p.Store(c)
	return l
}

// Load returns the current catalog.
func (l *Live) Load() *Catalog { return l.p.Load() }

// Store makes c the current catalog.
func (l *Live) Store(c *Catalog) { l.p.Store(c) }

// Change is what a provider's listing changed in the catalog.
type Change struct {
	Joined []string `json:"joined"`
	Left   []string `json:"left"`
}

// Reconcile makes a provider's models those of its listing: a listed model the catalog lacks joins, a
// model of the provider its listing lacks leaves, and a model in both keeps what the catalog says of it
// (curated prices and tags outrank a listing's defaults) but for the date the provider says it made
// the model, which only the provider knows. Models match on the id sent upstream. A listed id that
// another provider's model already has joins as "provider/id". An empty listing changes nothing: a
// provider that lists no model at all is more likely broken than empty. The catalog returned is c
// itself when nothing changed.
func Reconcile(c *Catalog, provider string, listed []Model) (*Catalog, Change, error) {
	if len(listed) == 0 {
		return c, Change{}, fmt.Errorf("%s listed no model", provider)
	}
	kept, left, have, dated := keepListed(c.models, provider, listed)
	kept, joined := joinListed(kept, have, provider, listed)
	ch := Change{Joined: joined, Left: left}
	if len(ch.Joined) == 0 && len(ch.Left) == 0 && !dated {
		return c, ch, nil
	}
	next, err := New(kept)
	if err != nil {
		return c, Change{}, fmt.Errorf("%s: %w", provider, err)
	}
	slices.Sort(ch.Joined)
	slices.Sort(ch.Left)
	return next, ch, nil
}

// keepListed returns the catalog's models that stay (every other provider's, and those of the
// provider that its listing names), the ids of the provider's models that leave, the upstream ids of
// the provider's models kept, and whether a kept model took a new date of creation from the listing.
// A listing names the provider's chat models (providers.ListModels leaves embeddings out): an
// embeddings model, which only the configuration names, stays.
func keepListed(models []Model, provider string, listed []Model) (kept []Model, left []string, have map[string]bool, dated bool) {
	upstream := map[string]Model{}
	for _, m := range listed {
		upstream[m.Upstream()] = m
	}
	kept = make([]Model, 0, len(models)+len(listed))
	have = map[string]bool{}
	for _, m := range models {
		l, isListed := upstream[m.Upstream()]
		if m.Provider == provider && !isListed && !m.Has(Embeddings) {
			left = append(left, m.ID)
			continue
		}
		if m.Provider == provider {
			have[m.Upstream()] = true
			if isListed && l.Created != 0 && l.Created != m.Created {
				m.Created, dated = l.Created, true
			}
		}
		kept = append(kept, m)
	}
	return kept, left, have, dated
}

// joinListed appends to kept the listed models the provider does not have yet, with the catalog's
// defaults, and returns their ids. A model whose id another model has joins as "provider/id", or not
// at all when that is taken too.
func joinListed(kept []Model, have map[string]bool, provider string, listed []Model) ([]Model, []string) {
	taken := map[string]bool{}
	for _, m := range kept {
		taken[m.ID] = true
	}
	var joined []string
	for _, m := range listed {
		if have[m.Upstream()] {
			continue
		}
		m.Provider = provider
		m = Defaults(m)
		if taken[m.ID] {
			m.UpstreamID, m.ID = m.Upstream(), provider+"/"+m.ID
			if taken[m.ID] {
				continue
			}
		}
		have[m.Upstream()], taken[m.ID] = true, true
		kept = append(kept, m)
		joined = append(joined, m.ID)
	}
	return kept, joined
}

// PricedBy gives an unpriced model the prices of the model known by its id, or by its name without
// its vendor (a listing's "gpt-4o-mini" is the catalog's "openai/gpt-4o-mini"); a model with prices of
// its own keeps them.
func PricedBy(known *Catalog, m Model) Model {
	if !m.Unpriced || known == nil {
		return m
	}
	k, ok := known.Get(m.ID)
	if !ok {
		name := bareName(m.ID)
		for _, c := range known.All() {
			if bareName(c.ID) == name && !c.Unpriced {
				k, ok = c, true
				break
			}
		}
	}
	if ok && !k.Unpriced {
		m.InputPricePerMTok, m.OutputPricePerMTok, m.Unpriced = k.InputPricePerMTok, k.OutputPricePerMTok, false
	}
	return m
}

// Upstream is the id the model's provider knows it by.
func (m Model) Upstream() string {
	if m.UpstreamID != "" {
		return m.UpstreamID
	}
	return m.ID
}

// DefaultContext is the context window of a model whose listing does not say: small enough that a
// large task goes to models known to take it.
const DefaultContext = 8192

// Defaults fills what a listing did not say of a model: tier 2, the chat tag, an 8k context window and
// a family from its id (FamilyOf).
func Defaults(m Model) Model {
	if m.ContextWindow <= 0 {
		m.ContextWindow = DefaultContext
	}
	if m.Tier == 0 {
		m.Tier = 2
	}
	if len(m.Capabilities) == 0 {
		m.Capabilities = []string{"chat"}
	}
	if m.Family == "" {
		m.Family = FamilyOf(m.ID)
	}
	return m
}
