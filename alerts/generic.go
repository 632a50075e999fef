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
		days := strconv.FormatFloat(float64(int(300/c.factor+0.5))/10, 'f', -1, 64)
		expr := fmt.Sprintf("%[1]s > on (%[2]s) group_left () (%[3]s * %[4]s)\nand\n%[5]s > on (%[2]s) group_left () (%[3]s * %[4]s)\nand on (%[2]s)\nsum by (%[2]s) (%[6]s) >= %[7]d",
			ErrorRatioRecord(c.long), by, f, budget, ErrorRatioRecord(c.short),
			worst(fmt.Sprintf("increase("+vocab.OutboxPublishedLate+"%s[%s])", b.selector(), c.long)), MinLateEvents)
		summary := "Events are published late fast enough to spend the error budget within days."
		if c.severity == SeverityWarning {
			summary = "Events are published late fast enough to spend the error budget this month."
		}
		rules = append(rules, b.alert("OutboxPublishDeadlineBudgetBurn", c.severity, expr, c.forDur, summary,
			fmt.Sprintf("{{ $value | humanizePercentage }} of the events of outbox {{ $labels.outbox }} were published after their deadline over the last %s (and the last %s), more than its objective (outbox_slo_objective) allows. At this rate the 30-day error budget is gone in %s days.",
				c.long, c.short, days),
			map[string]string{"long": c.long, "short": c.short}))
	}
	return rules
}

// genericOutboxAlerts are the alerts on every outbox table. An alert on
// a feature an outbox lacks (leases, dead rows) has no series to fire on.
func (b *builder) genericOutboxAlerts() []Rule {
	return []Rule{
		b.alert("OutboxNotificationDeadlineMissed", SeverityCritical,
			worst(fmt.Sprintf(vocab.OutboxOldestPendingAge+"%s > "+vocab.OutboxDeadline+"%s", b.selector(), b.selector())),
			"1m",
			"An outbox event is older than its notification deadline.",
			"The oldest unpublished event of outbox {{ $labels.outbox }} is {{ $value | humanizeDuration }} old, past its notification deadline.",
			nil),
		b.alert("OutboxLeaseExpiriesSustained", SeverityWarning,
			fmt.Sprintf("max by (%s) (rate("+vocab.OutboxLeaseExpirations+"%s[10m])) * 60 > 0", b.by(vocab.LabelOutbox), b.selector()),
			"15m",
			"Relay leases keep expiring.",
			"Leases on rows of outbox {{ $labels.outbox }} have expired for 15 minutes without pause ({{ $value | humanize }} per minute): relays die, hang or overrun their lease while publishing.",
			nil),
		b.alert("OutboxUnknownResultEvents", SeverityWarning,
			worst(vocab.OutboxUnknownResult+b.selector())+" > 0",
			"15m",
			"Outbox events have an unknown publish result.",
			"Outbox {{ $labels.outbox }} has {{ $value }} events whose publish result is unknown: the broker may hold them, so their retry may duplicate them.",
			nil),
		b.alert("OutboxDeadEvents", SeverityWarning,
			worst(vocab.OutboxEvents+b.selector(eq(vocab.LabelState, "dead")))+" > 0",
			"5m",
			"Outbox events were abandoned.",
			"Outbox {{ $labels.outbox }} holds {{ $value }} dead events: relays gave up on them and they will never be published unless someone replays them.",
			nil),
		// Which outbox reads which database is in the config only: here a
		// standby is judged against the shortest deadline of any outbox
		// its exporter watches; rules written by generate use the
		// outboxes of that database.
		b.alert("OutboxStandbyReplayLagEatsDeadline", SeverityWarning,
			fmt.Sprintf("max by (%s) (outbox_database_replay_lag_seconds%s)\n> on (%s) group_left ()\n0.5 * min by (%s) (outbox_deadline_seconds%s)",
				b.by("database"), b.selector(), b.by(), b.by(), b.selector()),
			"2m",
			"A standby the exporter reads outboxes from lags behind by more than half a deadline.",
			"Database {{ $labels.database }} is a standby whose replay is {{ $value | humanizeDuration }} behind the primary: more than half the shortest deadline of the outboxes this exporter watches. The ages and counts read there are that old; a missed deadline pages late.",
			nil),
	}
}

