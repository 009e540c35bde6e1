package resilience

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBackoff caps any single wait; a schedule that asks for more is a misconfiguration, not a plan.
const maxBackoff = 5 * time.Minute

// Backoff returns the wait before retry number attempt (from 0): base × 2^attempt + random(0, base × 0.5),
// so attempt 0 with a 1 s base waits between 1.0 and 1.5 s.
func Backoff(base time.Duration, attempt int, rng *rand.Rand) time.Duration {
	if base <= 0 {
		return 0
	}
	if attempt < 0 {
		attempt = 0
	}
	d := base
	for i := 0; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d += time.Duration(rng.Int64N(int64(base/2) + 1))
	return min(d, maxBackoff)
}

// Delay is the wait before retry number attempt under policy p: the upstream's requested wait when it
// gave one (Retry-After or a rate-limit reset), otherwise the backoff schedule.
func (p Policy) Delay(attempt int, retryAfter time.Duration, rng *rand.Rand) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, maxBackoff)
	}
	return Backoff(p.Base, attempt, rng)
}

// ParseRetryAfter reads a Retry-After header value: delay-seconds (integer or decimal) or an HTTP date.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(value, 64); err == nil {
		if !(secs >= 0) || math.IsInf(secs, 1) { // NaN and negative waits are no waits
			return 0, false
		}
		return min(time.Duration(min(secs, MaxRetryAfter.Seconds())*float64(time.Second)), MaxRetryAfter), true
	}
	if t, err := http.ParseTime(value); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryAfter), true
	}
	return 0, false
}

// MaxRetryAfter bounds the wait a Retry-After can ask for: longer is a misconfigured server, and would
// hold a provider for as long.
const MaxRetryAfter = 24 * time.Hour
