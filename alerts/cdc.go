package alerts

import (
	"fmt"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// cdcAlerts fire when an outbox published by change data capture falls
// behind: its slot's lag past the deadline, no connector on the slot, the
// slot gone, or the slot's WAL in danger or gone.
func (b *builder) cdcAlerts() []Rule {
	if len(b.cfg.CDC) == 0 {
		return nil
	}
	by := b.by(vocab.LabelCDC)
	return []Rule{
		b.alert("OutboxCDCSlotLagAboveDeadline", SeverityCritical,
			fmt.Sprintf("max by (%[1]s) ("+vocab.CDCSlotLagSeconds+"%[2]s)\n> on (%[1]s)\nmax by (%[1]s) ("+vocab.CDCDeadline+"%[2]s)", by, b.selector()),
			"1m", "Change data capture is behind its deadline.",
			"The connector on the slot of cdc {{ $labels.cdc }} has not confirmed changes from {{ $value | humanizeDuration }} ago, past its deadline: outbox events written since are not on the broker yet.",
			nil),
		b.alert("OutboxCDCSlotInactive", SeverityWarning,
			fmt.Sprintf("max by (%s) ("+vocab.CDCSlotActive+"%s) == 0", by, b.selector()),
			"5m", "No connector streams from a change data capture slot.",
			"Nothing has held the replication slot of cdc {{ $labels.cdc }} for 5 minutes: the connector is down or disconnected, outbox events are not published, and the slot keeps WAL on the database's disk.",
			nil),
		b.alert("OutboxCDCSlotMissing", SeverityCritical,
			fmt.Sprintf("max by (%s) ("+vocab.CDCSlotMissing+"%s) == 1", by, b.selector()),
			"1m", "A change data capture slot is gone.",
			"The replication slot of cdc {{ $labels.cdc }} does not exist on its database (or is not a logical slot): nothing confirms the outbox's events, a connector that comes back creates a new slot from the current position, and the events written meanwhile are not streamed.",
			nil),
		b.walStatusAlert("OutboxCDCSlotWALUnreserved", SeverityWarning, "unreserved", "A change data capture slot is about to lose its WAL.",
			"it is past max_slot_wal_keep_size, so the next checkpoint may remove WAL it still needs, and then the connector can never resume."),
		b.walStatusAlert("OutboxCDCSlotWALLost", SeverityCritical, "lost", "A change data capture slot lost its WAL: events are lost.",
			"the WAL it needed was removed, the connector can never resume from it, and the outbox events in that WAL never reach the broker."),
	}
}

// walStatusAlert fires when a cdc slot's wal_status is status for a
// minute; consequence ends its description.
func (b *builder) walStatusAlert(name, severity, status, summary, consequence string) Rule {
	return b.alert(name, severity,
		fmt.Sprintf("max by (%s) ("+vocab.CDCSlotWALStatus+"%s) == 1", b.by(vocab.LabelCDC), b.selector(eq("status", status))),
		"1m", summary,
		"The slot of cdc {{ $labels.cdc }} has wal_status "+status+" ({{ $value }}): "+consequence,
		nil)
}
