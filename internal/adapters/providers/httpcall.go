package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

// maxResponseBytes bounds what an adapter reads of a provider's answer.
const maxResponseBytes = 16 << 20

// NewHTTPClient returns the client adapters share: connections kept for reuse, no redirects followed
// (a redirect would carry the key elsewhere), and no timeout of its own: each call's context has the
// deadline.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.ResponseHeaderTimeout = 0
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// exchange is one HTTP round trip of an adapter.
type exchange struct {
	status int
	header http.Header
	body   []byte
}

// post sends a JSON body and reads the answer. A connection that fails is the provider's
// (connection_refused when refused, provider_unreachable otherwise); a body cut short is provider_unavailable; the caller's deadline returns
// the context's error, which the worker classifies as an upstream timeout. Messages never quote the
// request, so a key in a header cannot leak through an error.
func post(ctx context.Context, client *http.Client, url string, header http.Header, body []byte, provider, model string) (exchange, error) {
	header.Set("Content-Type", "application/json")
	return roundTrip(ctx, client, http.MethodPost, url, header, bytes.NewReader(body), provider, model)
}

// roundTrip sends one request and reads the answer, classifying failures as post does.
func roundTrip(ctx context.Context, client *http.Client, method, url string, header http.Header, body io.Reader, provider, model string) (exchange, error) {
	resp, err := send(ctx, client, method, url, header, body, provider, model)
	if err != nil {
		return exchange{}, err
	}
	defer resp.Body.Close()
	return readAnswer(ctx, resp, provider, model)
}

// send sends one request and returns the answer with its body unread: a stream is read as it comes.
func send(ctx context.Context, client *http.Client, method, url string, header http.Header, body io.Reader, provider, model string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, &resilience.Error{Kind: resilience.Internal, Provider: provider, Model: model, Err: fmt.Errorf("build the request: %w", errors.Unwrap(err))}
	}
	req.Header = header
	resp, err := client.Do(req)
	if err != nil {
		return nil, transportError(ctx, err, req.URL.Host, provider, model)
	}
	return resp, nil
}

// readAnswer reads a whole answer, at most maxResponseBytes of it.
func readAnswer(ctx context.Context, resp *http.Response, provider, model string) (exchange, error) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return exchange{}, ctx.Err()
		}
		return exchange{}, &resilience.Error{Kind: resilience.ProviderUnavailable, Provider: provider, Model: model, Status: resp.StatusCode,
			Err: errors.New("the answer was cut off")}
	}
	if len(raw) > maxResponseBytes {
		return exchange{}, &resilience.Error{Kind: resilience.ProviderUnavailable, Provider: provider, Model: model, Status: resp.StatusCode,
			Err: fmt.Errorf("the answer is larger than %d bytes", maxResponseBytes)}
	}
	return exchange{status: resp.StatusCode, header: resp.Header, body: raw}, nil
}

// transportError classifies a round trip that failed before an answer came. A refused connection is
// connection_refused with the upstream's host (host:port; base URLs carry no credentials) as its
// message: nothing listens there, which the caller is told by name.
func transportError(ctx context.Context, err error, host, provider, model string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &resilience.Error{Kind: resilience.ConnectionRefused, Scope: resilience.ScopeProvider, Provider: provider, Model: model, Err: errors.New(host)}
	}
	// url.Error quotes the URL, which holds no secret (keys travel in headers only); keep just the cause.
	msg := err.Error()
	if cause := errors.Unwrap(err); cause != nil {
		msg = cause.Error()
	}
	return &resilience.Error{Kind: resilience.ProviderUnreachable, Scope: resilience.ScopeProvider, Provider: provider, Model: model, Err: errors.New(msg)}
}

// failure builds a classified error from an HTTP status and what the body said.
func failure(provider, model string, status int, kind resilience.Kind, scope resilience.Scope, limits *ratelimit.Upstream, message string) *resilience.Error {
	e := &resilience.Error{Kind: kind, Scope: scope, Provider: provider, Model: model, Status: status, Err: errors.New(clip(message))}
	if limits != nil {
		e.RetryAfter = limits.Exhausted()
	}
	return e
}

// withoutKey strikes the key from what a provider sent back: a server that echoes the key it was given
// in an error message or an answer must not carry it into logs and records.
func withoutKey(key secret.String) func(Reply, error) (Reply, error) {
	return func(r Reply, err error) (Reply, error) {
		if k := key.Reveal(); k != "" {
			r.Text = strings.ReplaceAll(r.Text, k, key.String())
			for i := range r.ToolCalls {
				r.ToolCalls[i].Arguments = strings.ReplaceAll(r.ToolCalls[i].Arguments, k, key.String())
			}
		}
		return r, withoutKeyErr(key, err)
	}
}

// withoutKeyErr strikes the key from a classified error's message.
func withoutKeyErr(key secret.String, err error) error {
	k := key.Reveal()
	var e *resilience.Error
	if k != "" && errors.As(err, &e) && e.Err != nil && strings.Contains(e.Err.Error(), k) {
		e.Err = errors.New(strings.ReplaceAll(e.Err.Error(), k, key.String()))
	}
	return err
}

// clip bounds a provider's error message carried into records and logs.
func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "..."
	}
	if s == "" {
		s = "no message"
	}
	return s
}

