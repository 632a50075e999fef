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
		b.auditFound("OutboxAuditSilentLoss", vocab.AuditMissingInBroker),
		b.auditFound("OutboxAuditAcknowledgementLost", vocab.AuditUnmarkedInBroker),
	}
}

// auditFound fires when an audit's gauge metric has been above zero for
// the alert's for:.
func (b *builder) auditFound(name, metric string) Rule {
	return b.alert(name, fmt.Sprintf("max by (%s) (%s%s) > 0", b.by(vocab.LabelOutbox), metric, b.selector()), says{}, nil)
}
