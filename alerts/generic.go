package alerts

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// ReplicaLabels are the labels that tell two replicas of the exporter
// apart: the generic rules take the largest value over them, since every
// replica watches the same outboxes, groups and jobs.
const ReplicaLabels = "instance, pod"

// successLookback is how far back the generic OutboxReconcileNotSucceeding
// looks for a job's last success and for when it was first monitored. It
// is longer than the largest success limit (a weekly job's: 7d6h), since a
// range cannot be read from a series.
const successLookback = "8d"

// Generic returns the rules that serve any config: the same alerts as
// Build, with every threshold (deadlines, objectives, lag deadlines,
// reconcile intervals) read from the exporter's own series and no outbox,
// cluster, group or job named. The Helm chart and the kustomize manifests
// ship them, so they hold for whatever config a user gives. Of the config
// only the alerting section is read: the selector, the cluster label and
// the runbook's base.
func Generic(a config.Alerting) (File, error) {
	// The audit and CDC alerts read nothing of their sections but that
	// they are there: one nameless entry stands for every audit and slot.
	cfg := &config.Config{Alerting: a, Audit: map[string]*config.Audit{"": nil}, CDC: map[string]*config.CDC{"": nil}}
	b := &builder{cfg: cfg, sel: strings.TrimSpace(a.Selector), cluster: strings.TrimSpace(a.ClusterLabel)}
	f := File{Groups: []Group{
		{Name: "outbox-slo", Rules: append(b.genericSLORecords(), b.genericSLOAlerts()...)},
		{Name: "outbox.alerts", Rules: b.genericOutboxAlerts()},
		{Name: "outbox-consumer.alerts", Rules: b.genericConsumerAlerts()},
		{Name: "outbox-reconcile.alerts", Rules: b.genericReconcileAlerts()},
		{Name: "outbox-audit.alerts", Rules: b.genericAuditAlerts()},
		{Name: "outbox-cdc.alerts", Rules: b.genericCDCAlerts()},
		{Name: "outbox-order.alerts", Rules: b.genericOrderAlerts()},
		{Name: "outbox-exporter.alerts", Rules: b.genericExporterAlerts()},
	}}
	return f, b.err
}

// worst is the largest value of expr over the replicas.
func worst(expr string) string {
	return fmt.Sprintf("max without (%s) (%s)", ReplicaLabels, expr)
}

// genericSLORecords are the error ratios of every outbox. Each
// replica's counts are taken once: their largest over the replicas per
// label set, then added up per outbox.
func (b *builder) genericSLORecords() []Rule {
	by := b.by(vocab.LabelOutbox)
	rate := func(metric, w string) string {
		return fmt.Sprintf("sum by (%s) (%s)", by, worst(fmt.Sprintf("rate(%s%s[%s])", metric, b.selector(), w)))
	}
	rules := []Rule{
		{Record: PublishedRateRecord, Expr: rate(vocab.OutboxPublished, "5m")},
		{Record: LateRateRecord, Expr: rate(vocab.OutboxPublishedLate, "5m")},
	}
	for _, w := range SLOWindows {
		expr := rate(vocab.OutboxPublishedLate, w) + "\n/\n" + rate(vocab.OutboxPublished, w)
		if w == BudgetWindow {
			expr = fmt.Sprintf("sum_over_time(%s[%s])\n/\nsum_over_time(%s[%s])", LateRateRecord, w, PublishedRateRecord, w)
		}
		rules = append(rules, Rule{Record: ErrorRatioRecord(w), Expr: expr})
	}
	return rules
}

// genericSLOAlerts are the burn-rate alerts against each outbox's own
// objective, read from outbox_slo_objective.
func (b *builder) genericSLOAlerts() []Rule {
	by := b.by(vocab.LabelOutbox)
	budget := fmt.Sprintf("(1 - max by (%s) (%s%s))", by, vocab.SLOObjective, b.selector())
	var rules []Rule
	for _, c := range burns {
		f := strconv.FormatFloat(c.factor, 'f', -1, 64)
		expr := fmt.Sprintf("%[1]s > on (%[2]s) group_left () (%[3]s * %[4]s)\nand\n%[5]s > on (%[2]s) group_left () (%[3]s * %[4]s)\nand on (%[2]s)\nsum by (%[2]s) (%[6]s) >= %[7]d",
			ErrorRatioRecord(c.long), by, f, budget, ErrorRatioRecord(c.short),
			worst(fmt.Sprintf("increase("+vocab.OutboxPublishedLate+"%s[%s])", b.selector(), c.long)), MinLateEvents)
		rules = append(rules, b.alert("OutboxPublishDeadlineBudgetBurn", expr, c.says("its objective (outbox_slo_objective)"),
			map[string]string{"long": c.long, "short": c.short}))
	}
	return rules
}

