package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// ConsumersUID is the fixed uid of the consumers dashboard.
const ConsumersUID = "outbox-consumers"

// Consumers shows how far each consumer group lags, in records and in
// time against the group's deadline, and each share group's when the
// config watches any.
func Consumers(cfg *config.Config) (dashboard.Dashboard, error) {
	b := newDashboard(cfg, ConsumersUID, "Outbox / Consumers",
		"Consumer groups of the outbox topics: lag in records and in seconds against each group's deadline.").
		WithVariable(groupVariable()).
		WithRow(dashboard.NewRowBuilder("Lag")).
		WithPanel(dashedQuery(graph("Lag in seconds vs deadline",
			"Age of the oldest record each group has not consumed (solid), 0 when caught up, against the group's lag deadline (dashed red). Solid above dashed pages: OutboxConsumerLagAboveDeadline.",
			"s",
			target{fmt.Sprintf("max by (cluster, group, topic) ("+vocab.ConsumerLagSeconds+"%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
			target{fmt.Sprintf("max by (cluster, group) ("+vocab.ConsumerDeadline+"%s)", groupSel()), "{{cluster}} {{group}} deadline"},
		), "B")).
		WithPanel(graph("Lag in records",
			"Records between each group's committed offset and the high watermark, summed over partitions.",
			"short",
			target{fmt.Sprintf("max by (cluster, group, topic) ("+vocab.ConsumerLagMessages+"%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
		)).
		WithPanel(graph("Group members",
			"Members of each consumer group. Zero members with a growing lag: nobody consumes.",
			"short",
			target{fmt.Sprintf("max by (cluster, group) ("+vocab.ConsumerGroupMembers+"%s)", groupSel()), "{{cluster}} {{group}}"},
		)).
		WithPanel(graph("Partitions without a commit",
			"Partitions each group has members for, or added after its commits, with no committed offset: their lag is unknown. Lasting past the deadline warns: OutboxConsumerUncommittedPartitions.",
			"short",
			target{fmt.Sprintf("max by (cluster, group, topic) ("+vocab.ConsumerUncommitted+"%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
		))
	if watchesShareGroups(cfg) {
		b = shareGroupRow(b)
	}
	return finish(cfg)(b.Build())
}

// watchesShareGroups says whether any cluster of cfg selects share groups.
func watchesShareGroups(cfg *config.Config) bool {
	for _, k := range cfg.Kafka {
		if len(k.ShareGroups) > 0 {
			return true
		}
	}
	return false
}

// shareGroupRow adds the share groups' lag, in seconds and records, and
// their members.
func shareGroupRow(b *dashboard.DashboardBuilder) *dashboard.DashboardBuilder {
	return b.
		WithRow(dashboard.NewRowBuilder("Share groups")).
		WithPanel(dashedQuery(graph("Share group lag in seconds vs deadline",
			"Age of the record at each share group's start offset (an upper bound of its oldest unacknowledged record's), 0 when caught up, against the group's deadline (dashed red). Solid above dashed pages: OutboxShareGroupLagAboveDeadline.",
			"s",
			target{fmt.Sprintf("max by (cluster, group, topic) ("+vocab.ShareGroupLagSeconds+"%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
			target{fmt.Sprintf("max by (cluster, group) ("+vocab.ConsumerDeadline+"%s) and on (cluster, group) max by (cluster, group) ("+vocab.ShareGroupInfo+"%s)", groupSel(), groupSel()), "{{cluster}} {{group}} deadline"},
		), "B")).
		WithPanel(graph("Share group lag in records",
			"Records each share group has not acknowledged, as kafka-share-groups --describe counts its LAG, summed over partitions.",
			"short",
			target{fmt.Sprintf("max by (cluster, group, topic) ("+vocab.ShareGroupLagMessages+"%s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
		)).
		WithPanel(graph("Share group members",
			"Members of each share group.",
			"short",
			target{fmt.Sprintf("max by (cluster, group) ("+vocab.ShareGroupMembers+"%s)", groupSel()), "{{cluster}} {{group}}"},
		))
}
