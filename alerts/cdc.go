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
		b.alert("OutboxCDCSlotLagAboveDeadline",
			fmt.Sprintf("max by (%[1]s) ("+vocab.CDCSlotLagSeconds+"%[2]s)\n> on (%[1]s)\nmax by (%[1]s) ("+vocab.CDCDeadline+"%[2]s)", by, b.selector()),
			says{}, nil),
		b.alert("OutboxCDCSlotInactive", fmt.Sprintf("max by (%s) ("+vocab.CDCSlotActive+"%s) == 0", by, b.selector()), says{}, nil),
		b.alert("OutboxCDCSlotMissing", fmt.Sprintf("max by (%s) ("+vocab.CDCSlotMissing+"%s) == 1", by, b.selector()), says{}, nil),
		b.walStatusAlert("OutboxCDCSlotWALUnreserved", "unreserved"),
		b.walStatusAlert("OutboxCDCSlotWALLost", "lost"),
	}
}

// walStatusAlert fires when a cdc slot's wal_status is status for a
// minute.
func (b *builder) walStatusAlert(name, status string) Rule {
	return b.alert(name, fmt.Sprintf("max by (%s) ("+vocab.CDCSlotWALStatus+"%s) == 1", b.by(vocab.LabelCDC), b.selector(eq("status", status))), says{}, nil)
}
