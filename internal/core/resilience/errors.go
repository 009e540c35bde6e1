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
	// UpstreamTimeout is a call the provider did not answer within its budget (the specification's
	// "worker timeout": the worker is fine, the model was too slow).
	UpstreamTimeout Kind = "upstream_timeout"
	// HostTimeout is a worker host that did not return a call's result within the call's budget plus a
	// grace period: the host, not the provider, stopped answering (the specification's "network timeout").
	HostTimeout         Kind = "host_timeout"
	RateLimited         Kind = "rate_limited"
	ProviderUnavailable Kind = "provider_unavailable" // 500, 502, 503, 529 and the like
	// ProviderUnreachable is a connection to the provider that failed: reset, no route, a name that
	// does not resolve, a failed TLS handshake.
	ProviderUnreachable Kind = "provider_unreachable"
	SSHRefused          Kind = "ssh_refused"
	// WorkerUnavailable is a job refused by its worker because the worker's breaker is open.
	WorkerUnavailable       Kind = "worker_unavailable"
	RedisLost               Kind = "redis_lost"
	BlueprintDirUnavailable Kind = "blueprint_dir_unavailable"
	// Internal is a fault of Conclave itself (a panic in a call or a restarted worker): the only kind
	// answered with 500 when the database is not involved. It blames no provider, model or host.
	Internal Kind = "internal"
)

// Non-recoverable kinds: returned at once.
const (
	InvalidAPIKey Kind = "invalid_api_key"
	// PaymentRequired is a provider account without credits (402): waiting does not cure it.
	PaymentRequired Kind = "payment_required"
	// ConnectionRefused is a provider whose host refused the connection: nothing listens where it
	// should answer (an upstream not started yet, or stopped). The provider's fault, never the model's;
	// a backoff of seconds within a request does not bring a server up, so the call is not retried
	// there and the request fails over to other providers' models, or answers at once.
	ConnectionRefused   Kind = "connection_refused"
	ModelNotFound       Kind = "model_not_found"
	RequestTooLarge     Kind = "request_too_large"
	AllWorkersOffline   Kind = "all_workers_offline"
	AllProvidersDown    Kind = "all_providers_down"
	DatabaseUnreachable Kind = "database_unreachable"
	MalformedRequest    Kind = "malformed_request"
	// Cancelled marks a call Conclave stopped (collection ended first, or the caller's shorter deadline
	// cut it): nobody is at fault.
	Cancelled Kind = "cancelled"
	// NotSent marks a call that never reached a worker: it waited for a permit or in a busy worker's queue
	// when collection ended.
	NotSent Kind = "not_sent"
	// EmptyAnswer is a call that succeeded without any answer in it: a poor answer, not a provider fault.
	EmptyAnswer Kind = "empty_answer"
)

// Outcomes of a whole request that are not the failure of one call.
const (
	// NoResponses: collection ended without a single answer.
	NoResponses Kind = "no_responses"
	// UnknownBlueprint: the request's category names no blueprint.
	UnknownBlueprint Kind = "unknown_blueprint"
	// ShuttingDown: the request was still running when the shutdown timeout ended, or arrived after.
	ShuttingDown Kind = "shutting_down"
	// ClientClosed: the caller went away before the answer (nginx's 499).
	ClientClosed Kind = "client_closed_request"
	// Overloaded: the requests in flight already hold as many bytes as the configuration allows.
	Overloaded Kind = "overloaded"
	// Interrupted: the controller running the request died; another settled its calls at their
	// reservations (the journal of calls) and recorded it so.
	Interrupted Kind = "interrupted"
	// NoValidAnswer: models answered, but not one answer is what the request asked for (not JSON,
	// against its schema, a call of a tool it did not offer); the failure's details name each model's
	// problem. A bad gateway: the upstreams answered, badly.
	NoValidAnswer Kind = "no_valid_answer"
)

// Refusals of a caller's API key, before anything is selected or called: the caller's own limits, so
// 429 (and 403 for a model the key may not call), never a provider's fault.
const (
	// KeyRateLimited: the key's requests, tokens per minute or requests at once are spent.
	KeyRateLimited Kind = "rate_limit_exceeded"
	// BudgetExceeded: the key has spent its budget for the period.
	BudgetExceeded Kind = "budget_exceeded"
	// ModelNotAllowed: the request names a model outside the key's list.
	ModelNotAllowed Kind = "model_not_allowed"
	// KeyRevoked: the key was revoked or has expired since the request was let in.
	KeyRevoked Kind = "key_revoked"
	// ModelNotPriced: a key with a budget asked for a model without a price, which it could call
	// without end.
	ModelNotPriced Kind = "model_not_priced"
)

// CallersOwn reports whether a failure is the caller's own limit (its key's budget, limits, models):
// a call refused for it was never sent, and no other model can be asked in its place.
func CallersOwn(k Kind) bool {
	switch k {
	case KeyRateLimited, BudgetExceeded, ModelNotAllowed, KeyRevoked, ModelNotPriced:
		return true
	}
	return false
}

// StatusClientClosed is the status recorded for a request whose caller went away (no one reads it).
const StatusClientClosed = 499

