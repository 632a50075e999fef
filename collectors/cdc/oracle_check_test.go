package cdc

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
)

// oracleTruth is what the test's own record says about the slot's
// confirmed position now.
type oracleTruth struct {
	// The server's position left the confirmed one after leftAfter and
	// at or before leftBy (zero when it has not left it).
	leftAfter, leftBy time.Time
	// pending are the outbox transactions committed after the confirmed
	// position: the rows the connector has not confirmed.
	pending []oracleTxn
}

// truth brute-forces the truth over every observation and transaction.
func (o *oracleRun) truth() oracleTruth {
	o.t.Helper()
	var tr oracleTruth
	for _, p := range o.obs {
		switch {
		case p.lsn <= o.confirmed:
			tr.leftAfter = p.t1
		case tr.leftBy.IsZero() || p.t2.Before(tr.leftBy):
			tr.leftBy = p.t2
		}
	}
	for _, tx := range o.txns {
		switch {
		case tx.commitAfter >= o.confirmed:
			tr.pending = append(tr.pending, tx)
			// The transaction's first change came before its commit.
			if tr.leftBy.IsZero() || tx.committed.Before(tr.leftBy) {
				tr.leftBy = tx.committed
			}
		case tx.post > o.confirmed:
			o.fatalf("the slot confirmed %v inside a transaction of rows (%v to %v): the history cannot tell its rows", o.confirmed, tx.pre, tx.post)
		}
	}
	return tr
}

// scrape is one scrape of the exporter: the slot's collector, then the
// outbox it publishes and its stuck rows, checked against the truth.
func (o *oracleRun) scrape() {
	o.t.Helper()
	o.observe()
	m, err := collect(o.t, o.c)
	if err != nil {
		o.fatalf("collect the slot: %v", err)
	}
	h := o.c.History().Samples()
	now := h[len(h)-1]
	o.samples = append(o.samples, now.At)
	before := o.observe()
	st, ok := o.c.Last("orders")
	if !ok {
		o.fatalf("no state after a collection")
	}
	tr := o.truth()
	o.checkSlot(m, now, st, tr, o.confirmed < o.redo)
	pending, oldest, err := outboxReading(o.t, o.oc)
	if err != nil {
		o.fatalf("collect the linked outbox: %v", err)
	}
	stuck, err := outbox.StuckBehind(context.Background(), o.s.ro, "outbox", linkedOutboxConfig(), outbox.MaxStuckRows,
		outbox.DefaultBehindLookback, outbox.Confirmed{At: st.ConfirmedAt, LowerBound: st.LowerBound, Slot: o.slot})
	if err != nil {
		o.fatalf("stuck rows: %v", err)
	}
	after := o.observe()
	o.checkOutbox(st, tr, outboxSeen{pending, oldest, stuck}, before.t1, after.t2)
}

// checkSlot holds the slot's series against the truth; behind is true
// when the slot is confirmed behind the checkpoint this exporter started
// after.
func (o *oracleRun) checkSlot(m metrics, now Sample, st SlotState, tr oracleTruth, behind bool) {
	o.t.Helper()
	lag, lower, upper := m.get(o.t, "outbox_cdc_slot_lag_seconds", "orders"),
		m.get(o.t, "outbox_cdc_slot_lag_lower_bound", "orders"), m.get(o.t, "outbox_cdc_slot_lag_upper_bound", "orders")
	atLeast := m.get(o.t, "outbox_cdc_slot_lag_at_least_seconds", "orders")
	wantBytes := 0.0
	if now.LSN > o.confirmed {
		wantBytes = float64(now.LSN - o.confirmed)
	}
	if got := m.get(o.t, "outbox_cdc_slot_lag_bytes", "orders"); got != wantBytes {
		o.fatalf("lag bytes %v, want %v - %v = %v", got, now.LSN, o.confirmed, wantBytes)
	}
	if lag != max(0, now.At.Sub(st.ConfirmedAt).Seconds()) || lower != b2f(st.LowerBound) || upper != b2f(st.UpperBound) || st.LowerBound && st.UpperBound ||
		atLeast != st.LagAtLeast || atLeast > lag || atLeast < 0 {
		o.fatalf("series (lag %v, at least %v, lower %v, upper %v) disagree with the state %+v at %v", lag, atLeast, lower, upper, st, now.At)
	}
	if o.confirmed >= now.LSN {
		o.cov["caught up"]++
		if lag != 0 || atLeast != 0 || lower != 0 || upper != 0 {
			o.fatalf("caught up, yet lag %v, at least %v (bounds %v, %v)", lag, atLeast, lower, upper)
		}
		return
	}
	// The least lag is never over the truth: the position left after
	// leftAfter.
	if !tr.leftAfter.IsZero() && atLeast >= now.At.Sub(tr.leftAfter).Seconds() {
		o.fatalf("lag at least %vs, but the position was still there at %v, %vs ago: over the truth", atLeast, tr.leftAfter, now.At.Sub(tr.leftAfter).Seconds())
	}
	switch {
	case behind && st.LowerBound:
		o.fatalf("the slot (%v) is behind the checkpoint the exporter started after (%v), commit times are kept, yet the lag %vs is a lower bound: its pending rows a subset", o.confirmed, o.redo, lag)
	case st.LowerBound:
		o.cov["lower bound"]++
		// Never over the truth: the position left after leftAfter.
		if !st.ConfirmedAt.After(tr.leftAfter) {
			o.fatalf("lower bound: confirmed at %v, but the position was still there at %v: over the truth", st.ConfirmedAt, tr.leftAfter)
		}
		return
	case behind:
		o.cov["behind the checkpoint"]++
		if !st.UpperBound || !st.OlderThanHistory {
			o.fatalf("the slot (%v) is behind the checkpoint the exporter started after (%v), yet its state %+v is not an upper bound older than the history", o.confirmed, o.redo, st)
		}
	case st.UpperBound:
		o.cov["upper bound"]++
	default:
		o.cov["exact"]++
		o.checkExact(st, tr)
	}
	// Never under the truth.
	if !tr.leftBy.IsZero() && st.ConfirmedAt.After(tr.leftBy) {
		o.fatalf("confirmed at %v, after the position had left it (by %v): the lag %vs is under the truth", st.ConfirmedAt, tr.leftBy, lag)
	}
}

