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
	// history and no commit time bounds it from the other side:
	// LagSeconds is the history's span, and the truth is more;
	// ConfirmedAt is later than the truth, so the rows committed after it
	// are a subset of the pending ones.
	LowerBound bool
	// UpperBound is true when LagSeconds is never less than the truth but
	// may exceed it by more than one collection interval: the confirmed
	// position lies between the last checkpoint (the seed of a fresh
	// history) and the first collection, or it is older than the history
	// and ConfirmedAt is a commit time from before it (CommittedBefore).
	// While both are false the lag exceeds the truth by at most one
	// collection interval (Resolution).
	UpperBound bool
	// OlderThanHistory is true when the confirmed position is older than
	// the whole history (LowerBound, or an UpperBound dated by a commit
	// time).
	OlderThanHistory bool
	// LagAtLeast is the least the lag can be: never over the truth, and
	// equal to LagSeconds when LowerBound. With LagSeconds it brackets
	// the truth.
	LagAtLeast float64
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
// now and the history (which already holds now). before, when not nil,
// is a time at which the server's position had surely not yet left the
// slot's confirmed one (CommittedBefore): a confirmed position older than
// the history is then placed at it, an upper bound of the lag, instead of
// at the history's oldest time, a lower bound. It fails for a slot that
// does not exist or is not logical: such a slot has no confirmed position
// to measure.
func Assess(now Sample, s SlotRow, h *History, before *time.Time) (SlotState, error) {
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
	st.LagSeconds = lagSince(now.At, p.At)
	// The position left the confirmed one at or before the sample after
	// it; a lower bound's time is already the latest it can be.
	st.LagAtLeast = lagSince(now.At, p.At.Add(p.Resolution))
	st.OlderThanHistory = p.LowerBound
	if p.LowerBound && before != nil && before.Before(p.At) {
		st.ConfirmedAt, st.LowerBound, st.UpperBound = *before, false, true
		st.LagSeconds = lagSince(now.At, *before)
	}
	return st, nil
}

// lagSince is the seconds from at to now, never negative.
func lagSince(now, at time.Time) float64 {
	return max(0, now.Sub(at).Seconds())
}
