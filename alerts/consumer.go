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
		rules = append(rules, b.alert("OutboxConsumerLagAboveDeadline", b.lagExpr(vocab.ConsumerLagSeconds, sel), says{}, own),
			// A group without members consumes nothing: its lag grows only
			// as fast as new records come, so on a quiet topic the lag
			// alert comes late or never.
			b.alert("OutboxConsumerGroupEmpty", b.emptyExpr(sel), says{}, own),
			// Retention (or compaction) deleted records the group had not
			// consumed: those events are lost to it, and once it resumes
			// at the log start no lag metric remembers them: a consumer offline past the
			// broker's retention.
			b.alert("OutboxConsumerRetentionLoss", b.retentionExpr(sel), says{}, own))
		rules = append(rules, b.uncommittedAlerts(name, b.cfg.Kafka[name])...)
		if len(b.cfg.Kafka[name].ShareGroups) > 0 {
			// A share group's deadline is its group's, as a consumer
			// group's; its time lag is an upper bound (the age of the
			// record at the start offset the broker reports).
			rules = append(rules, b.alert("OutboxShareGroupLagAboveDeadline", b.lagExpr(vocab.ShareGroupLagSeconds, sel), says{}, own))
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
		return b.alert("OutboxConsumerUncommittedPartitions", b.uncommittedExpr(sel),
			says{forDur: model.Duration(d).String(), fill: []string{"wait", "longer than its lag deadline (" + model.Duration(d).String() + ")"}},
			// The deadline tells the rules of one cluster apart.
			map[string]string{vocab.LabelCluster: cluster, "deadline": model.Duration(d).String()})
	}
	rules := []Rule{rule(k.Deadline, "")}
	for _, d := range slices.Sorted(maps.Keys(byDeadline)) {
		rules = append(rules, rule(d, strings.Join(byDeadline[d], "|")))
	}
	return rules
}

// lagExpr is true where a group's time lag (metric: a consumer group's
// or a share group's) on a topic is past the group's lag deadline, each
// the largest over the replicas.
func (b *builder) lagExpr(metric, sel string) string {
	return fmt.Sprintf("max by (%s) (%s%s)\n> on (%s) group_left ()\nmax by (%s) ("+vocab.ConsumerDeadline+"%s)",
		b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), metric, sel, b.by(vocab.LabelCluster, vocab.LabelGroup), b.by(vocab.LabelCluster, vocab.LabelGroup), sel)
}

// emptyExpr is true for a group without members.
func (b *builder) emptyExpr(sel string) string {
	return fmt.Sprintf("max by (%s) ("+vocab.ConsumerGroupMembers+"%s) == 0", b.by(vocab.LabelCluster, vocab.LabelGroup), sel)
}

// retentionExpr is true where Kafka deleted records a group had not
// consumed.
func (b *builder) retentionExpr(sel string) string {
	return fmt.Sprintf("max by (%s) ("+vocab.ConsumerRetentionLost+"%s) > 0", b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel)
}

// uncommittedExpr is true where a group has partitions without a
// committed offset.
func (b *builder) uncommittedExpr(sel string) string {
	return fmt.Sprintf("max by (%s) ("+vocab.ConsumerUncommitted+"%s) > 0", b.by(vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic), sel)
}
