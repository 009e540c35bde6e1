package actors

import (
	"github.com/conclave-ai/conclave/internal/arms"
	"github.com/conclave-ai/conclave/internal/inflight"
)

// ArmBoard and NewArmBoard are the arm board's names before it had a package of its own.
type ArmBoard = arms.Board

var NewArmBoard = arms.NewBoard

const DefaultSharing = arms.DefaultSharing

// NewInflight is the in-flight bound's maker before it had a package of its own.
var NewInflight = inflight.New