// genericConsumerAlerts are the consumer-group alerts of every Kafka
// cluster, each group against its own lag deadline.
func (b *builder) genericConsumerAlerts() []Rule {
	sel := b.selector()
	return []Rule{
		b.alert("OutboxConsumerLagAboveDeadline", SeverityCritical,
			worst(fmt.Sprintf(vocab.ConsumerLagSeconds+"%s > ignoring (topic) group_left () "+vocab.ConsumerDeadline+"%s", sel, sel)),
			"2m",
			"A consumer group lags behind its deadline.",
			"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has not consumed a record of topic {{ $labels.topic }} that is {{ $value | humanizeDuration }} old, past the group's lag deadline.",
			nil),
		b.alert("OutboxConsumerGroupEmpty", SeverityWarning,
			fmt.Sprintf("max by (%s) ("+vocab.ConsumerGroupMembers+"%s) == 0", b.by(vocab.LabelCluster, vocab.LabelGroup), sel),
			"10m",
			"A consumer group has no members.",
			"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had no members for 10 minutes: nobody consumes its topics, and new events pile up unseen until its lag passes the deadline.",
			nil),
		b.alert("OutboxConsumerRetentionLoss", SeverityCritical,
			fmt.Sprintf("max by (%s) ("+vocab.ConsumerRetentionLost+"%s) > 0", b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel),
			"1m",
			"Kafka deleted events a consumer group had not consumed.",
			"Kafka cluster {{ $labels.cluster }} deleted {{ $value }} records of topic {{ $labels.topic }} that consumer group {{ $labels.group }} had not consumed (its committed offset is below the log start): those events are lost to it.",
			nil),
		// A for: cannot vary by series: here every group waits the
		// default lag deadline; rules written by generate wait each
		// group's own.
		b.alert("OutboxConsumerUncommittedPartitions", SeverityWarning,
			fmt.Sprintf("max by (%s) (outbox_consumer_uncommitted_partitions%s) > 0", b.by("cluster", "group", "topic"), sel),
			model.Duration(config.DefaultKafkaDeadline).String(),
			"A consumer group has partitions without a committed offset.",
			fmt.Sprintf("Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had {{ $value }} partitions of topic {{ $labels.topic }} without a committed offset for %s: their lag is unknown, and the group may be stuck before its first commit or skip their records.", model.Duration(config.DefaultKafkaDeadline)),
			nil),
		b.alert("OutboxShareGroupLagAboveDeadline", SeverityCritical,
			worst(fmt.Sprintf("outbox_share_group_lag_seconds%s > ignoring (topic) group_left () outbox_consumer_deadline_seconds%s", sel, sel)),
			"2m",
			"A share group lags behind its deadline.",
			"Share group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has a record of topic {{ $labels.topic }} at its start offset that is {{ $value | humanizeDuration }} old, past the group's lag deadline: it has not acknowledged it, or the broker has not moved the start offset past it.",
			nil),
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
		b.alert("OutboxReconcileNotSucceeding", SeverityWarning, notSucceeding, "5m",
			"A reconcile job has not succeeded since its last scheduled run should have ended.",
			"Reconcile job {{ $labels.reconcile }} has not succeeded for {{ $value | humanizeDuration }}, longer than its schedule's interval and a run's time (outbox_reconcile_interval_seconds): the run that should have ended by now failed, never ran or never ended. Lost events go unnoticed meanwhile.",
			nil),
		b.alert("OutboxReconcileRunTooLong", SeverityWarning,
			fmt.Sprintf("max by (%[1]s) ("+vocab.ReconcileRunning+"%[2]s)\n> on (%[1]s)\nmax by (%[1]s) (%[3]s)", by, sel, b.runLimitExpr()),
			"5m",
			"A reconcile run has been running longer than its schedule allows.",
			"The run of reconcile job {{ $labels.reconcile }} in progress has been running for {{ $value | humanizeDuration }}, longer than a run of its schedule may take (its interval, at least 5m and at most 6h): it is stuck (a held lock, a slow target) and no run of the job ends meanwhile, the first one included.",
			nil))
}

