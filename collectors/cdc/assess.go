package cdc

import (
	"fmt"
	"time"
)

// SlotState is what the exporter says about one slot at one collection.
type SlotState struct {
	LagBytes float64
	// LagSeconds is how long ago the server's WAL position was where the
	// slot's confirmed position is now: the age of the oldest change the
	// connector has not confirmed. 0 when caught up.
	LagSeconds float64
	// LowerBound is true when the confirmed position is older than the
	// history: LagSeconds is the history's span, and the truth is more;
	// ConfirmedAt is later than the truth, so the rows committed after it
	// are a subset of the pending ones.
	LowerBound bool
	// UpperBound is true when the confirmed position lies between the
	// last checkpoint (the seed of a fresh history) and the first
	// collection: LagSeconds is never less than the truth but may exceed
	// it by more than one collection interval, by up to Resolution.
	// While both are false the lag exceeds the truth by at most one
	// collection interval (Resolution).
	UpperBound bool
	// Resolution is the length of the sampled interval the server passed
	// the confirmed position in: how much LagSeconds may exceed the
	// truth. 0 when caught up or a lower bound.
	Resolution time.Duration
	// ConfirmedAt is the server time the slot has confirmed up to: every
	// change committed after it is still pending in the pipeline.
	ConfirmedAt time.Time
	Active      bool
	WALStatus   string
	SafeWALSize *int64
}

// Assess turns a slot's row into its state, given the server's position
// now and the history (which already holds now). It fails for a slot
// that does not exist or is not logical: such a slot has no confirmed
// position to measure.
func Assess(now Sample, s SlotRow, h *History) (SlotState, error) {
	if !s.Exists {
		return SlotState{}, fmt.Errorf("replication slot %q does not exist (dropped, or never created by the connector)", s.Name)
	}
	if s.Type != "logical" || s.ConfirmedFlush == nil {
		return SlotState{}, fmt.Errorf("replication slot %q is %s, not a logical slot a connector confirms", s.Name, s.Type)
	}
	st := SlotState{Active: s.Active, WALStatus: s.WALStatus, SafeWALSize: s.SafeWALSize}
	c := *s.ConfirmedFlush
	if c >= now.LSN {
		st.ConfirmedAt = now.At
		return st, nil
	}
	st.LagBytes = float64(now.LSN - c)
	p, ok := h.When(c)
	if !ok || p.CaughtUp {
		// The history always holds now; a position behind it cannot be
		// caught up. Report the least the exporter knows.
		p = Position{At: now.At, LowerBound: true}
	}
	st.ConfirmedAt = p.At
	st.LowerBound, st.UpperBound, st.Resolution = p.LowerBound, p.UpperBound, p.Resolution
	st.LagSeconds = now.At.Sub(p.At).Seconds()
	if st.LagSeconds < 0 {
		st.LagSeconds = 0
	}
	return st, nil
}
