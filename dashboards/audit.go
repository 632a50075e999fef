package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// AuditUID is the fixed uid of the audit dashboard.
const AuditUID = "outbox-audit"

// Audit shows what the audit of each outbox against its topics found.
func Audit(cfg *config.Config) (dashboard.Dashboard, error) {
	return finish(cfg)(newDashboard(cfg, AuditUID, "Outbox / Audit",
		"Sampled outbox events compared with the topics their relays publish to: silent loss, lost acknowledgements and duplicates.").
		WithRow(dashboard.NewRowBuilder("Findings")).
		WithPanel(graph("Silent loss",
			"Sampled rows marked published, older than grace, whose id never reached the topics. Anything above zero is lost and pages: OutboxAuditSilentLoss.",
			"short",
			target{fmt.Sprintf("max by (outbox) ("+vocab.AuditMissingInBroker+"%s)", sel()), "{{outbox}}"},
		)).
		WithPanel(graph("Lost acknowledgements",
			"Sampled unpublished rows whose id is already on the topics: the broker's acknowledgement was lost and a retry will publish them again.",
			"short",
			target{fmt.Sprintf("max by (outbox) ("+vocab.AuditUnmarkedInBroker+"%s)", sel()), "{{outbox}}"},
		)).
		WithPanel(graph("Duplicates",
			"Sampled ids seen on the topics more than once, per interval. Consumers must be idempotent for these.",
			"short",
			target{fmt.Sprintf("max by (outbox) (increase("+vocab.AuditDuplicates+"%s[%s]))", sel(), RateInterval), "{{outbox}}"},
		)).
		WithPanel(graph("Ids compared",
			"Sampled ids compared per second: zero means the audit is not running.",
			"ops",
			target{fmt.Sprintf("max by (outbox) (rate("+vocab.AuditChecked+"%s[%s]))", sel(), RateInterval), "{{outbox}}"},
		)).
		Build())
}
