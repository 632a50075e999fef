package vocab

// Severity says who must act on a finding: critical pages someone now,
// warning opens a ticket. It is the severity label of the alert and the
// colour of the finding on the page (red, amber).
type Severity string

// The severities.
const (
	Critical Severity = "critical"
	Warning  Severity = "warning"
)

// Finding is one kind of problem the exporter reports as a series above 0:
// a metric, and for a metric with a kind label, one value of it.
type Finding struct {
	Metric string
	// Kind is the value of the kind label; "" for a metric without one.
	Kind     string
	Severity Severity
	// Alert is the alert that fires on it, "" when only the page shows
	// it.
	Alert string
}

// Findings are the reconcile gaps and the audit's findings with the
// severity of each. Only events known lost are critical: a committed row
// with no outbox event, an event the broker never received. The target's
// disagreements (missing, stale, orphan, duplicate) may be a consumer
// behind or replaying, and an unmarked or duplicated record is delivered.
var Findings = []Finding{
	{ReconcileGaps, GapMissingOutbox, Critical, "OutboxReconcileMissingOutbox"},
	{ReconcileGaps, GapMissingTarget, Warning, "OutboxReconcileGaps"},
	{ReconcileGaps, GapStaleTarget, Warning, "OutboxReconcileGaps"},
	{ReconcileGaps, GapOrphanTarget, Warning, "OutboxReconcileGaps"},
	{ReconcileGaps, GapDuplicateTarget, Warning, "OutboxReconcileGaps"},
	{AuditMissingInBroker, "", Critical, "OutboxAuditSilentLoss"},
	{AuditUnmarkedInBroker, "", Warning, "OutboxAuditAcknowledgementLost"},
	{AuditDuplicates, "", Warning, ""},
}

// SeverityOf returns the severity of the finding of metric (and kind,
// for a metric with a kind label), and false for a metric and kind that
// are no finding.
func SeverityOf(metric, kind string) (Severity, bool) {
	for _, f := range Findings {
		if f.Metric == metric && f.Kind == kind {
			return f.Severity, true
		}
	}
	return "", false
}

// GapKindsOf lists the reconcile gap kinds of severity s, in report order.
func GapKindsOf(s Severity) []string {
	var out []string
	for _, k := range GapKinds {
		if sev, _ := SeverityOf(ReconcileGaps, k); sev == s {
			out = append(out, k)
		}
	}
	return out
}
