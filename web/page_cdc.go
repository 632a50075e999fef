package web

import "github.com/outbox-exporter/outbox_exporter/internal/vocab"

// cdcView is one replication slot publishing an outbox, as the page shows
// it.
type cdcView struct {
	CDC    string
	Status Status
	// Missing: the slot is not on the database; nothing below is known.
	Missing bool
	// Known: the last collection read the slot.
	Known      bool
	LagSeconds float64
	// LowerBound: the lag is at least LagSeconds (the slot is behind
	// what the exporter's WAL history reaches); UpperBound: at most (just
	// after a start, placed from the last checkpoint).
	LowerBound, UpperBound bool
	// LagAtLeast is the least the lag can be: shown beside an upper
	// bound, whose span after a start may be wide.
	LagAtLeast float64
	LagBytes   float64
	Active     bool
	WALStatus  string
	Deadline   float64
}

// cdcViews judges each cdc entry: its lag against its deadline, a
// connector not holding the slot, WAL about to go or gone, a slot gone.
func cdcViews(snap *Snapshot) []cdcView {
	var out []cdcView
	for _, name := range snap.Values(vocab.CDCDeadline, vocab.LabelCDC) {
		m := map[string]string{vocab.LabelCDC: name}
		v := cdcView{CDC: name, Status: Unknown}
		v.Deadline, _ = snap.Max(vocab.CDCDeadline, m)
		if missing, _ := snap.Max(vocab.CDCSlotMissing, m); missing == 1 {
			v.Missing, v.Status = true, Crit
			out = append(out, v)
			continue
		}
		lag, ok := snap.Max(vocab.CDCSlotLagSeconds, m)
		if !ok {
			// The collection failed: nothing is known of the slot.
			out = append(out, v)
			continue
		}
		v.Known, v.LagSeconds = true, lag
		v.LagBytes, _ = snap.Max(vocab.CDCSlotLagBytes, m)
		lb, _ := snap.Max(vocab.CDCSlotLagLowerBound, m)
		ub, _ := snap.Max(vocab.CDCSlotLagUpperBound, m)
		active, _ := snap.Max(vocab.CDCSlotActive, m)
		v.LowerBound, v.UpperBound, v.Active = lb == 1, ub == 1 && lb != 1, active == 1
		v.LagAtLeast, _ = snap.Max(vocab.CDCSlotLagAtLeastSeconds, m)
		for _, smp := range snap.Get(vocab.CDCSlotWALStatus, m) {
			if smp.Value == 1 {
				v.WALStatus = smp.Labels["status"]
			}
		}
		v.Status = statusFor(v.LagSeconds, v.Deadline)
		if !v.Active || v.WALStatus == "unreserved" {
			v.Status = worst(v.Status, Warn)
		}
		if v.WALStatus == "lost" {
			v.Status = Crit
		}
		out = append(out, v)
	}
	return out
}
