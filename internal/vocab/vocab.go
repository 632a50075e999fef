// Package vocab holds the words the exporter, its rules, its dashboards
// and its page share: metric names, label names, the states of an outbox
// row, the kinds of reconcile gap and the severity of each finding. Each
// is written once here, so that a rule or a page cannot drift from what
// the collectors export.
//
// It imports nothing of the project: every other package may use it.
package vocab

// Metric names of an outbox's collector.
const (
	OutboxEvents             = "outbox_events"
	OutboxOldestPendingAge   = "outbox_oldest_pending_age_seconds"
	OutboxDeadline           = "outbox_deadline_seconds"
	OutboxPastDeadline       = "outbox_past_deadline_events"
	OutboxRetried            = "outbox_retried_events"
	OutboxUnknownResult      = "outbox_unknown_result_events"
	OutboxUnclassified       = "outbox_unclassified_events"
	OutboxEventsCapped       = "outbox_events_capped"
	OutboxLeaseExpirations   = "outbox_lease_expirations_total"
	OutboxPublished          = "outbox_published_events_total"
	OutboxPublishedLate      = "outbox_published_late_events_total"
	OutboxPublishLatency     = "outbox_publish_latency_seconds"
	OutboxOutOfOrder         = "outbox_out_of_order_events"
	OutboxPublishedNoReceipt = "outbox_published_without_receipt_events_total"
)

// Metric names of the exporter itself.
const (
	CollectorSuccess  = "outbox_exporter_collector_success"
	CollectorDuration = "outbox_exporter_collector_duration_seconds"
)

// Metric names of a reconcile job.
const (
	ReconcileGaps        = "outbox_reconcile_gaps"
	ReconcileRowsChecked = "outbox_reconcile_rows_checked"
	ReconcileLastSuccess = "outbox_reconcile_last_success_timestamp_seconds"
)

// Metric names of a publish audit.
const (
	AuditMissingInBroker  = "outbox_audit_missing_in_broker_events"
	AuditUnmarkedInBroker = "outbox_audit_unmarked_in_broker_events"
	AuditDuplicates       = "outbox_audit_duplicates_total"
	AuditChecked          = "outbox_audit_checked_events_total"
)

// Label names.
const (
	LabelOutbox    = "outbox"
	LabelState     = "state"
	LabelKind      = "kind"
	LabelReconcile = "reconcile"
	LabelCollector = "collector"
	LabelTarget    = "target"
)

// Values of the state label of outbox_events: the states of an
// unpublished or dead row. Published and ignored rows have no series.
const (
	StatePending      = "pending"
	StateInFlight     = "in_flight"
	StateLeaseExpired = "lease_expired"
	StateDead         = "dead"
	// StatePublished and StateIgnored name the other states of a row in
	// the stuck-rows answer and the audit.
	StatePublished = "published"
	StateIgnored   = "ignored"
)

// EventStates are the values of the state label of outbox_events, in the
// order the page shows them.
var EventStates = []string{StatePending, StateInFlight, StateLeaseExpired, StateDead}

// Values of the kind label of outbox_reconcile_gaps.
const (
	GapMissingOutbox   = "missing_outbox"
	GapMissingTarget   = "missing_target"
	GapStaleTarget     = "stale_target"
	GapOrphanTarget    = "orphan_target"
	GapDuplicateTarget = "duplicate_target"
)

// GapKinds lists every kind of reconcile gap, in report order.
var GapKinds = []string{GapMissingOutbox, GapMissingTarget, GapStaleTarget, GapOrphanTarget, GapDuplicateTarget}
