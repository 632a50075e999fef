package alerts

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// alertText is what an alert says at one severity, wherever its rule
// comes from: the rules Build writes for one config and the ones Generic
// writes for any config take it from here, so the two cannot drift apart.
// A description names the facts only its rule knows as slots, [[name]],
// that the rule fills (the outbox's labels, a schedule, a deadline); a
// for: left empty is the rule's to give (it varies by group or job).
type alertText struct {
	severity    string
	forDur      string
	summary     string
	description string
}

// slot matches a slot of a description: [[name]].
var slot = regexp.MustCompile(`\[\[(\w+)\]\]`)

// one is an alert with a single severity.
func one(severity, forDur, summary, description string) []alertText {
	return []alertText{{severity, forDur, summary, description}}
}

// escalating is an alert that opens a ticket once its condition has
// held for ticketFor and pages once it has held for orderSustained, its
// description then ending in lasted.
func escalating(ticketFor, summary, description, lasted string) []alertText {
	return []alertText{
		{SeverityWarning, ticketFor, summary, description},
		{SeverityCritical, orderSustained, summary, description + lasted},
	}
}

// burnDescription is the description of every burn-rate rule: the
// windows, the objective (a number, or the series it is read from) and
// how soon the budget is gone.
const burnDescription = "{{ $value | humanizePercentage }} of the events of outbox {{ $labels.outbox }} were published after their deadline over the last [[long]] (and the last [[short]]), more than [[objective]] allows. At this rate the 30-day error budget is gone in [[days]] days."

