package store

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/messages"
)

// Filter selects the records of a listing. Zero fields select everything.
type Filter struct {
	Category string
	// Model selects the records in which the model was called.
	Model string
	// Outcome is ok, degraded or failed.
	Outcome string
	// Since and Until bound when the request was received: Since <= received < Until.
	Since, Until time.Time
	// Limit is the page size (DefaultLimit when zero, at most MaxLimit).
	Limit int
	// After is the Next of the previous page.
	After string
}

// Page bounds of a listing.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Page is one page of a listing; Next, when not empty, asks for the page after it.
type Page struct {
	Records []Summary `json:"records"`
	Next    string    `json:"next,omitempty"`
}

// Summary is a record as a listing shows it.
type Summary struct {
	RequestID       string    `json:"request_id"`
	ClientRequestID string    `json:"client_request_id,omitempty"`
	NodeID          string    `json:"node_id,omitempty"`
	ReceivedAt      time.Time `json:"received_at"`
	Category        string    `json:"category"`
	Blueprint       string    `json:"blueprint"`
	Strategy        string    `json:"strategy"`
	Outcome         string    `json:"outcome"`
	StatusCode      int       `json:"status_code"`
	ErrorCode       string    `json:"error_code,omitempty"`
	Models          []string  `json:"models"`
	TotalMs         float64   `json:"total_ms"`
	InputTokens     int64     `json:"input_tokens"`
	OutputTokens    int64     `json:"output_tokens"`
	Cost            float64   `json:"cost"`
	Feedback        bool      `json:"feedback"`
}

// Summarize returns a record's summary.
func Summarize(e *messages.Execution, feedback bool) Summary {
	s := Summary{RequestID: e.RequestId, ClientRequestID: e.ClientRequestId, NodeID: e.NodeId, ReceivedAt: e.GetReceivedAt().AsTime(),
		Category: e.GetClassification().GetCategory(), Blueprint: e.GetBlueprint().GetName(), Strategy: e.GetBlueprint().GetStrategy(),
		Outcome: Outcome(e), StatusCode: int(e.StatusCode), ErrorCode: e.GetError().GetCode(), TotalMs: e.GetPhases().GetTotalMs(),
		InputTokens: int64(e.GetUsage().GetInputTokens()), OutputTokens: int64(e.GetUsage().GetOutputTokens()), Cost: e.Cost,
		Feedback: feedback || len(e.Feedback) > 0, Models: []string{}}
	for _, r := range e.Results {
		s.Models = append(s.Models, r.Model)
	}
	return s
}

// Matches reports whether a record, by its summary, passes the filter (the cursor aside).
func (f Filter) Matches(s Summary) bool {
	switch {
	case f.Category != "" && s.Category != f.Category,
		f.Outcome != "" && s.Outcome != f.Outcome,
		!f.Since.IsZero() && s.ReceivedAt.Before(f.Since),
		!f.Until.IsZero() && !s.ReceivedAt.Before(f.Until):
		return false
	case f.Model != "":
		return slices.Contains(s.Models, f.Model)
	}
	return true
}

// PageSize is the filter's page size within its bounds.
func (f Filter) PageSize() int {
	if f.Limit <= 0 {
		return DefaultLimit
	}
	return min(f.Limit, MaxLimit)
}

// Cursor is a position in the newest-first order of records: by time received, then request id.
type Cursor struct {
	ReceivedAt time.Time
	RequestID  string
}

// ErrBadCursor is returned for an After that no listing gave.
var ErrBadCursor = errors.New("after is not a cursor of this listing")

// Encode returns the cursor as an opaque string.
func (c Cursor) Encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.ReceivedAt.UnixNano(), 10) + ":" + c.RequestID))
}

// ParseCursor reads an After; the empty string is the start.
func ParseCursor(s string) (Cursor, bool, error) {
	if s == "" {
		return Cursor{}, false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 512 {
		return Cursor{}, false, ErrBadCursor
	}
	ns, id, ok := strings.Cut(string(raw), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return Cursor{}, false, ErrBadCursor
	}
	return Cursor{ReceivedAt: time.Unix(0, n).UTC(), RequestID: id}, true, nil
}

// Before reports whether a record at (at, id) comes after the cursor in newest-first order.
func (c Cursor) Before(at time.Time, id string) bool {
	return at.Before(c.ReceivedAt) || (at.Equal(c.ReceivedAt) && id < c.RequestID)
}

// ValidOutcome reports whether s names an outcome.
func ValidOutcome(s string) error {
	switch s {
	case "", OutcomeOK, OutcomeDegraded, OutcomeFailed:
		return nil
	}
	return fmt.Errorf("outcome must be %s, %s or %s", OutcomeOK, OutcomeDegraded, OutcomeFailed)
}
