package actors

import (
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/platform/metrics"
)

// testCatalog is a live catalog of models of one provider; an id written "other:id" is other's.
func testCatalog(t *testing.T, provider string, ids ...string) *catalog.Live {
	t.Helper()
	models := make([]catalog.Model, len(ids))
	for i, id := range ids {
		p := provider
		if before, after, ok := strings.Cut(id, ":"); ok {
			p, id = before, after
		}
		models[i] = catalog.Model{ID: id, Provider: p, ContextWindow: 128000, Tier: 2}
	}
	c, err := catalog.New(models)
	if err != nil {
		t.Fatal(err)
	}
	return catalog.NewLive(c)
}

// crash is a test's message that makes the actor receiving it panic (through crashOn), the way a bug
// would.
type crash struct{ why string }

// crashOn is the receive middleware that panics on a crash.
func crashOn(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		if c, ok := env.Message.(crash); ok {
			panic(c.why)
		}
		next(ctx, env)
	}
}

// droppedMetric reads conclave_actor_messages_dropped_total for an actor kind and reason.
func droppedMetric(t *testing.T, m *metrics.Metrics, kind, reason string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "conclave_actor_messages_dropped_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["actor"] == kind && labels["reason"] == reason {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}
