package store

import "github.com/conclave-ai/conclave/internal/core/records"

// The records' readers ask and are answered in the terms of internal/core/records, which the doors
// share; the store keeps their names.
type (
	Filter           = records.Filter
	Page             = records.Page
	Summary          = records.Summary
	Cursor           = records.Cursor
	Position         = records.Position
	SpendQuery       = records.SpendQuery
	SpendGroup       = records.SpendGroup
	Spender          = records.Spender
	Analyst          = records.Analyst
	ModelPerformance = records.ModelPerformance
	ProviderCost     = records.ProviderCost
	RequestCost      = records.RequestCost
	TraceStep        = records.TraceStep
	PhaseLatency     = records.PhaseLatency
	ProviderTimeouts = records.ProviderTimeouts
)

// TaskRunes is the longest task a listing shows.
const TaskRunes = records.TaskRunes

var (
	ErrTwoCursors = records.ErrTwoCursors
	Summarize     = records.Summarize
	ClipTask      = records.ClipTask
	ValidText     = records.ValidText
	PageOf        = records.PageOf
	SpendOf       = records.SpendOf
	Outcome       = records.Outcome
)