// genericAuditAlerts are the audit alerts of every outbox audited.
func (b *builder) genericAuditAlerts() []Rule { return b.auditAlerts() }

// genericCDCAlerts are the change data capture alerts of every slot.
func (b *builder) genericCDCAlerts() []Rule { return b.cdcAlerts() }

// genericOrderAlerts are the order and receipt alerts of every outbox and
// audit: a ticket at once, a page when it lasts.
func (b *builder) genericOrderAlerts() []Rule {
	pair := func(name, ticketFor, expr, summary, desc, lasted string) []Rule {
		return []Rule{
			b.alert(name, SeverityWarning, expr, ticketFor, summary, desc, nil),
			b.alert(name, SeverityCritical, expr, orderSustained, summary, desc+lasted, nil),
		}
	}
	var rules []Rule
	rules = append(rules, pair("OutboxOutOfOrderEvents", "5m",
		worst(vocab.OutboxOutOfOrder+b.selector())+" > 0",
		"Outbox events were overtaken by a later event of their aggregate.",
		"Outbox {{ $labels.outbox }} holds {{ $value }} unpublished events whose aggregate already has a later event published: consumers got the successor first.",
		" It has lasted 30 minutes.")...)
	rules = append(rules, pair("OutboxPublishedWithoutReceipt", "1m",
		worst(fmt.Sprintf("increase("+vocab.OutboxPublishedNoReceipt+"%s[10m])", b.selector()))+" > 0",
		"Outbox events were marked published without a receipt.",
		"{{ $value | humanize }} events of outbox {{ $labels.outbox }} were marked published in the last 10 minutes without the downstream's receipt: nothing shows the downstream got them.",
		" It has gone on for 30 minutes.")...)
	return append(rules, pair("OutboxAuditOrderInversions", "1m",
		fmt.Sprintf("max by (%s) (increase("+vocab.AuditOrderInversions+"%s[10m])) > 0", b.by(vocab.LabelOutbox), b.selector()),
		"Consumers received events of an aggregate out of order.",
		"The audit of outbox {{ $labels.outbox }} saw {{ $value | humanize }} records in the last 10 minutes arrive on their partition after a later record of their aggregate: consumers applied them out of order.",
		" It has gone on for 30 minutes.")...)
}

// genericExporterAlerts are the exporter's own alerts. Without a
// selector, "up == 0" would take in every target of the Prometheus: a
// down target is one that was an outbox_exporter in the last day.
func (b *builder) genericExporterAlerts() []Rule {
	rules := append(b.exporterAlerts(),
		// A cdc entry's lease gates no work, so only reconcile jobs and
		// audits are judged; every task waits LeaderlessMin here, a job's
		// run limit in the rules written by generate.
		b.alert("OutboxTaskLeaderless", SeverityWarning,
			fmt.Sprintf("max by (%s) (outbox_exporter_leader%s) == 0", b.by("task"), b.selector(`task!~"cdc/.*"`)),
			model.Duration(LeaderlessMin).String(),
			"No outbox_exporter replica leads a task that must run once.",
			fmt.Sprintf("No replica has led {{ $labels.task }} for %s: its work (reconcile runs, the audit's reading of the topics) is done by no one, so lost events go unnoticed. Every replica stands by: none can take the task's lease on the leader_election database, or they disagree on the configuration.", model.Duration(LeaderlessMin)),
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
