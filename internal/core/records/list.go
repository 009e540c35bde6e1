// Package records owns what the records' readers ask and are answered: a listing's filter, pages and
// cursors, a key's spend, the analyses' rows, and the sentinel of a store that cannot be reached. The
// doors read records in these terms; the store answers in them.
package records

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/messages"
)

// Filter selects the records of a listing. Zero fields select everything.
type Filter struct {
	Category string
	// Model selects the records in which the model was called.
	Model string
	// Outcome is ok, degraded or failed.
	Outcome string
	// KeyID selects the records of one API key's requests.
	KeyID string
	// Since and Until bound when the request was received: Since <= received < Until.
	Since, Until time.Time
	// Limit is the page size (DefaultLimit when zero, at most MaxLimit).
	Limit int
	// After is the Next of a page, asking for the older records after it; Before is the Prev of a
	// page, asking for the newer records before it. At most one of them is set.
	After, Before string
}

// Page bounds of a listing.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Page is one page of a listing, newest first. Next, when not empty, asks for the older page after
// it (as After), Prev for the newer page before it (as Before).
type Page struct {
	Records []Summary `json:"records"`
	Next    string    `json:"next,omitempty"`
	Prev    string    `json:"prev,omitempty"`
}

// Summary is a record as a listing shows it. Task is the task's first TaskRunes characters, and
// TaskClipped says it had more.
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
	KeyID           string    `json:"key_id,omitempty"`
	Task            string    `json:"task"`
	TaskClipped     bool      `json:"task_clipped,omitempty"`
	Models          []string  `json:"models"`
	TotalMs         float64   `json:"total_ms"`
	InputTokens     int64     `json:"input_tokens"`
	OutputTokens    int64     `json:"output_tokens"`
	Cost            money.USD `json:"cost"`
	Feedback        bool      `json:"feedback"`
}

// Summarize returns a record's summary.
func Summarize(e *messages.Execution, feedback bool) Summary {
	s := Summary{RequestID: e.RequestId, ClientRequestID: e.ClientRequestId, NodeID: e.NodeId, ReceivedAt: e.GetReceivedAt().AsTime(),
		Category: e.GetClassification().GetCategory(), Blueprint: e.GetBlueprint().GetName(), Strategy: e.GetBlueprint().GetStrategy(),
		Outcome: Outcome(e), StatusCode: int(e.StatusCode), ErrorCode: e.GetError().GetCode(), KeyID: e.KeyId,
		TotalMs: e.GetPhases().GetTotalMs(), InputTokens: int64(e.GetUsage().GetInputTokens()), OutputTokens: int64(e.GetUsage().GetOutputTokens()),
		Cost: money.USD(e.CostNanos), Feedback: feedback || len(e.Feedback) > 0, Models: []string{}}
	s.Task, s.TaskClipped = ClipTask(ValidText(e.Task))
	// A summary outlives its record (the memory store keeps summaries beside encoded records): the
	// clipped task must not hold on to a task of megabytes.
	s.Task = strings.Clone(s.Task)
	for _, r := range e.Results {
		s.Models = append(s.Models, r.Model)
	}
	return s
}

// TaskRunes is how many characters of its task a summary shows: enough to tell tasks apart in a list.
const TaskRunes = 200

// ClipTask returns a task's first TaskRunes characters (runes, not bytes, so no character is cut),
// and whether it had more.
func ClipTask(task string) (string, bool) {
	n := 0
	for i := range task {
		if n == TaskRunes {
			return task[:i], true
		}
		n++
	}
	return task, false
}

