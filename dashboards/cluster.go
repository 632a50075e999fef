package dashboards

import (
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// clusterLabel is the configured alerting.cluster_label, "" for none.
func clusterLabel(cfg *config.Config) string {
	return strings.TrimSpace(cfg.Alerting.ClusterLabel)
}

// clusterVariable filters the Prometheus clusters (alerting.cluster_label)
// a global datasource (Thanos, Mimir) holds.
func clusterVariable(cfg *config.Config) *dashboard.QueryVariableBuilder {
	label := clusterLabel(cfg)
	q := "label_values(" + vocab.ExporterBuildInfo + buildInfoSelector(cfg, label) + ", " + label + ")"
	return queryVariable(label, "Cluster", q, ".+")
}

// clusterScoper rewrites the queries of a dashboard built without a
// cluster label so that they keep one: every selector matches the
// cluster variable, every max and min over replicas and every vector
// match keeps the label, and legends name the cluster. Sums are left as
// they are: they add up label values (and so clusters) on purpose. Every
// query the dashboards build starts its selectors with the job matcher
// and writes its groupings as "by (" and "on (", which this relies on.
type clusterScoper struct {
	label string
	r     *strings.Replacer
}

func newClusterScoper(label string) *clusterScoper {
	return &clusterScoper{label: label, r: strings.NewReplacer(
		`{job=~"$job"`, `{job=~"$job", `+label+`=~"$`+label+`"`,
		"max by (", "max by ("+label+", ",
		"min by (", "min by ("+label+", ",
		"on (", "on ("+label+", ",
	)}
}

// expr rewrites one panel query.
func (c *clusterScoper) expr(s string) string { return c.r.Replace(s) }

// legend names the cluster in a legend.
func (c *clusterScoper) legend(s string) string {
	if s == "" {
		return s
	}
	return "{{" + c.label + "}} " + s
}

// apply rewrites every panel query and every query variable but the
// cluster's own of d.
func (c *clusterScoper) apply(d *dashboard.Dashboard) {
	for _, p := range panelsOf(*d) {
		for i, t := range p.Targets {
			// The SDK keeps queries as values in the panel.
			q, ok := t.(prometheus.Dataquery)
			if !ok {
				continue
			}
			q.Expr = c.expr(q.Expr)
			if q.LegendFormat != nil {
				q.LegendFormat = cog.ToPtr(c.legend(*q.LegendFormat))
			}
			p.Targets[i] = q
		}
	}
	for i := range d.Templating.List {
		v := &d.Templating.List[i]
		if v.Name == c.label || v.Query == nil || v.Query.String == nil {
			continue
		}
		v.Query.String = cog.ToPtr(c.expr(*v.Query.String))
		if v.Definition != nil {
			v.Definition = cog.ToPtr(c.expr(*v.Definition))
		}
	}
}
