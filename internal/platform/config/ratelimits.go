package config

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/conclave-ai/conclave/internal/core/providerstate"
)

// RateLimits is the configuration's rate_limits object: each provider's limits under its name, and
// max_queue_seconds beside them, so that files written when the object held only providers still load.
type RateLimits struct {
	// Providers are the limits by provider name; a provider the map leaves out has none of its own.
	Providers map[string]providerstate.Limits
	// MaxQueueSeconds is the longest a request waits for providers' rate limits, counted from its
	// receipt: a call whose provider's window has no room before then is refused at once, and a request
	// left without answers gets 503 rate_limited with Retry-After instead of being held.
	MaxQueueSeconds float64
}

// maxQueueKey is the one key of rate_limits that is not a provider.
const maxQueueKey = "max_queue_seconds"

// The bounds of max_queue_seconds: a millisecond (less is no wait at all, and not meant), and ten
// minutes (beyond that a request is held, not queued).
const (
	MinQueueSeconds = 0.001
	MaxQueueSeconds = 600
)

// UnmarshalJSON reads a rate_limits object. Like a map, it adds the providers it names to those it
// holds, each replacing that provider's limits whole; null empties it, as it emptied the map.
func (r *RateLimits) UnmarshalJSON(raw []byte) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		r.Providers = nil
		return nil
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return fmt.Errorf("rate_limits: %w", err)
	}
	for name, v := range entries {
		if name == maxQueueKey {
			if err := json.Unmarshal(v, &r.MaxQueueSeconds); err != nil {
				return fmt.Errorf("rate_limits %s: %w", maxQueueKey, err)
			}
			continue
		}
		var l providerstate.Limits
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields() // a typo in a limit's name must not pass for no limit
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("rate_limits %s: %w", name, err)
		}
		if r.Providers == nil {
			r.Providers = map[string]providerstate.Limits{}
		}
		r.Providers[name] = l
	}
	return nil
}

// MarshalJSON writes the object UnmarshalJSON reads.
func (r RateLimits) MarshalJSON() ([]byte, error) {
	out := make(map[string]any, len(r.Providers)+1)
	for name, l := range r.Providers {
		out[name] = l
	}
	out[maxQueueKey] = r.MaxQueueSeconds
	return json.Marshal(out)
}
