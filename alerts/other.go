package alerts

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// DefaultReconcileInterval is the interval assumed for a reconcile schedule
// whose activations cannot be worked out.
const DefaultReconcileInterval = time.Hour

// reconcileMissedRuns is how many scheduled runs may go by without a
// success before OutboxReconcileNotSucceeding fires.
const reconcileMissedRuns = 3

// consumerAlerts page when a consumer group lags behind its deadline.
func (b *builder) consumerAlerts() []Rule {
	var rules []Rule
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Kafka)) {
		sel := b.selector(eq("cluster", name))
		rules = append(rules, b.alert("OutboxConsumerLagAboveDeadline", SeverityCritical,
			fmt.Sprintf("max by (job, cluster, group, topic) (outbox_consumer_lag_seconds%s)\n> on (job, cluster, group) group_left ()\nmax by (job, cluster, group) (outbox_consumer_deadline_seconds%s)", sel, sel),
			"2m",
			"A consumer group lags behind its deadline.",
			"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has not consumed a record of topic {{ $labels.topic }} that is {{ $value | humanizeDuration }} old, past the group's lag deadline.",
			nil))
	}
	return rules
}

// reconcileAlerts fire on gaps between the authority, the outbox and the
// target, and on reconcile jobs that stopped succeeding.
func (b *builder) reconcileAlerts() []Rule {
	if len(b.cfg.Reconcile) == 0 {
		return nil
	}
	rules := []Rule{
		b.alert("OutboxReconcileMissingOutbox", SeverityCritical,
			fmt.Sprintf("max by (job, reconcile) (outbox_reconcile_gaps%s) > 0", b.selector(eq("kind", "missing_outbox"))),
			"1m",
			"Committed rows have no outbox event: their events are lost.",
			"Reconcile job {{ $labels.reconcile }} found {{ $value }} committed authority rows with no outbox row for their key and version: the events were never written and no relay will ever publish them.",
			nil),
		b.alert("OutboxReconcileGaps", SeverityWarning,
			fmt.Sprintf("max by (job, reconcile, kind) (outbox_reconcile_gaps%s) > 0", b.selector(`kind!="missing_outbox"`)),
			"10m",
			"The target of a reconcile job disagrees with its authority.",
			"Reconcile job {{ $labels.reconcile }} found {{ $value }} gaps of kind {{ $labels.kind }} between the authority and the target.",
			nil),
	}
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Reconcile)) {
		r := b.cfg.Reconcile[name]
		every := ScheduleInterval(r.Schedule)
		limit := time.Duration(reconcileMissedRuns) * every
		rules = append(rules, b.alert("OutboxReconcileNotSucceeding", SeverityWarning,
			fmt.Sprintf("time() - max by (job, reconcile) (outbox_reconcile_last_success_timestamp_seconds%s) > %d",
				b.selector(eq("reconcile", name)), int64(limit/time.Second)),
			"5m",
			"A reconcile job has not succeeded for three scheduled runs.",
			fmt.Sprintf("Reconcile job {{ $labels.reconcile }} last succeeded {{ $value | humanizeDuration }} ago; it is scheduled %s, so %d runs in a row failed or never ran. Lost events go unnoticed meanwhile.",
				quoteSchedule(r.Schedule), reconcileMissedRuns),
			nil),
			// A job that ran but never succeeded since the exporter started
			// has no last success to measure from: its runs still show.
			b.alert("OutboxReconcileNotSucceeding", SeverityWarning,
				fmt.Sprintf("max by (job, reconcile) (outbox_reconcile_duration_seconds%s)\nunless on (job, reconcile)\nmax by (job, reconcile) (outbox_reconcile_last_success_timestamp_seconds%s)",
					b.selector(eq("reconcile", name)), b.selector(eq("reconcile", name))),
				model.Duration(limit).String(),
				"A reconcile job has not succeeded for three scheduled runs.",
				fmt.Sprintf("Reconcile job {{ $labels.reconcile }} has run (the last run took {{ $value | humanizeDuration }}) but has not succeeded since outbox_exporter started, for %d runs of its schedule (%s). Lost events go unnoticed meanwhile.",
					reconcileMissedRuns, quoteSchedule(r.Schedule)),
				nil))
	}
	return rules
}

