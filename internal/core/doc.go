// Package core holds nothing itself: its folders are Conclave's decisions, each a package of pure
// functions and state machines. They read time and randomness from their callers, do no I/O and start
// no goroutines; the actors interpret what they decide. layout_test.go keeps them so.
package core
