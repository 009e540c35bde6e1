// Package store owns the contract of where execution records live: the Store interface the recorder
// writes through and the API reads through, the filters and pages of a listing, and Memory, the
// bounded in-process store of the embedded default. Records handed to a store are never changed
// afterwards: feedback is kept beside a record, and readers get a record with it.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/records"
	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Sentinel errors of every store.
var (
	// ErrNotFound is returned for an unknown request id.
	ErrNotFound = errors.New("execution not found")
	// ErrUnavailable wraps a failure to reach the store: the record may well exist.
	ErrUnavailable = records.ErrUnavailable
)

// RejectedError reports records the store refused for what they hold (not for being unreachable):
// writing them again cannot help. The other records of the batch were written.
type RejectedError struct {
	IDs []string
	Err error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%d records refused: %v", len(e.IDs), e.Err)
}

func (e *RejectedError) Unwrap() error { return e.Err }

// Store persists execution records and the journal of calls. Implementations are safe for concurrent
// use.
type Store interface {
	// Insert writes records. A record whose request id is stored already is left as it is, so writing
	// a batch again (after a failure, or from a spool) adds nothing twice. (PostgreSQL, which keeps
	// records by week, knows a record by its request id and receipt time.)
	Insert(ctx context.Context, records []*messages.Execution) error
	// Write writes calls of the journal and records together. A call's intent (state open) is kept
	// until its settlement (settled or interrupted) replaces it; a call settles once, and its key is
	// charged its cost as it settles, so writing a batch again charges nothing twice.
	Write(ctx context.Context, b Batch) error
	// Get returns a record with its feedback, or ErrNotFound, or an error wrapping ErrUnavailable.
	Get(ctx context.Context, requestID string) (*messages.Execution, error)
	// SetFeedback records feedback on an execution that has none yet and reports whether it did; only
	// one caller of many, on any controller, sees true. An unknown id is ErrNotFound.
	SetFeedback(ctx context.Context, requestID string, fb Feedback) (bool, error)
	// List returns a page of summaries, newest first.
	List(ctx context.Context, f Filter) (Page, error)
	Close() error
}

// Batch is one write of the recorder: journaled calls and records, written in one transaction where
// the store has them.
type Batch struct {
	Calls   []*messages.Call
	Records []*messages.Execution
}

// Settled reports whether a call of the journal is settled (its cost known, or interrupted).
func Settled(c *messages.Call) bool { return c.State == CallSettled || c.State == CallInterrupted }

// States of a journaled call.
const (
	CallOpen        = "open"
	CallSettled     = "settled"
	CallInterrupted = "interrupted"
)

// Journal is a store whose journal of calls outlives a controller (PostgreSQL): each run of a
// controller holds a lease while it runs, and the calls left open by a run that died are found and
// settled by another.
type Journal interface {
	// Lease holds (or renews) the lease of this run of node.
	Lease(ctx context.Context, node, run string, lease time.Duration) error
	// Unsettled returns up to limit open intents of runs other than run whose lease has ended (or
	// that never took one, past their calls' deadlines).
	Unsettled(ctx context.Context, run string, limit int) ([]*messages.Call, error)
}

// Learning is a store that also keeps what the bandit learned: the rewards of every record it
// inserts and every feedback it sets, added to each arm atomically.
type Learning interface {
	// LoadArms returns every arm, and the position in the reward history they include: rewards after
	// it are not in them.
	LoadArms(ctx context.Context, o LoadOptions) (Learned, error)
	// RewardsSince returns up to limit rewards after a position in the history, oldest first, leaving
	// out those of one node (the caller's own, which its arms have already).
	RewardsSince(ctx context.Context, after int64, notNode string, limit int) ([]Reward, error)
}

// Learned is what the store holds of the arms at one moment.
type Learned struct {
	Arms []bandit.Arm
	// Through is the last reward of the history in the arms, and Recent the rewards in them among the
	// last LoadOptions.Lookback before it: a reward numbered below Through can still commit after the
	// arms were read, and is not among Recent then.
	Through int64
	Recent  []int64
}

// Reward is one reward of the history.
type Reward struct {
	ID                int64
	Model, Category   string
	Reward            float64
	Reason, RequestID string
	Node              string
}

// LoadOptions say how arms are rebuilt at start.
type LoadOptions struct {
	Prior bandit.Prior
	// Learning is the node's update rule: with a discount, arms are folded from their latest rewards.
	Learning bandit.UpdateConfig
	// Lookback is how far below Through rewards are listed in Recent.
	Lookback int64
}

// Feedback is what a caller's feedback changed: the rewards it gave, and when.
type Feedback struct {
	Updates []*messages.BanditUpdate
	At      time.Time
	NodeID  string
}

// WithFeedback returns the record with its feedback, leaving the stored record as it is.
func WithFeedback(rec *messages.Execution, fb *Feedback) *messages.Execution {
	if fb == nil {
		return rec
	}
	out := proto.Clone(rec).(*messages.Execution)
	out.Feedback = fb.Updates
	out.FeedbackAt = timestamppb.New(fb.At)
	return out
}
