package store

import (
	"fmt"
	"slices"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// SandboxState is where a sandbox is in its lifecycle. Every change of state is a transition the table
// below allows; anything else is an error, never a silent no-op.
//
//	creating → running | failed | stopping
//	running  → stopping | failed
//	stopping → stopped | failed
//	failed   → stopping | stopped   (cleaning up a failed sandbox)
//	stopped  (terminal)
type SandboxState string

// The sandbox states.
const (
	StateCreating SandboxState = "creating" // being placed and booted
	StateRunning  SandboxState = "running"  // booted; accepts work
	StateStopping SandboxState = "stopping" // being torn down
	StateStopped  SandboxState = "stopped"  // gone from its node; terminal
	StateFailed   SandboxState = "failed"   // broke; its resources may still need cleaning up
)

// transitions is the sandbox state machine: for each state, the states it may move to.
var transitions = map[SandboxState][]SandboxState{
	StateCreating: {StateRunning, StateFailed, StateStopping},
	StateRunning:  {StateStopping, StateFailed},
	StateStopping: {StateStopped, StateFailed},
	StateFailed:   {StateStopping, StateStopped},
	StateStopped:  nil,
}

// SandboxStates returns every valid state, in lifecycle order.
func SandboxStates() []SandboxState {
	return []SandboxState{StateCreating, StateRunning, StateStopping, StateStopped, StateFailed}
}

// Valid reports whether s is one of the defined states.
func (s SandboxState) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// Terminal reports whether no transition leaves s.
func (s SandboxState) Terminal() bool {
	return s.Valid() && len(transitions[s]) == 0
}

// CanTransition reports whether the state machine allows moving from s to to. Staying in the same state
// is not a transition and reports false; invalid states report false.
func (s SandboxState) CanTransition(to SandboxState) bool {
	return slices.Contains(transitions[s], to)
}

// String returns the state's name.
func (s SandboxState) String() string { return string(s) }

// CheckTransition reports whether a sandbox stored in state from may be saved in state to: nil when to
// equals from (an update that changes other fields only) or when from.CanTransition(to); otherwise an
// error wrapping errdefs.ErrConflict that names both states (errdefs.ErrInvalidArgument if to is not a
// state at all).
func CheckTransition(from, to SandboxState) error {
	if !to.Valid() {
		return fmt.Errorf("sandbox state %q: %w", to, errdefs.ErrInvalidArgument)
	}
	if from == to || from.CanTransition(to) {
		return nil
	}
	return fmt.Errorf("illegal sandbox state transition from %s to %s: %w", from, to, errdefs.ErrConflict)
}