// Scope says how much of a provider a failure concerns: one model (that model's 5xx, 404, a 429 on
// its own quota) or the whole provider (connection errors, a bad key, a gateway failing every model).
type Scope uint8

// The scopes. An unknown scope is treated as the model's: a provider serving 162 models is not down
// because one of them is.
const (
	ScopeUnknown Scope = iota
	ScopeModel
	ScopeProvider
)

var scopeNames = [...]string{"", "model", "provider"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// ParseScope reads a scope by name; anything else is ScopeUnknown.
func ParseScope(name string) Scope {
	switch name {
	case "model":
		return ScopeModel
	case "provider":
		return ScopeProvider
	}
	return ScopeUnknown
}

// Target says where a retry goes.
type Target string

// Retry targets.
const (
	OtherWorker   Target = "other_worker"
	SameProvider  Target = "same_provider"
	AfterReset    Target = "after_reset" // the same model once its rate-limit window resets
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

// table is the specification's error table, with the rows this implementation adds: a connection error
// to the provider is retried like its 5xx, a refused or crashed worker like a refused host, and
// Conclave's own fault once on another worker.
var table = map[Kind]Policy{
	UpstreamTimeout: {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: time.Second, Status: http.StatusGatewayTimeout},
	HostTimeout:     {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: 2 * time.Second, Status: http.StatusGatewayTimeout},
	// A rate limit that ends a request is Conclave's provider being busy, not the caller exceeding a quota
	// of its own: 503 with Retry-After, not 429.
	RateLimited:             {Recoverable: true, Target: AfterReset, MaxRetries: 3, Base: time.Second, Status: http.StatusServiceUnavailable},
	ProviderUnavailable:     {Recoverable: true, Target: SameProvider, MaxRetries: 2, Base: time.Second, Status: http.StatusBadGateway},
	ProviderUnreachable:     {Recoverable: true, Target: SameProvider, MaxRetries: 2, Base: time.Second, Status: http.StatusBadGateway},
	SSHRefused:              {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: time.Second, Status: http.StatusServiceUnavailable},
	WorkerUnavailable:       {Recoverable: true, Target: OtherWorker, MaxRetries: 3, Base: time.Second, Status: http.StatusServiceUnavailable},
	RedisLost:               {Recoverable: true, Target: LocalFallback, MaxRetries: 2, Base: time.Second, Status: http.StatusServiceUnavailable},
	BlueprintDirUnavailable: {Recoverable: true, Target: EmbeddedSet, MaxRetries: 1, Base: 0, Status: http.StatusInternalServerError},
	Internal:                {Recoverable: true, Target: OtherWorker, MaxRetries: 1, Base: time.Second, Status: http.StatusInternalServerError},
	InvalidAPIKey:           {Status: http.StatusUnauthorized},
	PaymentRequired:         {Status: http.StatusServiceUnavailable},
	ConnectionRefused:       {Status: http.StatusServiceUnavailable},
	ModelNotFound:           {Status: http.StatusNotFound},
	RequestTooLarge:         {Status: http.StatusRequestEntityTooLarge},
	AllWorkersOffline:       {Status: http.StatusServiceUnavailable},
	AllProvidersDown:        {Status: http.StatusServiceUnavailable},
	DatabaseUnreachable:     {Status: http.StatusInternalServerError},
	MalformedRequest:        {Status: http.StatusBadRequest},
	EmptyAnswer:             {Status: http.StatusBadGateway},
	Cancelled:               {Status: http.StatusServiceUnavailable},
	NotSent:                 {Status: http.StatusServiceUnavailable},
	NoResponses:             {Status: http.StatusServiceUnavailable},
	UnknownBlueprint:        {Status: http.StatusNotFound},
	ShuttingDown:            {Status: http.StatusServiceUnavailable},
	ClientClosed:            {Status: StatusClientClosed},
	Overloaded:              {Status: http.StatusServiceUnavailable},
	NoValidAnswer:           {Status: http.StatusBadGateway},
	Interrupted:             {Status: http.StatusInternalServerError},
	KeyRateLimited:          {Status: http.StatusTooManyRequests},
	BudgetExceeded:          {Status: http.StatusTooManyRequests},
	ModelNotAllowed:         {Status: http.StatusForbidden},
	ModelNotPriced:          {Status: http.StatusForbidden},
	KeyRevoked:              {Status: http.StatusUnauthorized},
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

// StatusOf is the HTTP status that answers a request failing with kind: the one place where failures
// become statuses.
func StatusOf(kind Kind) int { return PolicyFor(kind).Status }

// Error is a classified failure with the context needed to decide on a retry and to report it.
type Error struct {
	Kind Kind
	// Scope says whether the failure concerns the model alone or the whole provider.
	Scope    Scope
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

// ScopeOf returns the scope of a classified error, or ScopeUnknown.
func ScopeOf(err error) Scope {
	var e *Error
	if errors.As(err, &e) {
		return e.Scope
	}
	return ScopeUnknown
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
	case status >= 500 || status == http.StatusRequestTimeout:
		return ProviderUnavailable // 500, 502, 503, 504, 529 overloaded; a 408 is the upstream giving up too
	}
	return MalformedRequest
}
