package dashboards

import (
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// PanelAlerts names, by panel title, the alerts that fire on what the
// panel shows: the panel links to their runbook sections, so whoever is
// paged goes from the graph to what to check and how to repair.
var PanelAlerts = map[string][]string{
	"Oldest unpublished event vs deadline": {"OutboxNotificationDeadlineMissed"},
	"Oldest unpublished event ÷ deadline":  {"OutboxNotificationDeadlineMissed"},
	"Events past their deadline":           {"OutboxNotificationDeadlineMissed"},
	"Series past their deadline":           {"OutboxNotificationDeadlineMissed", "OutboxConsumerLagAboveDeadline"},
	"Events by state":                      {"OutboxDeadEvents"},
	"Retried and unknown-result events":    {"OutboxUnknownResultEvents"},
	"Lease expiries per minute":            {"OutboxLeaseExpiriesSustained"},
	"Share published within deadline":      {"OutboxPublishDeadlineBudgetBurn"},
	"Error budget left (30 days)":          {"OutboxPublishDeadlineBudgetBurn"},
	"Collector health":                     {"OutboxCollectorFailing", "OutboxCollectorFailingEverywhere"},
	"Collector success":                    {"OutboxCollectorFailing", "OutboxCollectorFailingEverywhere"},
	"Scrape up":                            {"OutboxExporterTargetDown", "OutboxExporterAbsent"},
	"Config reload successful":             {"OutboxExporterConfigReloadFailed"},
	"Consumer lag ÷ deadline":              {"OutboxConsumerLagAboveDeadline"},
	"Lag in seconds vs deadline":           {"OutboxConsumerLagAboveDeadline"},
	"Group members":                        {"OutboxConsumerGroupEmpty"},
	"Gaps by kind":                         {"OutboxReconcileMissingOutbox", "OutboxReconcileGaps"},
	"Time since last successful run":       {"OutboxReconcileNotSucceeding"},
	"Run duration":                         {"OutboxReconcileRunTooLong"},
	"Silent loss":                          {"OutboxAuditSilentLoss"},
	"Lost acknowledgements":                {"OutboxAuditAcknowledgementLost"},
}

// runbookURL is the runbook section of alert: the config's runbook base
// (or the project's) and the alert's anchor.
func runbookURL(cfg *config.Config, alert string) string {
	base := strings.TrimSpace(cfg.Alerting.RunbookURL)
	if base == "" {
		base = alerts.DefaultRunbookURL
	}
	return base + "#" + alerts.Anchor(alert)
}

// linkRunbooks adds to each panel of PanelAlerts a link to the runbook
// section of each of its alerts.
func linkRunbooks(cfg *config.Config, d *dashboard.Dashboard) {
	link := func(p *dashboard.Panel) {
		if p == nil || p.Title == nil {
			return
		}
		for _, a := range PanelAlerts[*p.Title] {
			p.Links = append(p.Links, dashboard.DashboardLink{
				Title:       "Runbook: " + a,
				Type:        dashboard.DashboardLinkTypeLink,
				Url:         cog.ToPtr(runbookURL(cfg, a)),
				Tooltip:     "What " + a + " means, what to check and how to repair",
				Tags:        []string{},
				TargetBlank: true,
			})
		}
	}
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			link(p.Panel)
		case p.RowPanel != nil:
			for i := range p.RowPanel.Panels {
				link(&p.RowPanel.Panels[i])
			}
		}
	}
}
