package outboxsql

// confirmedSetting carries the confirmed time into every query of a
// sample: set (transaction-local) by ConfirmedQuery in the sample's
// read-only transaction. A setting rather than a parameter, so that the
// many state-shaped queries keep their own parameters and stay one
// prepared statement each; the planner reads its value as a stable
// expression, so the created_at range is estimated like a constant.
const confirmedSetting = "outbox_exporter.slot_confirmed_at"

// ConfirmedQuery sets confirmedSetting to $1 for the transaction and
// reads track_commit_timestamp, without which pg_xact_commit_timestamp
// fails on any row and an empty range would read 0 pending.
const ConfirmedQuery = `SELECT pg_catalog.set_config('` + confirmedSetting + `', $1::timestamptz::text, true), pg_catalog.current_setting('track_commit_timestamp')`

// behindPredicate is IsBehind in SQL, with the range of created_at that
// an index on it (or on labels..., created_at) serves: the commit time of
// the transaction that wrote the row's current version,
// pg_xact_commit_timestamp(xmin), after the confirmed time, and a
// created_at within the lookback before it. "" for an outbox not
// published by a slot.
func (s *Spec) behindPredicate() string {
	if s.Behind <= 0 {
		return ""
	}
	at := "pg_catalog.current_setting('" + confirmedSetting + "')::timestamptz"
	c := s.O.CreatedAt
	return col(c) + " >= " + s.bound(c, at+" - "+interval(s.Behind)) +
		" AND pg_catalog.pg_xact_commit_timestamp(t.xmin) > " + at
}

// unpublished is the condition of the rows the collector counts as
// unpublished: UnpublishedPredicate, and behind the slot for an outbox
// published by one.
func (s *Spec) unpublished() string {
	return and(s.UnpublishedPredicate(), s.behindPredicate())
}
