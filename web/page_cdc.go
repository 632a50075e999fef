package web

// Metric names of the change data capture collector (collectors/cdc),
// read by the page's CDC section.
const (
	cdcDeadline   = "outbox_cdc_deadline_seconds"
	cdcLagSeconds = "outbox_cdc_slot_lag_seconds"
	cdcLagBytes   = "outbox_cdc_slot_lag_bytes"
	cdcLowerBound = "outbox_cdc_slot_lag_lower_bound"
	cdcActive     = "outbox_cdc_slot_active"
	cdcWALStatus  = "outbox_cdc_slot_wal_status"
	cdcMissing    = "outbox_cdc_slot_missing"
)

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
	LowerBound bool
	LagBytes   float64
	Active     bool
	WALStatus  string
	Deadline   float64
}

// cdcViews judges each cdc entry: its lag against its deadline, a
// connector not holding the slot, WAL about to go or gone, a slot gone.
func cdcViews(snap *Snapshot) []cdcView {
	var out []cdcView
	for _, name := range snap.Values(cdcDeadline, "cdc") {
		m := map[string]string{"cdc": name}
		v := cdcView{CDC: name, Status: Unknown}
		v.Deadline, _ = snap.Max(cdcDeadline, m)
		if missing, _ := snap.Max(cdcMissing, m); missing == 1 {
			v.Missing, v.Status = true, Crit
			out = append(out, v)
			continue
		}
		lag, ok := snap.Max(cdcLagSeconds, m)
		if !ok {
			// The collection failed: nothing is known of the slot.
			out = append(out, v)
			continue
		}
		v.Known, v.LagSeconds = true, lag
		v.LagBytes, _ = snap.Max(cdcLagBytes, m)
		lb, _ := snap.Max(cdcLowerBound, m)
		active, _ := snap.Max(cdcActive, m)
		v.LowerBound, v.Active = lb == 1, active == 1
		for _, smp := range snap.Get(cdcWALStatus, m) {
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
