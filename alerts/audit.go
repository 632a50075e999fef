package alerts

import (
	"fmt"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// auditAlerts fire when the audit of an outbox against its topics finds
// events lost on the way to the broker, or acknowledgements lost on the
// way back.
func (b *builder) auditAlerts() []Rule {
	if len(b.cfg.Audit) == 0 {
		return nil
	}
	return []Rule{
		b.auditFound("OutboxAuditSilentLoss", vocab.AuditMissingInBroker, "5m",
			"Events marked published never reached the broker.",
			"sampled events marked published whose ids are not on the topics: they are lost and no relay will retry them."),
		b.auditFound("OutboxAuditAcknowledgementLost", vocab.AuditUnmarkedInBroker, "15m",
			"Events on the broker are still unpublished in the outbox.",
			"sampled unpublished events whose ids are already on the topics: the broker's acknowledgement was lost and a retry will publish them again."),
	}
}

// auditFound fires when an audit's gauge metric has been above zero for
// forDur, with the severity of that finding; found says what the audit
// found, after its count.
func (b *builder) auditFound(name, metric, forDur, summary, found string) Rule {
	return b.alert(name, findingSeverity(metric, ""),
		fmt.Sprintf("max by (%s) (%s%s) > 0", b.by(vocab.LabelOutbox), metric, b.selector()),
		forDur, summary,
		"The audit of outbox {{ $labels.outbox }} found {{ $value }} "+found,
		nil)
}