// ValidText is a text as a PostgreSQL text column keeps it: without NUL bytes, and with each run of
// invalid UTF-8 (a model or a caller may send either) as one U+FFFD. The memory store's summaries
// read the same, so both stores clip a task alike.
func ValidText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Matches reports whether a record, by its summary, passes the filter (the cursor aside).
func (f Filter) Matches(s Summary) bool {
	switch {
	case f.Category != "" && s.Category != f.Category,
		f.Outcome != "" && s.Outcome != f.Outcome,
		f.KeyID != "" && s.KeyID != f.KeyID,
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

// ErrBadCursor is returned for an After or a Before that no listing gave.
var ErrBadCursor = errors.New("not a cursor of this listing: give a page's next or prev as it is")

// Encode returns the cursor as an opaque string.
func (c Cursor) Encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.ReceivedAt.UnixNano(), 10) + ":" + c.RequestID))
}

// ParseCursor reads an After or a Before; the empty string is the start.
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

// Newer reports whether a record at (at, id) comes before the cursor in newest-first order.
func (c Cursor) Newer(at time.Time, id string) bool {
	return at.After(c.ReceivedAt) || (at.Equal(c.ReceivedAt) && id > c.RequestID)
}

// cursorOf is the position of a summary.
func cursorOf(s Summary) Cursor { return Cursor{ReceivedAt: s.ReceivedAt, RequestID: s.RequestID} }

// ErrTwoCursors is returned for a filter with both After and Before.
var ErrTwoCursors = errors.New("after and before cannot be given together")

// Position is where a filter's page starts: from its cursor (After or Before), towards older
// records, or towards newer ones when Before is set. Without a cursor a page starts at the newest.
type Position struct {
	Cursor Cursor
	Set    bool
	Newer  bool
}

// Position reads the filter's cursor.
func (f Filter) Position() (Position, error) {
	if f.After != "" && f.Before != "" {
		return Position{}, ErrTwoCursors
	}
	raw, newer := f.After, false
	if f.Before != "" {
		raw, newer = f.Before, true
	}
	c, set, err := ParseCursor(raw)
	return Position{Cursor: c, Set: set, Newer: newer}, err
}

// Admits reports whether a record at (at, id) lies beyond the position, in its direction.
func (p Position) Admits(at time.Time, id string) bool {
	switch {
	case !p.Set:
		return true
	case p.Newer:
		return p.Cursor.Newer(at, id)
	}
	return p.Cursor.Before(at, id)
}

// PageOf makes a page of at most n summaries out of up to n+1 read from a position in its direction:
// newest first towards older records, oldest first towards newer ones (the nearest first either
// way). The page lists them newest first; one summary more than n says there is more that way.
func PageOf(rows []Summary, n int, p Position) Page {
	more := len(rows) > n
	page := Page{Records: rows[:min(n, len(rows))]}
	if p.Newer {
		slices.Reverse(page.Records)
	}
	if len(page.Records) == 0 {
		return page
	}
	first, last := cursorOf(page.Records[0]).Encode(), cursorOf(page.Records[len(page.Records)-1]).Encode()
	switch {
	case p.Newer:
		// A page before a cursor has the cursor's record, at least, after it.
		page.Next = last
		if more {
			page.Prev = first
		}
	default:
		if more {
			page.Next = last
		}
		// A page after a cursor has the cursor's record, at least, before it.
		if p.Set {
			page.Prev = first
		}
	}
	return page
}

// ValidOutcome reports whether s names an outcome.
func ValidOutcome(s string) error {
	switch s {
	case "", OutcomeOK, OutcomeDegraded, OutcomeFailed:
		return nil
	}
	return fmt.Errorf("outcome must be %s, %s or %s", OutcomeOK, OutcomeDegraded, OutcomeFailed)
}

// Outcomes of an execution.
const (
	OutcomeOK       = "ok"
	OutcomeDegraded = "degraded"
	OutcomeFailed   = "failed"
)

// Outcome is how an execution ended: failed when it did not answer 200, degraded when it answered with
// less than it asked for, ok otherwise.
func Outcome(e *messages.Execution) string {
	switch {
	case e.StatusCode != 200:
		return OutcomeFailed
	case e.Degraded:
		return OutcomeDegraded
	}
	return OutcomeOK
}