// genericOutboxAlerts are the alerts on every outbox table. An alert on
// a feature an outbox lacks (leases, dead rows) has no series to fire on.
func (b *builder) genericOutboxAlerts() []Rule {
	noLabels := says{fill: []string{"labels", ""}}
	return []Rule{
		b.alert("OutboxNotificationDeadlineMissed",
			worst(fmt.Sprintf(vocab.OutboxOldestPendingAge+"%s > "+vocab.OutboxDeadline+"%s", b.selector(), b.selector())),
			noLabels, nil),
		b.alert("OutboxLeaseExpiriesSustained",
			fmt.Sprintf("max by (%s) (rate("+vocab.OutboxLeaseExpirations+"%s[10m])) * 60 > 0", b.by(vocab.LabelOutbox), b.selector()),
			says{}, nil),
		b.alert("OutboxUnknownResultEvents", worst(vocab.OutboxUnknownResult+b.selector())+" > 0", noLabels, nil),
		b.alert("OutboxDeadEvents", worst(vocab.OutboxEvents+b.selector(eq(vocab.LabelState, "dead")))+" > 0", noLabels, nil),
		// Which outbox reads which database is in the config only: here a
		// standby is judged against the shortest deadline of any outbox
		// its exporter watches; rules written by generate use the
		// outboxes of that database.
		b.alert("OutboxStandbyReplayLagEatsDeadline",
			fmt.Sprintf("max by (%s) (outbox_database_replay_lag_seconds%s)\n> on (%s) group_left ()\n0.5 * min by (%s) (outbox_deadline_seconds%s)",
				b.by("database"), b.selector(), b.by(), b.by(), b.selector()),
			says{fill: []string{"database", "{{ $labels.database }}", "outboxes", "the outboxes this exporter watches"}}, nil),
	}
}

// genericConsumerAlerts are the consumer-group alerts of every Kafka
// cluster, each group against its own lag deadline.
func (b *builder) genericConsumerAlerts() []Rule {
	sel := b.selector()
	wait := model.Duration(config.DefaultKafkaDeadline).String()
	return []Rule{
		b.alert("OutboxConsumerLagAboveDeadline",
			worst(fmt.Sprintf(vocab.ConsumerLagSeconds+"%s > ignoring (topic) group_left () "+vocab.ConsumerDeadline+"%s", sel, sel)),
			says{}, nil),
		b.alert("OutboxConsumerGroupEmpty", b.emptyExpr(sel), says{}, nil),
		b.alert("OutboxConsumerRetentionLoss", b.retentionExpr(sel), says{}, nil),
		// A for: cannot vary by series: here every group waits the
		// default lag deadline; rules written by generate wait each
		// group's own.
		b.alert("OutboxConsumerUncommittedPartitions", b.uncommittedExpr(sel),
			says{forDur: wait, fill: []string{"wait", wait + ", the default lag deadline"}}, nil),
		b.alert("OutboxShareGroupLagAboveDeadline",
			worst(fmt.Sprintf(vocab.ShareGroupLagSeconds+"%s > ignoring (topic) group_left () "+vocab.ConsumerDeadline+"%s", sel, sel)),
			says{}, nil),
	}
}

// runLimitExpr is RunLimit in PromQL: the job's interval, at least
// MinRunTime and at most MaxRunTime.
func (b *builder) runLimitExpr() string {
	return fmt.Sprintf("clamp(%s%s, %d, %d)", vocab.ReconcileInterval, b.selector(), int64(MinRunTime/time.Second), int64(MaxRunTime/time.Second))
}

