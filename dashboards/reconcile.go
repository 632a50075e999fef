package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// ReconcileUID is the fixed uid of the reconcile dashboard.
const ReconcileUID = "outbox-reconcile"

// Reconcile shows the gaps the reconcile jobs find between the authority,
// the outbox and the target, and whether the jobs run.
func Reconcile(cfg *config.Config) (dashboard.Dashboard, error) {
	return finish(cfg)(newDashboard(cfg, ReconcileUID, "Outbox / Reconcile",
		"Gaps between the authoritative table, the outbox and the derived target found by each reconcile job, and the health of the jobs.").
		WithRow(dashboard.NewRowBuilder("Gaps")).
		WithPanel(stacked(graph("Gaps by kind",
			"Gaps found by the last completed run: missing_outbox (a committed row with no outbox event: lost, pages), missing_target, stale_target, orphan_target, duplicate_target (one key twice in the target).",
			"short",
			target{fmt.Sprintf("max by (reconcile, kind) ("+vocab.ReconcileGaps+"%s)", sel()), "{{reconcile}} {{kind}}"},
		))).
		WithPanel(graph("Rows checked",
			"Authority rows judged by the last completed run.",
			"short",
			target{fmt.Sprintf("max by (reconcile) ("+vocab.ReconcileRowsChecked+"%s)", sel()), "{{reconcile}}"},
		)).
		WithRow(dashboard.NewRowBuilder("Runs")).
		WithPanel(graph("Time since last successful run",
			"Seconds since the last successful run of each job. It should saw-tooth below the schedule's interval; OutboxReconcileNotSucceeding fires past three intervals.",
			"s",
			target{fmt.Sprintf("time() - max by (reconcile) ("+vocab.ReconcileLastSuccess+"%s)", sel()), "{{reconcile}}"},
		)).
		WithPanel(graph("Run duration",
			"Length of the last run of each job.",
			"s",
			target{fmt.Sprintf("max by (reconcile) ("+vocab.ReconcileDuration+"%s)", sel()), "{{reconcile}}"},
		)).
		Build())
}
