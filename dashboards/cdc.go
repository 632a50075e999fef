package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// CDCUID is the fixed uid of the change data capture dashboard.
const CDCUID = "outbox-cdc"

// CDC shows the outboxes published by change data capture: how far each
// replication slot is behind, in time against its deadline and in WAL
// bytes, whether a connector holds it, and whether its WAL is safe.
func CDC(cfg *config.Config) (dashboard.Dashboard, error) {
	return finish(cfg)(newDashboard(cfg, CDCUID, "Outbox / Change data capture",
		"Outboxes published by a connector (Debezium) from a logical replication slot: the slot's confirmed position is the pending backlog.").
		WithRow(dashboard.NewRowBuilder("Change data capture")).
		WithPanel(dashedQuery(graph("Slot lag",
			"How long ago the server's WAL was where the slot's confirmed position is: the age of the oldest change the connector has not confirmed. The dashed line is the deadline; OutboxCDCSlotLagAboveDeadline pages above it.",
			"s",
			target{fmt.Sprintf("max by (cdc) ("+vocab.CDCSlotLagSeconds+"%s)", sel()), "{{cdc}}"},
			target{fmt.Sprintf("max by (cdc) ("+vocab.CDCDeadline+"%s)", sel()), "{{cdc}} deadline"},
		), "B")).
		WithPanel(graph("Slot lag in WAL bytes",
			"WAL bytes between the server's position and the slot's confirmed position: it grows at the rate of the database's writes while the connector is stopped.",
			"bytes",
			target{fmt.Sprintf("max by (cdc) ("+vocab.CDCSlotLagBytes+"%s)", sel()), "{{cdc}}"},
		)).
		WithPanel(graph("Connector attached",
			"1 while a connector holds the slot. OutboxCDCSlotInactive fires after 5 minutes at 0.",
			"short",
			target{fmt.Sprintf("max by (cdc) ("+vocab.CDCSlotActive+"%s)", sel()), "{{cdc}}"},
		)).
		WithPanel(graph("WAL status and safe WAL left",
			"The slot's wal_status (unreserved: WAL may go at the next checkpoint; lost: it went, events are lost) and the WAL that can still be written before the slot is lost, where max_slot_wal_keep_size limits it.",
			"bytes",
			target{fmt.Sprintf("max by (cdc, status) ("+vocab.CDCSlotWALStatus+"%s) > 0", sel(`status=~"unreserved|lost"`)), "{{cdc}} {{status}}"},
			target{fmt.Sprintf("min by (cdc) ("+vocab.CDCSlotSafeWALSize+"%s)", sel()), "{{cdc}} safe WAL"},
		)).
		Build())
}