// alertTexts holds every alert's texts, by name and severity.
var alertTexts = map[string][]alertText{
	"OutboxPublishDeadlineBudgetBurn": {
		// The for: of each burn condition is in burns.
		{SeverityCritical, "", "Events are published late fast enough to spend the error budget within days.", burnDescription},
		{SeverityWarning, "", "Events are published late fast enough to spend the error budget this month.", burnDescription},
	},
	"OutboxNotificationDeadlineMissed": one(SeverityCritical, "1m",
		"An outbox event is older than its notification deadline.",
		"The oldest unpublished event of outbox {{ $labels.outbox }}[[labels]] is {{ $value | humanizeDuration }} old, past its notification deadline."),
	"OutboxLeaseExpiriesSustained": one(SeverityWarning, "15m",
		"Relay leases keep expiring.",
		"Leases on rows of outbox {{ $labels.outbox }} have expired for 15 minutes without pause ({{ $value | humanize }} per minute): relays die, hang or overrun their lease while publishing."),
	"OutboxUnknownResultEvents": one(SeverityWarning, "15m",
		"Outbox events have an unknown publish result.",
		"Outbox {{ $labels.outbox }}[[labels]] has {{ $value }} events whose publish result is unknown: the broker may hold them, so their retry may duplicate them."),
	"OutboxDeadEvents": one(SeverityWarning, "5m",
		"Outbox events were abandoned.",
		"Outbox {{ $labels.outbox }}[[labels]] holds {{ $value }} dead events: relays gave up on them and they will never be published unless someone replays them."),
	"OutboxStandbyReplayLagEatsDeadline": one(SeverityWarning, "2m",
		"A standby the exporter reads outboxes from lags behind by more than half a deadline.",
		"Database [[database]] is a standby whose replay is {{ $value | humanizeDuration }} behind the primary: more than half the shortest deadline of [[outboxes]]. The ages and counts read there are that old; a missed deadline pages late."),

	"OutboxConsumerLagAboveDeadline": one(SeverityCritical, "2m",
		"A consumer group lags behind its deadline.",
		"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has not consumed a record of topic {{ $labels.topic }} that is {{ $value | humanizeDuration }} old, past the group's lag deadline."),
	"OutboxConsumerGroupEmpty": one(SeverityWarning, "10m",
		"A consumer group has no members.",
		"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had no members for 10 minutes: nobody consumes its topics, and new events pile up unseen until its lag passes the deadline."),
	"OutboxConsumerRetentionLoss": one(SeverityCritical, "1m",
		"Kafka deleted events a consumer group had not consumed.",
		"Kafka cluster {{ $labels.cluster }} deleted {{ $value }} records of topic {{ $labels.topic }} that consumer group {{ $labels.group }} had not consumed (its committed offset is below the log start): those events are lost to it."),
	// The for: is the group's lag deadline.
	"OutboxConsumerUncommittedPartitions": one(SeverityWarning, "",
		"A consumer group has partitions without a committed offset.",
		"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had {{ $value }} partitions of topic {{ $labels.topic }} without a committed offset for [[wait]]: their lag is unknown, and the group may be stuck before its first commit or skip their records."),
	"OutboxShareGroupLagAboveDeadline": one(SeverityCritical, "2m",
		"A share group lags behind its deadline.",
		"Share group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has a record of topic {{ $labels.topic }} at its start offset that is {{ $value | humanizeDuration }} old, past the group's lag deadline: it has not acknowledged it, or the broker has not moved the start offset past it."),

	"OutboxReconcileMissingOutbox": one(SeverityCritical, "1m",
		"Committed rows have no outbox event: their events are lost.",
		"Reconcile job {{ $labels.reconcile }} found {{ $value }} committed authority rows with no outbox row for their key and version: the events were never written and no relay will ever publish them."),
	"OutboxReconcileGaps": one(SeverityWarning, "10m",
		"The target of a reconcile job disagrees with its authority.",
		"Reconcile job {{ $labels.reconcile }} found {{ $value }} gaps of kind {{ $labels.kind }} between the authority and the target."),
	"OutboxReconcileNotSucceeding": one(SeverityWarning, "5m",
		"A reconcile job has not succeeded since its last scheduled run should have ended.",
		"Reconcile job {{ $labels.reconcile }} has not succeeded for {{ $value | humanizeDuration }}, longer than [[limit]]: the run that should have ended by now failed, never ran or never ended. Lost events go unnoticed meanwhile."),
	"OutboxReconcileRunTooLong": one(SeverityWarning, "5m",
		"A reconcile run has been running longer than its schedule allows.",
		"The run of reconcile job {{ $labels.reconcile }} in progress has been running for {{ $value | humanizeDuration }}, longer than [[limit]]: it is stuck (a held lock, a slow target) and no run of the job ends meanwhile, the first one included."),

	"OutboxAuditSilentLoss": one(findingSeverity(vocab.AuditMissingInBroker, ""), "5m",
		"Events marked published never reached the broker.",
		"The audit of outbox {{ $labels.outbox }} found {{ $value }} sampled events marked published whose ids are not on the topics: they are lost and no relay will retry them."),
	"OutboxAuditAcknowledgementLost": one(findingSeverity(vocab.AuditUnmarkedInBroker, ""), "15m",
		"Events on the broker are still unpublished in the outbox.",
		"The audit of outbox {{ $labels.outbox }} found {{ $value }} sampled unpublished events whose ids are already on the topics: the broker's acknowledgement was lost and a retry will publish them again."),

	"OutboxCDCSlotLagAboveDeadline": one(SeverityCritical, "1m",
		"Change data capture is behind its deadline.",
		"The connector on the slot of cdc {{ $labels.cdc }} has not confirmed changes from {{ $value | humanizeDuration }} ago, past its deadline: outbox events written since are not on the broker yet."),
	"OutboxCDCSlotInactive": one(SeverityWarning, "5m",
		"No connector streams from a change data capture slot.",
		"Nothing has held the replication slot of cdc {{ $labels.cdc }} for 5 minutes: the connector is down or disconnected, outbox events are not published, and the slot keeps WAL on the database's disk."),
	"OutboxCDCSlotMissing": one(SeverityCritical, "1m",
		"A change data capture slot is gone.",
		"The replication slot of cdc {{ $labels.cdc }} does not exist on its database (or is not a logical slot): nothing confirms the outbox's events, a connector that comes back creates a new slot from the current position, and the events written meanwhile are not streamed."),
	"OutboxCDCSlotWALUnreserved": one(SeverityWarning, "1m",
		"A change data capture slot is about to lose its WAL.",
		"The slot of cdc {{ $labels.cdc }} has wal_status unreserved ({{ $value }}): it is past max_slot_wal_keep_size, so the next checkpoint may remove WAL it still needs, and then the connector can never resume."),
	"OutboxCDCSlotWALLost": one(SeverityCritical, "1m",
		"A change data capture slot lost its WAL: events are lost.",
		"The slot of cdc {{ $labels.cdc }} has wal_status lost ({{ $value }}): the WAL it needed was removed, the connector can never resume from it, and the outbox events in that WAL never reach the broker."),

	"OutboxOutOfOrderEvents": escalating("5m",
		"Outbox events were overtaken by a later event of their aggregate.",
		"Outbox {{ $labels.outbox }}[[labels]] holds {{ $value }} unpublished events whose aggregate already has a later event published: consumers got the successor first.",
		" It has lasted 30 minutes."),
	"OutboxPublishedWithoutReceipt": escalating("1m",
		"Outbox events were marked published without a receipt.",
		"{{ $value | humanize }} events of outbox {{ $labels.outbox }}[[labels]] were marked published in the last 10 minutes without the downstream's receipt: nothing shows the downstream got them.",
		" It has gone on for 30 minutes."),
	"OutboxAuditOrderInversions": escalating("1m",
		"Consumers received events of an aggregate out of order.",
		"The audit of outbox {{ $labels.outbox }} saw {{ $value | humanize }} records in the last 10 minutes arrive on their partition after a later record of their aggregate: consumers applied them out of order.",
		" It has gone on for 30 minutes."),

	"OutboxExporterAbsent": one(SeverityCritical, "5m",
		"outbox_exporter has disappeared from Prometheus.",
		"No outbox_exporter matching [[selector]][[cluster]] has been scraped for 5 minutes: deadline, lag and loss alerts cannot fire."),
	"OutboxExporterTargetDown": one(SeverityWarning, "10m",
		"An outbox_exporter replica cannot be scraped.",
		"Prometheus has failed to scrape outbox_exporter on {{ $labels.instance }}[[cluster]] for 10 minutes: one replica fewer watches the outboxes, and the alerts go blind if the others fail too."),
	"OutboxCollectorFailing": one(SeverityWarning, "5m",
		"An outbox_exporter collector is failing.",
		"Collector {{ $labels.collector }} for target {{ $labels.target }} on {{ $labels.instance }} failed {{ $value | humanizePercentage }} of its collections over the last "+CollectorWindow+": its metrics come and go and the alerts on them may not fire."),
	"OutboxCollectorFailingEverywhere": one(SeverityCritical, "5m",
		"An outbox_exporter collector fails on every replica.",
		"Collector {{ $labels.collector }} for target {{ $labels.target }}[[cluster]] failed at least {{ $value | humanizePercentage }} of its collections over the last "+CollectorWindow+" on every replica: the alerts on its metrics (deadlines, lag, loss) cannot fire."),
	"OutboxExporterConfigReloadFailed": one(SeverityWarning, "10m",
		"outbox_exporter failed to reload its configuration.",
		"outbox_exporter on {{ $labels.instance }} could not load its changed configuration and still runs the previous one."),
	// The for: is what the task's schedule allows.
	"OutboxTaskLeaderless": one(SeverityWarning, "",
		"No outbox_exporter replica leads a task that must run once.",
		"No replica has led {{ $labels.task }} for [[wait]]: [[work]]. Every replica stands by: none can take the task's lease on the leader_election database, or they disagree on the configuration."),
}

