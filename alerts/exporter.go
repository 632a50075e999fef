package alerts

import (
	"fmt"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// Thresholds of the collector alerts: the share of failed collections
// over CollectorWindow above which one replica's collector opens a
// ticket, and above which the collector failing on every replica pages.
// A share, not "== 0 for 10m": a collector failing nine scrapes in ten
// is as blind as one failing all, yet never stays at zero for long.
const (
	CollectorWindow        = "15m"
	CollectorFailingShare  = 0.25
	CollectorBlindingShare = 0.5
)

// exporterAlerts fire when the exporter is gone, a replica is down, a
// collector fails or a config reload failed: each blinds the alerts
// above.
func (b *builder) exporterAlerts() []Rule {
	success := vocab.CollectorSuccess + b.selector()
	cluster := []string{"cluster", b.inCluster()}
	return []Rule{
		b.alert("OutboxExporterAbsent", b.absentExpr(), says{fill: []string{"selector", b.describeSelector(), "cluster", b.inCluster()}}, nil),
		// A down replica is a ticket: the other replicas still watch, but
		// the next loss is an outage.
		b.alert("OutboxExporterTargetDown", fmt.Sprintf("up%s == 0", b.selector()), says{fill: cluster}, nil),
		b.alert("OutboxCollectorFailing",
			fmt.Sprintf("1 - avg_over_time(%s[%s]) > %g", success, CollectorWindow, CollectorFailingShare),
			says{}, nil),
		// Every replica failing one collector blinds its critical alerts
		// (deadlines, lag, loss): that pages.
		b.alert("OutboxCollectorFailingEverywhere",
			fmt.Sprintf("min by (%s) (1 - avg_over_time(%s[%s])) > %g", b.by("collector", "target"), success, CollectorWindow, CollectorBlindingShare),
			says{fill: cluster}, nil),
		b.alert("OutboxExporterConfigReloadFailed", fmt.Sprintf(vocab.ConfigReloadSuccessful+"%s == 0", b.selector()), says{}, nil),
	}
}

// absentExpr is true when no exporter is scraped. With a cluster label it
// is also true per cluster: absent() sees the series of every cluster a
// global ruler evaluates, so one cluster losing all its exporters would
// not make it true. A cluster whose exporters were seen in the last day
// and are gone now is absent.
func (b *builder) absentExpr() string {
	info := vocab.ExporterBuildInfo + b.selector()
	expr := fmt.Sprintf("absent(%s)", info)
	if b.cluster == "" {
		return expr
	}
	return fmt.Sprintf("%s\nor\nmax by (%s) (max_over_time(%s[1d]))\nunless on (%s)\nmax by (%s) (%s)",
		expr, b.by(), info, b.by(), b.by(), info)
}

// inCluster names the cluster of an alert in a description, when there is
// a cluster label.
func (b *builder) inCluster() string {
	if b.cluster == "" {
		return ""
	}
	return fmt.Sprintf("{{ if $labels.%[1]s }} in %[1]s {{ $labels.%[1]s }}{{ end }}", b.cluster)
}

// describeSelector renders the configured selector for a description.
func (b *builder) describeSelector() string {
	if b.sel == "" {
		return "any selector"
	}
	return "{" + strings.ReplaceAll(b.sel, `"`, "'") + "}"
}
