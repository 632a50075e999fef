package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// whereRow is the overview's first row: is anything late, and where. A
// count of series past their deadline, the series sorted by age over
// deadline, consumer lag over its deadline, and each collector's health,
// where a failed collector shows as failed rather than as "no data".
func whereRow(d *dashboard.DashboardBuilder, cfg *config.Config) {
	labels := outboxLabels(cfg)
	by := strings.Join(append([]string{"outbox"}, labels...), ", ")
	ratio := fmt.Sprintf("max by (%[1]s) (%[3]s%[2]s)\n/ on (%[1]s)\nmax by (%[1]s) (%[4]s%[2]s)", by, outboxSel(cfg), vocab.OutboxOldestPendingAge, vocab.OutboxDeadline)
	d.WithRow(dashboard.NewRowBuilder("Is anything late, and where")).
		WithPanel(pastDeadlineStat(ratio)).
		WithPanel(lateTable(ratio)).
		WithPanel(collectorHealth())
	if len(cfg.Kafka) > 0 {
		d.WithPanel(graph("Consumer lag ÷ deadline",
			"Age of the oldest record each consumer group has not consumed, divided by the group's lag deadline. Above 1 (the red line) the group is late: OutboxConsumerLagAboveDeadline pages.",
			"short",
			target{fmt.Sprintf("max by (cluster, group, topic) ("+vocab.ConsumerLagSeconds+"%[1]s)\n/ on (cluster, group) group_left ()\nmax by (cluster, group) ("+vocab.ConsumerDeadline+"%[1]s)", groupSel()), "{{cluster}} {{group}} {{topic}}"},
		).Span(24).Thresholds(deadlineThresholds()).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine)))
	}
}

// deadlineThresholds colour a ratio to its deadline: red from 1.
func deadlineThresholds() *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps([]dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr(1.0), Color: "red"}})
}

// pastDeadlineStat counts the series (outbox and label values) whose
// oldest unpublished event is older than its deadline; 0, not "no data",
// when none is.
func pastDeadlineStat(ratio string) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title("Series past their deadline").
		Description("Outbox and label values whose oldest unpublished event is older than its notification deadline. Anything but 0 is late now: the table beside says where.").
		Unit("short").
		Datasource(datasource()).
		Height(6).
		Span(6).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Thresholds(deadlineThresholds()).
		WithTarget(query("A", target{fmt.Sprintf("count((%s) >= 1) or vector(0)", ratio), "past deadline"}))
}

// lateTable lists every outbox and label values by age over deadline,
// the latest first: 1 is the deadline.
func lateTable(ratio string) *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title("Oldest unpublished event ÷ deadline").
		Description("For each outbox and label values, the age of its oldest unpublished event divided by its deadline, largest first. 1 is the deadline: red rows are late. Open Oldest unpublished event vs deadline below for their history.").
		Unit("short").
		Decimals(2).
		Datasource(datasource()).
		Height(6).
		Span(12).
		Thresholds(deadlineThresholds()).
		CellOptions(common.TableCellOptions{TableColoredBackgroundCellOptions: &common.TableColoredBackgroundCellOptions{Type: "color-background"}}).
		SortBy([]cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName("Value").Desc(true)}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "labelsToFields", Options: map[string]any{"mode": "columns"}}).
		WithTarget(instant("A", target{fmt.Sprintf("sort_desc(%s)", ratio), ""}))
}

// collectorHealth shows each collector and target as ok or failed, the
// worst replica's. A failed collection exports no metrics of its own, so
// without this panel a failure looks like a quiet pipeline.
func collectorHealth() *stat.PanelBuilder {
	ok, failed := "ok", "failed"
	return stat.NewPanelBuilder().
		Title("Collector health").
		Description("The last collection of each collector and target on the worst replica: failed means its metrics are missing and the alerts on them cannot fire (OutboxCollectorFailing, OutboxCollectorFailingEverywhere).").
		Unit("bool").
		Datasource(datasource()).
		Height(6).
		Span(6).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		TextMode(common.BigValueTextModeValueAndName).
		// No series at all: the exporter itself is not scraped.
		NoValue("exporter not scraped").
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Mappings([]dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{
			"0": {Text: &failed, Color: cog.ToPtr("red"), Index: cog.ToPtr[int32](0)},
			"1": {Text: &ok, Color: cog.ToPtr("green"), Index: cog.ToPtr[int32](1)},
		}}}}).
		WithTarget(query("A", target{fmt.Sprintf("min by (collector, target) (%s%s)", vocab.CollectorSuccess, sel()), "{{collector}} {{target}}"}))
}

// instant builds an instant Prometheus query in table format.
func instant(refID string, t target) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource()).
		RefId(refID).
		Expr(t.expr).
		LegendFormat(t.legend).
		Format(prometheus.PromQueryFormatTable).
		Instant()
}
