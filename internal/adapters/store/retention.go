package store

import (
	"context"
	"time"
)

// Partitioned is a store that keeps records and the journal of calls in partitions by time
// (PostgreSQL, a week each): the partitions of the weeks ahead are made before they are needed, and
// old ones leave whole, never row by row.
type Partitioned interface {
	// Upkeep makes the partitions of the weeks ahead of now and, when keep is above zero, drops the
	// partitions of records and of the journal that ended more than keep before now (a journal's
	// partition that still holds an open intent stays), and deletes the rows as old from the
	// partitions that take rows of any time. A call made again does no more than what is left.
	Upkeep(ctx context.Context, now time.Time, keep time.Duration) (Upkeep, error)
}

// Upkeep is what one round of upkeep did.
type Upkeep struct {
	// Created counts the partitions made.
	Created int
	// Dropped names the partitions dropped; Kept the old partitions of the journal kept for the open
	// intents they hold.
	Dropped, Kept []string
	// Deleted counts the old rows deleted from the partitions of any time.
	Deleted int64
}
