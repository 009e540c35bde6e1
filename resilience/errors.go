package resilience

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Kind is a class of failure from the specification's error table.
type Kind string

// Recoverable kinds: retried with backoff and jitter.
const (
	WorkerTimeout           Kind = "worker_timeout"
	RateLimited             Kind = "rate_limited"
	ProviderUnavailable     Kind = "provider_unavailable" // 500, 502, 503 and the like
	SSHRefused              Kind = "ssh_refused"
	NetworkTimeout          Kind = "network_timeout"
	RedisLost               Kind = "redis_lost"
	BlueprintDirUnavailable Kind = "blueprint_dir_unavailable"
)

// Non-recoverable kinds: returned at once.
const (
	InvalidAPIKey       Kind = "invalid_api_key"
	ModelNotFound       Kind = "model_not_found"
	RequestTooLarge     Kind = "request_too_large"
	AllWorkersOffline   Kind = "all_workers_offline"
	AllProvidersDown    Kind = "all_providers_down"
	DatabaseUnreachable Kind = "database_unreachable"
	MalformedRequest    Kind = "malformed_request"
	// Internal is a fault of Conclave itself: the only kind answered with 500 when the database is not involved.
	Internal Kind = "internal"
	// Cancelled marks a call abandoned by Conclave (collection ended first); nobody is at fault.
	Cancelled Kind = "cancelled"
	// EmptyAnswer is a call that succeeded without any answer in it: a poor answer, not a provider fault.
	EmptyAnswer Kind = "empty_answer"
)

// Target says where a retry goes.
type Target string

// Retry targets.
const (
	OtherWorker   Target = "other_worker"
	SameProvider  Target = "same_provider"
	AfterReset    Target = "after_reset" // the same provider once its rate-limit window resets
	LocalFallback Target = "local_fallback"
	EmbeddedSet   Target = "embedded"
)

// Policy is one row of the retry table.
type Policy struct {
	Kind        Kind
	Recoverable bool
	Target      Target
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int
	// Base is the backoff base: retry n (from 0) waits Base*2^n plus jitter up to Base/2.
	Base time.Duration
	// Status is the HTTP status returned to the caller when the failure is final.
	Status int
}

// ShouldRetry reports whether retry number attempt (from 0) is allowed.
func (p Policy) ShouldRetry(attempt int) bool { return p.Recoverable && attempt < p.MaxRetries }

// table is the specification's error table.
var table = map[Kind]Policy{
	WorkerTimeout:           {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: time.Second, Status: http.StatusGatewayTimeout},
	RateLimited:             {Recoverable: true, Target: AfterReset, MaxRetries: 3, Base: time.Second, Status: http.StatusTooManyRequests},
	ProviderUnavailable:     {Recoverable: true, Target: SameProvider, MaxRetries: 2, Base: time.Second, Status: http.StatusBadGateway},
	SSHRefused:              {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: time.Second, Status: http.StatusServiceUnavailable},
	NetworkTimeout:          {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: 2 * time.Second, Status: http.StatusGatewayTimeout},
	RedisLost:               {Recoverable: true, Target: LocalFallback, MaxRetries: 2, Base: time.Second, Status: http.StatusServiceUnavailable},
	BlueprintDirUnavailable: {Recoverable: true, Target: EmbeddedSet, MaxRetries: 1, Base: 0, Status: http.StatusInternalServerError},
	InvalidAPIKey:           {Status: http.StatusUnauthorized},
	ModelNotFound:           {Status: http.StatusNotFound},
	RequestTooLarge:         {Status: http.StatusRequestEntityTooLarge},
	AllWorkersOffline:       {Status: http.StatusServiceUnavailable},
	AllProvidersDown:        {Status: http.StatusServiceUnavailable},
	DatabaseUnreachable:     {Status: http.StatusInternalServerError},
	MalformedRequest:        {Status: http.StatusBadRequest},
	Internal:                {Status: http.StatusInternalServerError},
	EmptyAnswer:             {Status: http.StatusBadGateway},
}

// PolicyFor returns the retry-table row for kind; unknown kinds are treated as Internal.
func PolicyFor(kind Kind) Policy {
	p, ok := table[kind]
	if !ok {
		kind = Internal
		p = table[Internal]
	}
	p.Kind = kind
	return p
}

// Error is a classified failure with the context needed to decide on a retry and to report it.
type Error struct {
	Kind     Kind
	Provider string
	Model    string
	Worker   string
	// Status is the upstream HTTP status, when there was one.
	Status int
	// RetryAfter is the wait the upstream asked for (Retry-After or a rate-limit reset); zero when none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	msg := string(e.Kind)
	for _, kv := range [][2]string{{"provider", e.Provider}, {"model", e.Model}, {"worker", e.Worker}} {
		if kv[1] != "" {
			msg += " " + kv[0] + "=" + kv[1]
		}
	}
	if e.Status != 0 {
		msg += fmt.Sprintf(" status=%d", e.Status)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of a classified error, or Internal for anything else.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// RetryAfterOf returns the upstream's requested wait carried by err, or zero.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// KindForStatus maps an upstream provider's HTTP status to a kind. Statuses outside the table (400, 422,
// 402 and other client errors) are non-recoverable: retrying the same request cannot help.
func KindForStatus(status int) Kind {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return InvalidAPIKey
	case status == http.StatusNotFound:
		return ModelNotFound
	case status == http.StatusRequestEntityTooLarge:
		return RequestTooLarge
	case status == http.StatusTooManyRequests:
		return RateLimited
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return NetworkTimeout
	case status >= 500:
		return ProviderUnavailable // 500, 502, 503, 529 overloaded
	}
	return MalformedRequest
}

// CountsAgainstProvider reports whether a failure of this kind is the provider's fault and so feeds its
// breaker: server errors and calls that time out. A refused worker host is the host's fault (its own
// breaker counts it), rate limiting is the rate limiter's business, and caller mistakes are no fault.
func CountsAgainstProvider(kind Kind) bool {
	switch kind {
	case WorkerTimeout, ProviderUnavailable, NetworkTimeout:
		return true
	}
	return false
}
