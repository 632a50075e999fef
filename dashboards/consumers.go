package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// ConsumersUID is the fixed uid of the consumers dashboard.
const ConsumersUID = "outbox-consumers"

// Consumers shows how far each consumer group lags, in records and in
// time against the group's deadline.
func Consumers(cfg *config.Config) (dashboard.Dashboard, error) {
	return finish(cfg)(newDashboard(cfg, ConsumersUID, "Outbox / Consumers",
		"Consumer groups of the outbox topics: lag in records and in seconds against each group's deadline.").
		WithVariable(groupVariable()).
		WithRow(dashboard.NewRowBuilder("Lag")).
		WithPanel(dashedQuery(graph("Lag in seconds vs deadline",
			"Age of the oldest record each group has not consumed (solid), 0 when caught up, against the group's lag deadline (dashed red). Solid above dashed pages: OutboxConsumerLagAboveDeadline.",
			"s",
			target{fmt.Sprintf("max by (cluster, group, topic) (outbox_consumer_lag_seconds%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
			target{fmt.Sprintf("max by (cluster, group) (outbox_consumer_deadline_seconds%s)", groupSel()), "{{cluster}} {{group}} deadline"},
		), "B")).
		WithPanel(graph("Lag in records",
			"Records between each group's committed offset and the high watermark, summed over partitions.",
			"short",
			target{fmt.Sprintf("max by (cluster, group, topic) (outbox_consumer_lag_messages%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
		)).
		WithPanel(graph("Group members",
			"Members of each consumer group. Zero members with a growing lag: nobody consumes.",
			"short",
			target{fmt.Sprintf("max by (cluster, group) (outbox_consumer_group_members%s)", groupSel()), "{{cluster}} {{group}}"},
		)).
		Build())
}
