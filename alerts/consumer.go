package alerts

import (
	"fmt"
	"maps"
	"slices"
)

// consumerAlerts page when a consumer group lags behind its deadline or
// lost records to retention, and open a ticket when nobody consumes it. Each Kafka cluster has rules of
// its own, told apart by their cluster label.
func (b *builder) consumerAlerts() []Rule {
	var rules []Rule
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Kafka)) {
		sel := b.selector(eq("cluster", name))
		own := map[string]string{"cluster": name}
		rules = append(rules, b.alert("OutboxConsumerLagAboveDeadline", SeverityCritical,
			fmt.Sprintf("max by (%s) (outbox_consumer_lag_seconds%s)\n> on (%s) group_left ()\nmax by (%s) (outbox_consumer_deadline_seconds%s)",
				b.by("cluster", "group", "topic"), sel, b.by("cluster", "group"), b.by("cluster", "group"), sel),
			"2m",
			"A consumer group lags behind its deadline.",
			"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has not consumed a record of topic {{ $labels.topic }} that is {{ $value | humanizeDuration }} old, past the group's lag deadline.",
			own),
			// A group without members consumes nothing: its lag grows only
			// as fast as new records come, so on a quiet topic the lag
			// alert comes late or never.
			b.alert("OutboxConsumerGroupEmpty", SeverityWarning,
				fmt.Sprintf("max by (%s) (outbox_consumer_group_members%s) == 0", b.by("cluster", "group"), sel),
				"10m",
				"A consumer group has no members.",
				"Consumer group {{ $labels.group }} on Kafka cluster {{ $labels.cluster }} has had no members for 10 minutes: nobody consumes its topics, and new events pile up unseen until its lag passes the deadline.",
				own),
			// Retention (or compaction) deleted records the group had not
			// consumed: those events are lost to it, and once it resumes
			// at the log start no lag metric remembers them: a consumer offline past the
			// broker's retention.
			b.alert("OutboxConsumerRetentionLoss", SeverityCritical,
				fmt.Sprintf("max by (%s) (outbox_consumer_retention_lost_messages%s) > 0", b.by("cluster", "group", "topic"), sel),
				"1m",
				"Kafka deleted events a consumer group had not consumed.",
				"Kafka cluster {{ $labels.cluster }} deleted {{ $value }} records of topic {{ $labels.topic }} that consumer group {{ $labels.group }} had not consumed (its committed offset is below the log start): those events are lost to it.",
				own))
	}
	return rules
}
