package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// ExporterUID is the fixed uid of the exporter health dashboard.
const ExporterUID = "outbox-exporter"

// Exporter shows whether outbox_exporter itself works: scrapes, each
// collector's success and duration, and config reloads.
func Exporter(cfg *config.Config) (dashboard.Dashboard, error) {
	b := newDashboard(cfg, ExporterUID, "Outbox / Exporter health",
		"Health of outbox_exporter itself: a failing collector hides the metrics every other dashboard and alert relies on.").
		WithRow(dashboard.NewRowBuilder("Collectors")).
		WithPanel(graph("Collector success",
			"1 if the last collection of each collector and target worked, 0 if it failed or timed out.",
			"bool",
			target{fmt.Sprintf("min by (instance, collector, target) (%s%s)", vocab.CollectorSuccess, sel()), "{{instance}} {{collector}} {{target}}"},
		).Min(0).Max(1)).
		WithPanel(graph("Collector duration",
			"Length of the last collection of each collector and target. Near the scrape timeout, collections start to fail.",
			"s",
			target{fmt.Sprintf("max by (instance, collector, target) ("+vocab.CollectorDuration+"%s)", sel()), "{{instance}} {{collector}} {{target}}"},
		)).
		WithRow(dashboard.NewRowBuilder("Process")).
		WithPanel(graph("Scrape up",
			"1 if Prometheus scraped the exporter, 0 if the scrape failed.",
			"bool",
			target{fmt.Sprintf("max by (instance) (up%s)", sel()), "{{instance}}"},
		).Min(0).Max(1)).
		WithPanel(graph("Config reload successful",
			"1 if the last load or reload of the config worked. After a failed reload the exporter keeps running the previous config.",
			"bool",
			target{fmt.Sprintf("max by (instance) ("+vocab.ConfigReloadSuccessful+"%s)", sel()), "{{instance}}"},
		).Min(0).Max(1))
	if cfg.LeaderElection != nil {
		b = leadership(b)
	}
	return finish(cfg)(b.Build())
}

// leadership is the row of who leads each task that leader_election
// shares: one line per replica and task, 1 where it leads. A task whose
// lines all read 0 has no leader (OutboxTaskLeaderless); two at 1 at
// once would be two leaders.
func leadership(b *dashboard.DashboardBuilder) *dashboard.DashboardBuilder {
	return b.WithRow(dashboard.NewRowBuilder("Leadership")).
		WithPanel(graph("Who leads",
			"1 on the replica that leads each task (a reconcile job's runs, an audit's reading of the topics), 0 on the replicas that stand by. A handover shows as one line falling and another rising after it.",
			"bool",
			target{fmt.Sprintf("max by (instance, task) ("+vocab.ExporterLeader+"%s)", sel()), "{{task}} on {{instance}}"},
		).Min(0).Max(1).Span(24))
}