// textOf returns the text of alert name at severity ("" for its only
// one).
func textOf(name, severity string) (alertText, error) {
	texts, ok := alertTexts[name]
	if !ok {
		return alertText{}, fmt.Errorf("alert %s has no text", name)
	}
	if severity == "" && len(texts) == 1 {
		return texts[0], nil
	}
	for _, tx := range texts {
		if tx.severity == severity {
			return tx, nil
		}
	}
	return alertText{}, fmt.Errorf("alert %s has no text at severity %q", name, severity)
}

// filled returns description with its slots filled from fill (slot,
// value, slot, value...): every slot must be filled and every value
// given must have a slot.
func filled(name, description string, fill []string) (string, error) {
	if len(fill)%2 != 0 {
		return "", fmt.Errorf("alert %s: slots and values do not pair up", name)
	}
	want := map[string]bool{}
	for _, m := range slot.FindAllStringSubmatch(description, -1) {
		want[m[1]] = true
	}
	var pairs []string
	for i := 0; i < len(fill); i += 2 {
		if !want[fill[i]] {
			return "", fmt.Errorf("alert %s: its description has no slot %s", name, fill[i])
		}
		delete(want, fill[i])
		pairs = append(pairs, "[["+fill[i]+"]]", fill[i+1])
	}
	for s := range want {
		return "", fmt.Errorf("alert %s: slot %s of its description is not filled", name, s)
	}
	return strings.NewReplacer(pairs...).Replace(description), nil
}

// says is how a rule fills its alert's text: the severity (for an alert
// with two), the for: (where the text leaves it to the rule) and the
// values of the description's slots, slot then value.
type says struct {
	severity, forDur string
	fill             []string
}

// alert builds the alerting rule name on expr with the conventional
// labels and annotations, its texts from alertTexts. A text that is not
// there, a slot left open or a for: given twice is an error of Build or
// Generic.
func (b *builder) alert(name, expr string, s says, extraLabels map[string]string) Rule {
	tx, err := textOf(name, s.severity)
	if err == nil && (tx.forDur == "") == (s.forDur == "") {
		err = fmt.Errorf("alert %s: its for: must come from its text or its rule, once", name)
	}
	desc := ""
	if err == nil {
		desc, err = filled(name, tx.description, s.fill)
	}
	if err != nil {
		if b.err == nil {
			b.err = fmt.Errorf("build rules: %w", err)
		}
		return Rule{Alert: name, Expr: expr}
	}
	labels := map[string]string{"severity": tx.severity}
	for k, v := range extraLabels {
		labels[k] = v
	}
	return Rule{
		Alert:  name,
		Expr:   expr,
		For:    tx.forDur + s.forDur,
		Labels: labels,
		Annotations: map[string]string{
			"summary":     tx.summary,
			"description": desc,
			"runbook_url": b.runbook(name),
		},
	}
}
