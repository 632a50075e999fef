package dashboards

import (
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// RateInterval is the range every rate() and increase() uses.
const RateInterval = "$__rate_interval"

// datasource is the templated Prometheus datasource of every panel.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
}

// newDashboard starts a dashboard with the fixed uid (after the
// configured prefix), the common tags,
// links to its siblings and the datasource, job and instance variables.
func newDashboard(cfg *config.Config, uid, title, description string) *dashboard.DashboardBuilder {
	d := dashboard.NewDashboardBuilder(title).
		Uid(cfg.Alerting.DashboardUIDPrefix+uid).
		Description(description).
		Tags([]string{Tag}).
		Readonly().
		Refresh("1m").
		Time("now-6h", "now").
		Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("Outbox dashboards").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{Tag}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus"))
	if clusterLabel(cfg) != "" {
		d.WithVariable(clusterVariable(cfg))
	}
	return d.WithVariable(labelVariable(cfg, "job")).
		WithVariable(labelVariable(cfg, "instance"))
}

// labelVariable is a multi-value query variable over the exporter's
// targets whose "All" matches any value. Its label is the name title-cased
// ("Job", "Instance"), as dashboard-linter's template-job-rule and
// template-instance-rule want.
func labelVariable(cfg *config.Config, label string) *dashboard.QueryVariableBuilder {
	q := "label_values(" + vocab.ExporterBuildInfo + buildInfoSelector(cfg, label) + ", " + label + ")"
	return queryVariable(label, strings.ToUpper(label[:1])+label[1:], q, ".+")
}

// queryVariable is a multi-value variable of label values from q, with
// All matching allValue, refreshed when the time range changes.
func queryVariable(name, title, q, allValue string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(title).
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(allValue)
}

// buildInfoSelector narrows a variable's values: to the configured
// alerting selector, and for instance also to the chosen jobs.
func buildInfoSelector(cfg *config.Config, label string) string {
	var ms []string
	if s := strings.TrimSpace(cfg.Alerting.Selector); s != "" {
		ms = append(ms, s)
	}
	if cl := clusterLabel(cfg); cl != "" && label != cl {
		ms = append(ms, cl+`=~"$`+cl+`"`)
	}
	if label == "instance" {
		ms = append(ms, `job=~"$job"`)
	}
	if len(ms) == 0 {
		return ""
	}
	return "{" + strings.Join(ms, ", ") + "}"
}

// sel is the selector of every panel query: the chosen jobs and instances
// and extra matchers.
func sel(extra ...string) string {
	return "{" + strings.Join(append([]string{`job=~"$job"`, `instance=~"$instance"`}, extra...), ", ") + "}"
}

// filterVariable is a multi-value variable over the values of label on
// metric, for the chosen jobs and instances. Its "All" is ".*", not ".+":
// it must keep the series that lack the label (an outbox configured
// without it).
func filterVariable(label, metric string) *dashboard.QueryVariableBuilder {
	q := "label_values(" + metric + sel() + ", " + label + ")"
	return queryVariable(label, strings.ToUpper(label[:1])+strings.ReplaceAll(label[1:], "_", " "), q, ".*")
}

// outboxVariables are the filter variables of the outbox and of the
// outboxes' label columns (event type, destination...).
func outboxVariables(d *dashboard.DashboardBuilder, cfg *config.Config) {
	d.WithVariable(filterVariable(vocab.LabelOutbox, vocab.OutboxOldestPendingAge))
	for _, l := range outboxLabels(cfg) {
		d.WithVariable(filterVariable(l, vocab.OutboxOldestPendingAge))
	}
}

// outboxSel is sel for a metric that carries the outboxes' label columns:
// each filtered by its variable.
func outboxSel(cfg *config.Config, extra ...string) string {
	ms := []string{`outbox=~"$outbox"`}
	for _, l := range outboxLabels(cfg) {
		ms = append(ms, l+`=~"$`+l+`"`)
	}
	return sel(append(ms, extra...)...)
}

// groupSel is sel for a consumer group's metric, filtered by the group
// variable.
func groupSel(extra ...string) string {
	return sel(append([]string{`group=~"$group"`}, extra...)...)
}

// groupVariable filters consumer groups.
func groupVariable() *dashboard.QueryVariableBuilder {
	return filterVariable(vocab.LabelGroup, vocab.ConsumerGroupMembers)
}

// recordSel is the selector of a recording rule's series, which keep job
// but not instance.
func recordSel(extra ...string) string {
	return "{" + strings.Join(append([]string{`job=~"$job"`}, extra...), ", ") + "}"
}

// target is one query of a panel.
type target struct {
	expr, legend string
}

// query builds a Prometheus query with a fixed refId.
func query(refID string, t target) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource()).
		RefId(refID).
		Expr(t.expr).
		LegendFormat(t.legend).
		Range()
}

// refID names the i-th query of a panel: A, B, C...
func refID(i int) string { return string(rune('A' + i)) }

// graph is a time series panel.
func graph(title, description, unit string, targets ...target) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Unit(unit).
		Datasource(datasource()).
		Height(8).
		Span(12).
		FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().
			ShowLegend(true).
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			Calcs([]string{"lastNotNull", "max"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().
			Mode(common.TooltipDisplayModeMulti).
			Sort(common.SortOrderDescending))
	for i, t := range targets {
		p.WithTarget(query(refID(i), t))
	}
	return p
}

// stacked makes a graph's series stack.
func stacked(p *timeseries.PanelBuilder) *timeseries.PanelBuilder {
	return p.FillOpacity(60).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

// dashedQuery draws the series of one query as a dashed red line: the
// thresholds (deadlines) a panel's other series are compared with.
func dashedQuery(p *timeseries.PanelBuilder, ref string) *timeseries.PanelBuilder {
	return p.OverrideByQuery(ref, []dashboard.DynamicConfigValue{
		{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
		{Id: "custom.fillOpacity", Value: 0},
		{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": "red"}},
	})
}

// latencyHeatmap is a heatmap of a histogram's buckets.
func latencyHeatmap(title, description, expr string) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().
		Title(title).
		Description(description).
		Unit("s").
		Datasource(datasource()).
		Height(8).
		Span(12).
		Calculate(false).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle)).
		WithTarget(prometheus.NewDataqueryBuilder().
			Datasource(datasource()).
			RefId("A").
			Expr(expr).
			LegendFormat("{{le}}").
			Format(prometheus.PromQueryFormatHeatmap).
			Range())
}

// finish returns what finishes a built dashboard of cfg: it scopes the
// queries to the cluster label when cfg has one, and numbers the rows and
// panels in order, so that panel links and the generated JSON stay
// stable. Called as finish(cfg)(builder.Build()).
func finish(cfg *config.Config) func(dashboard.Dashboard, error) (dashboard.Dashboard, error) {
	return func(d dashboard.Dashboard, err error) (dashboard.Dashboard, error) {
		if err != nil {
			return d, err
		}
		if cl := clusterLabel(cfg); cl != "" {
			newClusterScoper(cl).apply(&d)
		}
		linkRunbooks(cfg, &d)
		return number(d), nil
	}
}

// number numbers a dashboard's rows and panels in order.
func number(d dashboard.Dashboard) dashboard.Dashboard {
	var id uint32
	for _, p := range d.Panels {
		id++
		switch {
		case p.Panel != nil:
			p.Panel.Id = cog.ToPtr(id)
		case p.RowPanel != nil:
			p.RowPanel.Id = id
			for i := range p.RowPanel.Panels {
				id++
				p.RowPanel.Panels[i].Id = cog.ToPtr(id)
			}
		}
	}
	return d
}
