package alerts

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// consumerAlerts page when a consumer group lags behind its deadline or
// lost records to retention, and open a ticket when nobody consumes it. Each Kafka cluster has rules of
// its own, told apart by their cluster label.
func (b *builder) consumerAlerts() []Rule {
	var rules []Rule
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Kafka)) {
		sel := b.selector(eq(vocab.LabelCluster, name))
		own := map[string]string{vocab.LabelCluster: name}
		rules = append(rules, b.alert("OutboxConsumerLagAboveDeadline", SeverityCritical,
			fmt.Sprintf("max by (%s) ("+vocab.ConsumerLagSeconds+"%s)\n> on (%s) group_left ()\nmax by (%s) ("+vocab.ConsumerDeadline+"%s)",
				b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel, b.by(vocab.LabelCluster, vocab.LabelGroup), b.by(vocab.LabelCluster, vocab.LabelGroup), sel),
			"2m",
			"A consumer group lags behind its deadline.",
			"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has not consumed a record of topic {{ $labels.topic }} that is {{ $value | humanizeDuration }} old, past the group's lag deadline.",
			own),
			// A group without members consumes nothing: its lag grows only
			// as fast as new records come, so on a quiet topic the lag
			// alert comes late or never.
			b.alert("OutboxConsumerGroupEmpty", SeverityWarning,
				fmt.Sprintf("max by (%s) ("+vocab.ConsumerGroupMembers+"%s) == 0", b.by(vocab.LabelCluster, vocab.LabelGroup), sel),
				"10m",
				"A consumer group has no members.",
				"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had no members for 10 minutes: nobody consumes its topics, and new events pile up unseen until its lag passes the deadline.",
				own),
			// Retention (or compaction) deleted records the group had not
			// consumed: those events are lost to it, and once it resumes
			// at the log start no lag metric remembers them: a consumer offline past the
			// broker's retention.
			b.alert("OutboxConsumerRetentionLoss", SeverityCritical,
				fmt.Sprintf("max by (%s) ("+vocab.ConsumerRetentionLost+"%s) > 0", b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel),
				"1m",
				"Kafka deleted events a consumer group had not consumed.",
				"Kafka cluster {{ $labels.cluster }} deleted {{ $value }} records of topic {{ $labels.topic }} that consumer group {{ $labels.group }} had not consumed (its committed offset is below the log start): those events are lost to it.",
				own))
		rules = append(rules, b.uncommittedAlerts(name, b.cfg.Kafka[name])...)
		if len(b.cfg.Kafka[name].ShareGroups) > 0 {
			// A share group's deadline is its group's, as a consumer
			// group's; its time lag is an upper bound (the age of the
			// record at the start offset the broker reports).
			rules = append(rules, b.alert("OutboxShareGroupLagAboveDeadline", SeverityCritical,
				fmt.Sprintf("max by (%s) ("+vocab.ShareGroupLagSeconds+"%s)\n> on (%s) group_left ()\nmax by (%s) ("+vocab.ConsumerDeadline+"%s)",
					b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel, b.by(vocab.LabelCluster, vocab.LabelGroup), b.by(vocab.LabelCluster, vocab.LabelGroup), sel),
				"2m",
				"A share group lags behind its deadline.",
				"Share group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has a record of topic {{ $labels.topic }} at its start offset that is {{ $value | humanizeDuration }} old, past the group's lag deadline: it has not acknowledged it, or the broker has not moved the start offset past it.",
				own))
		}
	}
	return rules
}

// uncommittedAlerts warn when a group has had partitions without a
// committed offset (members for them, or partitions added after its
// commits) for longer than its deadline: their lag is unknown, and a
// consumer stuck at the start, or one that will skip their records with
// auto.offset.reset=latest, looks caught up. A for: cannot vary by series,
// so there is one rule per distinct deadline: the overridden groups by
// name, every other group under the default.
func (b *builder) uncommittedAlerts(cluster string, k *config.Kafka) []Rule {
	byDeadline := map[time.Duration][]string{}
	for _, g := range slices.Sorted(maps.Keys(k.Deadlines)) {
		if d := k.Deadlines[g]; d != k.Deadline {
			byDeadline[d] = append(byDeadline[d], regexp.QuoteMeta(g))
		}
	}
	var overridden []string
	for _, gs := range byDeadline {
		overridden = append(overridden, gs...)
	}
	slices.Sort(overridden)
	rule := func(d time.Duration, groups string) Rule {
		sel := b.selector(eq(vocab.LabelCluster, cluster))
		if groups != "" {
			sel = b.selector(eq(vocab.LabelCluster, cluster), vocab.LabelGroup+"=~"+quote(groups))
		} else if len(overridden) > 0 {
			sel = b.selector(eq(vocab.LabelCluster, cluster), vocab.LabelGroup+"!~"+quote(strings.Join(overridden, "|")))
		}
		return b.alert("OutboxConsumerUncommittedPartitions", SeverityWarning,
			fmt.Sprintf("max by (%s) ("+vocab.ConsumerUncommitted+"%s) > 0", b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel),
			model.Duration(d).String(),
			"A consumer group has partitions without a committed offset for longer than its deadline.",
			"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had {{ $value }} partitions of topic {{ $labels.topic }} without a committed offset for longer than its lag deadline: their lag is unknown, and the group may be stuck before its first commit or skip their records.",
			// The deadline tells the rules of one cluster apart.
			map[string]string{vocab.LabelCluster: cluster, "deadline": model.Duration(d).String()})
	}
	rules := []Rule{rule(k.Deadline, "")}
	for _, d := range slices.Sorted(maps.Keys(byDeadline)) {
		rules = append(rules, rule(d, strings.Join(byDeadline[d], "|")))
	}
	return rules
}