// checkExact: a lag that claims no bound comes from one of this
// exporter's own collections, from the last one at which the position
// was still at the confirmed one or a later one: never more than one
// collection interval over the truth. A collection closer than the
// history's minimum gap to the one before the newest replaces the newest
// (History.Add), so with collections that close the answer may be that
// much earlier.
func (o *oracleRun) checkExact(st SlotState, tr oracleTruth) {
	o.t.Helper()
	if !slices.ContainsFunc(o.samples, st.ConfirmedAt.Equal) {
		o.fatalf("exact lag, yet confirmed at %v, which is none of this exporter's collections %v", st.ConfirmedAt, o.samples)
	}
	var lastStill time.Time
	for _, at := range o.samples {
		if !at.After(tr.leftAfter) {
			lastStill = at
		}
	}
	if st.ConfirmedAt.Before(lastStill.Add(-HistoryMinGap)) {
		o.fatalf("exact lag, yet confirmed at %v, more than %v before the collection at %v that still saw the position there (%v): over the truth by more than one interval", st.ConfirmedAt, HistoryMinGap, lastStill, tr.leftAfter)
	}
}

// outboxSeen is what the linked outbox said at one scrape.
type outboxSeen struct {
	pending, oldest float64
	stuck           []outbox.StuckRow
}

// checkOutbox holds the linked outbox's pending rows, their oldest age
// and its stuck rows against the true pending rows: a superset unless the
// slot's lag is a lower bound, then a subset.
func (o *oracleRun) checkOutbox(st SlotState, tr oracleTruth, seen outboxSeen, nowAtLeast, nowAtMost time.Time) {
	pending, oldest, stuck := seen.pending, seen.oldest, seen.stuck
	o.t.Helper()
	truePending, trueIDs := 0, map[string]bool{}
	var oldestCreated time.Time
	for _, tx := range tr.pending {
		truePending += len(tx.ids)
		for _, id := range tx.ids {
			trueIDs[strconv.FormatInt(id, 10)] = true
		}
		if oldestCreated.IsZero() || tx.created.Before(oldestCreated) {
			oldestCreated = tx.created
		}
	}
	if truePending > 0 {
		o.cov["rows pending"]++
	}
	got := map[string]bool{}
	for _, r := range stuck {
		got[r.ID] = true
	}
	if st.LowerBound {
		for id := range got {
			if !trueIDs[id] {
				o.fatalf("lower bound, yet row %s, which the slot has confirmed, reads stuck", id)
			}
		}
		if pending > float64(truePending) {
			o.fatalf("lower bound, yet %v pending of %d true", pending, truePending)
		}
		if truePending > 0 && oldest > nowAtMost.Sub(oldestCreated).Seconds() {
			o.fatalf("lower bound, yet the oldest pending age %vs is over the true oldest's %vs", oldest, nowAtMost.Sub(oldestCreated).Seconds())
		}
		return
	}
	for id := range trueIDs {
		if !got[id] {
			o.fatalf("row %s is behind the slot (confirmed %v), but not among the stuck rows %v; slot state %+v", id, o.confirmed, stuck, st)
		}
	}
	if pending < float64(truePending) {
		o.fatalf("%v pending, the truth is %d; slot state %+v", pending, truePending, st)
	}
	if truePending > 0 && oldest < nowAtLeast.Sub(oldestCreated).Seconds() {
		o.fatalf("oldest pending age %vs, the oldest true pending row is at least %vs old", oldest, nowAtLeast.Sub(oldestCreated).Seconds())
	}
}