// tooLarge reports whether an error message says the request exceeds the model's context.
func tooLarge(msg string) bool {
	m := strings.ToLower(msg)
	for _, w := range []string{"context_length_exceeded", "context length", "maximum context", "too long", "too many tokens", "exceeds the maximum number of tokens", "request_too_large"} {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// limitHeaders reads a provider's rate-limit headers: OpenAI's x-ratelimit-{limit,remaining,reset}-
// {requests,tokens} (resets as durations such as "6m0s", or seconds), Cerebras' per-day requests and
// per-minute tokens, OpenRouter's x-ratelimit-{limit,remaining,reset} (a reset in epoch milliseconds),
// Anthropic's anthropic-ratelimit-* (RFC 3339 resets), and Retry-After or retry-after-ms. It returns nil
// when there is none.
func limitHeaders(h http.Header, now time.Time) *ratelimit.Upstream {
	r := limitReader{h: h, now: now}
	u := ratelimit.Upstream{RemainingRequests: -1, RemainingTokens: -1}
	if v, ok := r.count(limitRequestsHeaders); ok {
		u.LimitRequests = v
	}
	if v, ok := r.count(remainingRequestsHeaders); ok {
		u.RemainingRequests = v
	}
	u.ResetRequests = r.reset(resetRequestsHeaders)
	if v, ok := r.count(limitTokensHeaders); ok {
		u.LimitTokens = v
	}
	if v, ok := r.count(remainingTokensHeaders); ok {
		u.RemainingTokens = v
	}
	u.ResetTokens = r.reset(resetTokensHeaders)
	u.RetryAfter = r.retryAfter()
	if !r.found {
		return nil
	}
	u = u.Bounded()
	return &u
}

// limitReader reads rate-limit headers, noting whether it found any it could read.
type limitReader struct {
	h     http.Header
	now   time.Time
	found bool
}

// count reads the first of the headers that holds a number, bounded to [-1, MaxUpstreamCount].
func (r *limitReader) count(names []string) (int64, bool) {
	for _, n := range names {
		if v := r.h.Get(n); v != "" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && !math.IsNaN(f) {
				r.found = true
				return int64(min(max(f, -1), ratelimit.MaxUpstreamCount)), true
			}
		}
	}
	return 0, false
}

// reset reads the first of the headers that holds a reset, as the wait until it.
func (r *limitReader) reset(names []string) time.Duration {
	for _, n := range names {
		if v := r.h.Get(n); v != "" {
			if d, ok := parseReset(v, r.now); ok {
				r.found = true
				return d
			}
		}
	}
	return 0
}

// retryAfter reads retry-after-ms when it is sent (bounded by MaxUpstreamWait), else Retry-After.
func (r *limitReader) retryAfter() time.Duration {
	if v := r.h.Get(retryAfterMsHeader); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			r.found = true
			return time.Duration(min(ms, float64(ratelimit.MaxUpstreamWait.Milliseconds())) * float64(time.Millisecond))
		}
	} else if v := r.h.Get("Retry-After"); v != "" {
		if d, ok := resilience.ParseRetryAfter(v, r.now); ok {
			r.found = true
			return d
		}
	}
	return 0
}

// The rate-limit headers each provider may send, in their canonical form: Header.Get takes a canonical
// name as it is, where it canonicalised (and allocated) a lower-case one on every answer.
var (
	limitRequestsHeaders = canonicalHeaders("x-ratelimit-limit-requests", "x-ratelimit-limit-requests-day",
		"anthropic-ratelimit-requests-limit", "x-ratelimit-limit")
	remainingRequestsHeaders = canonicalHeaders("x-ratelimit-remaining-requests", "x-ratelimit-remaining-requests-day",
		"anthropic-ratelimit-requests-remaining", "x-ratelimit-remaining")
	resetRequestsHeaders = canonicalHeaders("x-ratelimit-reset-requests", "x-ratelimit-reset-requests-day",
		"anthropic-ratelimit-requests-reset", "x-ratelimit-reset")
	limitTokensHeaders     = canonicalHeaders("x-ratelimit-limit-tokens", "x-ratelimit-limit-tokens-minute", "anthropic-ratelimit-tokens-limit")
	remainingTokensHeaders = canonicalHeaders("x-ratelimit-remaining-tokens", "x-ratelimit-remaining-tokens-minute", "anthropic-ratelimit-tokens-remaining")
	resetTokensHeaders     = canonicalHeaders("x-ratelimit-reset-tokens", "x-ratelimit-reset-tokens-minute", "anthropic-ratelimit-tokens-reset")
	retryAfterMsHeader     = http.CanonicalHeaderKey("retry-after-ms")
)

func canonicalHeaders(names ...string) []string {
	for i, n := range names {
		names[i] = http.CanonicalHeaderKey(n)
	}
	return names
}

// parseReset reads a reset: a duration ("6m0s", "20ms"), seconds ("1.5"), an RFC 3339 time, epoch
// seconds or epoch milliseconds.
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if d, err := time.ParseDuration(v); err == nil {
		return max(d, 0), true
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		switch {
		case f > 1e12: // epoch milliseconds
			return max(time.UnixMilli(int64(f)).Sub(now), 0), true
		case f > 1e9: // epoch seconds: no window lasts thirty years
			return max(time.Unix(int64(f), 0).Sub(now), 0), true
		}
		return time.Duration(min(max(f, 0), ratelimit.MaxUpstreamWait.Seconds()) * float64(time.Second)), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// skipKeepAlive drops what some providers send before the JSON body while they work (DeepSeek: blank
// lines or ": keep-alive" comments).
func skipKeepAlive(body []byte) []byte {
	for len(body) > 0 {
		body = bytes.TrimLeft(body, " \t\r\n")
		if !bytes.HasPrefix(body, []byte(":")) {
			return body
		}
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			body = body[i+1:]
		} else {
			return nil
		}
	}
	return body
}