// quoteSchedule renders a schedule for a description.
func quoteSchedule(s string) string {
	if strings.HasPrefix(s, "@every ") {
		return "every " + strings.TrimPrefix(s, "@every ")
	}
	return "at \"" + s + "\""
}

// ScheduleInterval returns the longest time between two runs of a cron
// schedule: the duration of "@every 5m", or the largest gap between the
// activations of a cron spec over 35 days from a fixed date (so that the
// result does not depend on when it is computed). A schedule that does not
// parse gives DefaultReconcileInterval.
func ScheduleInterval(spec string) time.Duration {
	if rest, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(rest)); err == nil && d > 0 {
			return d
		}
		return DefaultReconcileInterval
	}
	s, err := config.CronParser.Parse(spec)
	if err != nil {
		return DefaultReconcileInterval
	}
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	end := start.Add(35 * 24 * time.Hour)
	var longest time.Duration
	prev := s.Next(start)
	for i := 0; i < 100000 && !prev.IsZero() && prev.Before(end); i++ {
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		if gap := next.Sub(prev); gap > longest {
			longest = gap
		}
		prev = next
	}
	if longest <= 0 {
		return DefaultReconcileInterval
	}
	return longest
}

// auditAlerts fire when the audit of an outbox against its topics finds
// events lost on the way to the broker, or acknowledgements lost on the
// way back.
func (b *builder) auditAlerts() []Rule {
	if len(b.cfg.Audit) == 0 {
		return nil
	}
	return []Rule{
		b.alert("OutboxAuditSilentLoss", SeverityCritical,
			fmt.Sprintf("max by (job, outbox) (outbox_audit_missing_in_broker_events%s) > 0", b.selector()),
			"5m",
			"Events marked published never reached the broker.",
			"The audit of outbox {{ $labels.outbox }} found {{ $value }} sampled events marked published whose ids are not on the topics: they are lost and no relay will retry them.",
			nil),
		b.alert("OutboxAuditAcknowledgementLost", SeverityWarning,
			fmt.Sprintf("max by (job, outbox) (outbox_audit_unmarked_in_broker_events%s) > 0", b.selector()),
			"15m",
			"Events on the broker are still unpublished in the outbox.",
			"The audit of outbox {{ $labels.outbox }} found {{ $value }} sampled unpublished events whose ids are already on the topics: the broker's acknowledgement was lost and a retry will publish them again.",
			nil),
	}
}

// exporterAlerts fire when the exporter is gone, a collector fails or a
// config reload failed: each blinds the alerts above.
func (b *builder) exporterAlerts() []Rule {
	return []Rule{
		b.alert("OutboxExporterAbsent", SeverityCritical,
			fmt.Sprintf("absent(outbox_exporter_build_info%s)", b.selector()),
			"5m",
			"outbox_exporter has disappeared from Prometheus.",
			"No outbox_exporter matching "+b.describeSelector()+" has been scraped for 5 minutes: deadline, lag and loss alerts cannot fire.",
			nil),
		b.alert("OutboxCollectorFailing", SeverityWarning,
			fmt.Sprintf("outbox_exporter_collector_success%s == 0", b.selector()),
			"10m",
			"An outbox_exporter collector is failing.",
			"Collector {{ $labels.collector }} for target {{ $labels.target }} on {{ $labels.instance }} has failed every scrape for 10 minutes: its metrics are missing and the alerts on them cannot fire.",
			nil),
		b.alert("OutboxExporterConfigReloadFailed", SeverityWarning,
			fmt.Sprintf("outbox_exporter_config_last_reload_successful%s == 0", b.selector()),
			"10m",
			"outbox_exporter failed to reload its configuration.",
			"outbox_exporter on {{ $labels.instance }} could not load its changed configuration and still runs the previous one.",
			nil),
	}
}

// describeSelector renders the configured selector for a description.
func (b *builder) describeSelector() string {
	if b.sel == "" {
		return "any selector"
	}
	return "{" + strings.ReplaceAll(b.sel, `"`, "'") + "}"
}
