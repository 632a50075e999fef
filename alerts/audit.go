package alerts

import "fmt"

// auditAlerts fire when the audit of an outbox against its topics finds
// events lost on the way to the broker, or acknowledgements lost on the
// way back.
func (b *builder) auditAlerts() []Rule {
	if len(b.cfg.Audit) == 0 {
		return nil
	}
	return []Rule{
		b.alert("OutboxAuditSilentLoss", SeverityCritical,
			fmt.Sprintf("max by (%s) (outbox_audit_missing_in_broker_events%s) > 0", b.by("outbox"), b.selector()),
			"5m",
			"Events marked published never reached the broker.",
			"The audit of outbox {{ $labels.outbox }} found {{ $value }} sampled events marked published whose ids are not on the topics: they are lost and no relay will retry them.",
			nil),
		b.alert("OutboxAuditAcknowledgementLost", SeverityWarning,
			fmt.Sprintf("max by (%s) (outbox_audit_unmarked_in_broker_events%s) > 0", b.by("outbox"), b.selector()),
			"15m",
			"Events on the broker are still unpublished in the outbox.",
			"The audit of outbox {{ $labels.outbox }} found {{ $value }} sampled unpublished events whose ids are already on the topics: the broker's acknowledgement was lost and a retry will publish them again.",
			nil),
	}
}
