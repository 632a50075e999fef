package dashboards

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// OverviewUID is the fixed uid of the outbox overview dashboard.
const OverviewUID = "outbox-overview"

// Overview is the first dashboard on call opens: is any event older than
// its deadline, where are the rows stuck, how fast and how late are they
// published, and how much error budget is left.
func Overview(cfg *config.Config) (dashboard.Dashboard, error) {
	labels := outboxLabels(cfg)
	by := strings.Join(append([]string{"outbox"}, labels...), ", ")
	lg := legend(append([]string{"outbox"}, labels...)...)

	d := newDashboard(cfg, OverviewUID, "Outbox / Overview",
		"Is anything late and where: unpublished outbox events against their notification deadlines, where they are stuck, publish rate and latency, and the publish-within-deadline SLO.")
	outboxVariables(d, cfg)
	if len(cfg.Kafka) > 0 {
		d.WithVariable(groupVariable())
	}
	whereRow(d, cfg)
	// Series of one outbox come from every replica (max over them), and
	// each label value is a series of its own: totals are the sum over
	// label values of the max over replicas.
	osel := outboxSel(cfg)
	d.WithRow(dashboard.NewRowBuilder("Deadlines")).
		WithPanel(dashedQuery(graph("Oldest unpublished event vs deadline",
			"Age of the oldest unpublished row of each outbox and label values (solid) against the deadline configured for them (dashed red). A solid line above its dashed line is a missed notification deadline: OutboxNotificationDeadlineMissed pages.",
			"s",
			target{fmt.Sprintf("max by (%s) (%s%s)", by, vocab.OutboxOldestPendingAge, osel), lg + " age"},
			target{fmt.Sprintf("max by (%s) (%s%s)", by, vocab.OutboxDeadline, osel), lg + " deadline"},
		), "B")).
		WithPanel(graph("Events past their deadline",
			"Unpublished rows older than their deadline. Anything above zero is an event whose consumers are already late.",
			"short",
			target{fmt.Sprintf("max by (%s) ("+vocab.OutboxPastDeadline+"%s)", by, osel), lg},
		)).
		WithRow(dashboard.NewRowBuilder("Where events are stuck")).
		WithPanel(stacked(graph("Events by state",
			"Unpublished and dead rows of each outbox by state, all label values added up, stacked: pending (never claimed), in_flight (claimed, lease live), lease_expired (claimed by a relay that died or hung), dead (abandoned).",
			"short",
			target{fmt.Sprintf("sum by (outbox, state) (max by (%s, state) ("+vocab.OutboxEvents+"%s))", by, osel), "{{outbox}} {{state}}"},
		))).
		WithPanel(graph("Retried and unknown-result events",
			"Unpublished rows with at least one publish attempt, and rows whose publish result is unknown: the broker may already hold them, so a retry may duplicate them.",
			"short",
			target{fmt.Sprintf("max by (%s) ("+vocab.OutboxRetried+"%s)", by, osel), lg + " retried"},
			target{fmt.Sprintf("max by (%s) ("+vocab.OutboxUnknownResult+"%s)", by, osel), lg + " unknown result"},
		)).
		WithPanel(graph("Lease expiries per minute",
			"Distinct (row, lease) expiries observed per minute. A steady stream means relays die, hang or overrun their lease while publishing.",
			"short",
			target{fmt.Sprintf("max by (outbox) (rate("+vocab.OutboxLeaseExpirations+"%s[%s])) * 60", sel(`outbox=~"$outbox"`), RateInterval), "{{outbox}}"},
		)).
		WithRow(dashboard.NewRowBuilder("Publishing")).
		WithPanel(graph("Publish rate",
			"Rows seen becoming published per second.",
			"ops",
			target{fmt.Sprintf("max by (%s) (rate("+vocab.OutboxPublished+"%s[%s]))", by, osel, RateInterval), lg},
		)).
		WithPanel(graph("Publish latency quantiles",
			"published_at - created_at of the rows seen becoming published: median, 90th and 99th percentile.",
			"s",
			latencyQuantile("0.5"), latencyQuantile("0.9"), latencyQuantile("0.99"),
		)).
		WithPanel(latencyHeatmap("Publish latency distribution",
			"How many rows were published with each latency (published_at - created_at) per interval.",
			fmt.Sprintf("sum by (le) (max by (outbox, le) (increase(outbox_publish_latency_seconds_bucket%s[%s])))", sel(), RateInterval),
		))

	sloRow(d, cfg, by, osel)
	return finish(cfg)(d.Build())
}

// sloRow is the publish-within-deadline SLO, for outboxes whose publish
// time is known: the share on time over all label values, and the error
// budget left.
func sloRow(d *dashboard.DashboardBuilder, cfg *config.Config, by, osel string) {
	if slo := sloTargets(cfg); len(slo) > 0 {
		d.WithRow(dashboard.NewRowBuilder("SLO: published within deadline")).
			WithPanel(graph("Share published within deadline",
				"Of the rows seen becoming published, the share published before their deadline, over all label values (the max over replicas of each, added up). The objective of each outbox is in its config (slo_objective, default 99.9%) and in outbox_slo_objective.",
				"percentunit",
				target{fmt.Sprintf("1 - (\n  sum by (outbox) (max by (%[1]s) (rate("+vocab.OutboxPublishedLate+"%[2]s[%[3]s])))\n/\n  sum by (outbox) (max by (%[1]s) (rate("+vocab.OutboxPublished+"%[2]s[%[3]s])))\n)", by, osel, RateInterval), "{{outbox}}"},
			).Max(1)).
			WithPanel(graph("Error budget left (30 days)",
				"Share of the 30-day error budget not yet spent: 1 - (late share over 30 days) / (1 - objective). Below zero the objective is missed. Needs the generated recording rules, kept for 30 days: with less retention the share counts over what is kept.",
				"percentunit",
				slo...,
			).Max(1).Thresholds(dashboard.NewThresholdsConfigBuilder().
				Mode(dashboard.ThresholdsModeAbsolute).
				Steps([]dashboard.Threshold{
					{Value: nil, Color: "red"},
					{Value: cog.ToPtr(0.25), Color: "orange"},
					{Value: cog.ToPtr(0.5), Color: "green"},
				})))
	}
}

// latencyQuantile is one quantile of the publish latency.
func latencyQuantile(q string) target {
	return target{
		fmt.Sprintf("histogram_quantile(%s, max by (outbox, le) (rate(outbox_publish_latency_seconds_bucket%s[%s])))", q, sel(), RateInterval),
		"{{outbox}} p" + percentile(q),
	}
}

// percentile names a quantile as a percentile: 0.5 is 50, 0.99 is 99.
func percentile(q string) string {
	f, err := strconv.ParseFloat(q, 64)
	if err != nil {
		return q
	}
	return strconv.FormatFloat(f*100, 'f', -1, 64)
}

// sloTargets is the error-budget query of every outbox whose publish
// time is known, each against its own objective as the exporter exports
// it (outbox_slo_objective): no outbox or objective is written into the
// dashboard.
func sloTargets(cfg *config.Config) []target {
	for _, o := range cfg.Outboxes {
		if o.PublishedAt != "" {
			return []target{{
				fmt.Sprintf("1 - (\n  max by (outbox) (%s%s)\n/ on (outbox)\n  (1 - max by (outbox) (%s%s))\n)",
					alerts.ErrorRatioRecord("30d"), recordSel(`outbox=~"$outbox"`), vocab.SLOObjective, sel(`outbox=~"$outbox"`)),
				"{{outbox}}",
			}}
		}
	}
	return nil
}