// genericReconcileAlerts are the reconcile alerts of every job, its
// limits worked out from its interval as RunLimit and SuccessLimit do.
func (b *builder) genericReconcileAlerts() []Rule {
	by, sel := b.by(vocab.LabelReconcile), b.selector()
	success := fmt.Sprintf("max by (%[1]s) (%[2]s%[3]s + %[4]s)", by, vocab.ReconcileInterval, sel, b.runLimitExpr())
	// As in Build, the last success is taken over a lookback so that a
	// restart does not hide it; a job first monitored longer than its
	// limit ago with no success in the lookback has gone that long
	// without one.
	notSucceeding := fmt.Sprintf("time() - max by (%[1]s) (max_over_time("+vocab.ReconcileLastSuccess+"%[2]s[%[3]s]))\n> on (%[1]s)\n%[4]s\nor\n"+
		"(time() - min by (%[1]s) (min_over_time(timestamp(%[5]s%[2]s)[%[3]s:1m])))\n> on (%[1]s)\n%[4]s\nunless on (%[1]s)\nmax by (%[1]s) (present_over_time("+vocab.ReconcileLastSuccess+"%[2]s[%[3]s]))",
		by, sel, successLookback, success, vocab.ReconcileInterval)
	return append(b.reconcileGapAlerts(),
		b.alert("OutboxReconcileNotSucceeding", notSucceeding,
			says{fill: []string{"limit", "its schedule's interval and a run's time (outbox_reconcile_interval_seconds)"}}, nil),
		b.alert("OutboxReconcileRunTooLong",
			fmt.Sprintf("max by (%[1]s) ("+vocab.ReconcileRunning+"%[2]s)\n> on (%[1]s)\nmax by (%[1]s) (%[3]s)", by, sel, b.runLimitExpr()),
			says{fill: []string{"limit", fmt.Sprintf("a run of its schedule may take (its interval, at least %s and at most %s)", model.Duration(MinRunTime), model.Duration(MaxRunTime))}}, nil))
}

// genericAuditAlerts are the audit alerts of every outbox audited.
func (b *builder) genericAuditAlerts() []Rule { return b.auditAlerts() }

// genericCDCAlerts are the change data capture alerts of every slot.
func (b *builder) genericCDCAlerts() []Rule { return b.cdcAlerts() }

// genericOrderAlerts are the order and receipt alerts of every outbox and
// audit: a ticket at once, a page when it lasts.
func (b *builder) genericOrderAlerts() []Rule {
	noLabels := []string{"labels", ""}
	var rules []Rule
	rules = append(rules, b.ticketThenPage("OutboxOutOfOrderEvents", worst(vocab.OutboxOutOfOrder+b.selector())+" > 0", noLabels, nil)...)
	rules = append(rules, b.ticketThenPage("OutboxPublishedWithoutReceipt",
		worst(fmt.Sprintf("increase("+vocab.OutboxPublishedNoReceipt+"%s[10m])", b.selector()))+" > 0", noLabels, nil)...)
	return append(rules, b.ticketThenPage("OutboxAuditOrderInversions",
		fmt.Sprintf("max by (%s) (increase("+vocab.AuditOrderInversions+"%s[10m])) > 0", b.by(vocab.LabelOutbox), b.selector()), nil, nil)...)
}

// genericExporterAlerts are the exporter's own alerts. Without a
// selector, "up == 0" would take in every target of the Prometheus: a
// down target is one that was an outbox_exporter in the last day.
func (b *builder) genericExporterAlerts() []Rule {
	rules := append(b.exporterAlerts(),
		// A cdc entry's lease gates no work, so only reconcile jobs and
		// audits are judged; every task waits LeaderlessMin here, a job's
		// run limit in the rules written by generate.
		b.alert("OutboxTaskLeaderless",
			fmt.Sprintf("max by (%s) (outbox_exporter_leader%s) == 0", b.by("task"), b.selector(`task!~"cdc/.*"`)),
			says{forDur: model.Duration(LeaderlessMin).String(), fill: []string{"wait", model.Duration(LeaderlessMin).String(),
				"work", "its work (reconcile runs, the audit's reading of the topics) is done by no one, so lost events go unnoticed"}},
			nil))
	if b.sel == "" {
		for i := range rules {
			if rules[i].Alert == "OutboxExporterTargetDown" {
				rules[i].Expr = "up == 0\nand on (job, instance)\nmax_over_time(" + vocab.ExporterBuildInfo + "[1d])"
			}
		}
	}
	return rules
}
