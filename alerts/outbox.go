package alerts

import (
	"fmt"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// outboxAlerts are the alerts on each outbox table: the notification
// deadline, leases, unknown results and dead rows.
func (b *builder) outboxAlerts() []Rule {
	return b.perOutbox(func(s outboxScope) []Rule {
		name, o, by, sel, lt := s.name, s.o, s.by, s.sel, s.lt
		var rules []Rule
		// The outbox label tells apart the rules of two outboxes, which
		// share a name (promtool's duplicate-rule lint).
		own := map[string]string{"outbox": name}

		labels := says{fill: []string{"labels", lt}}
		rules = append(rules, b.alert("OutboxNotificationDeadlineMissed",
			fmt.Sprintf("max by (%[1]s) (%[3]s%[2]s)\n> on (%[1]s)\nmax by (%[1]s) (%[4]s%[2]s)", by, sel, vocab.OutboxOldestPendingAge, vocab.OutboxDeadline),
			labels, own))

		rules = append(rules, b.standbyLag(s))

		if hasLease(o) {
			rules = append(rules, b.alert("OutboxLeaseExpiriesSustained",
				fmt.Sprintf("max by (%s) (rate(%s%s[10m])) * 60 > 0", b.by(vocab.LabelOutbox), vocab.OutboxLeaseExpirations, sel),
				says{}, own))
		}
		if hasUnknown(o) {
			rules = append(rules, b.alert("OutboxUnknownResultEvents",
				fmt.Sprintf("max by (%s) (%s%s) > 0", by, vocab.OutboxUnknownResult, sel),
				labels, own))
		}
		if hasDead(o) {
			rules = append(rules, b.alert("OutboxDeadEvents",
				fmt.Sprintf("max by (%s) (%s%s) > 0", by, vocab.OutboxEvents, b.selector(eq(vocab.LabelOutbox, name), eq(vocab.LabelState, vocab.StateDead))),
				labels, own))
		}
		return rules
	})
}

// hasLease reports whether the outbox's rows carry a lease the exporter
// can judge.
func hasLease(o *config.Outbox) bool {
	return o.LeaseUntil != "" || (o.ClaimedAt != "" && o.LeaseTTL > 0)
}

// hasUnknown reports whether the exporter can see unknown publish results
// in the outbox: a status for them, a predicate, or an expired lease after
// an attempt.
func hasUnknown(o *config.Outbox) bool {
	return len(o.Unknown) > 0 || o.UnknownWhen != "" || (hasLease(o) && o.Attempts != "")
}

// hasDead reports whether the outbox can mark rows dead.
func hasDead(o *config.Outbox) bool {
	return (o.Status != "" && len(o.Dead) > 0) || o.DeadAt != ""
}

// standbyLag fires while the database an outbox is read from is a standby
// whose replay is more than half the outbox's shortest deadline behind:
// everything the exporter says about the outbox is that old, so a missed
// deadline would page at least half a deadline late, and rows published
// on the primary still look unpublished.
func (b *builder) standbyLag(s outboxScope) Rule {
	return b.alert("OutboxStandbyReplayLagEatsDeadline",
		fmt.Sprintf("max by (%s) ("+vocab.DatabaseReplayLag+"%s)\n> on (%s) group_right\n0.5 * min by (%s) ("+vocab.OutboxDeadline+"%s)",
			b.by(), b.selector(eq(vocab.LabelDatabase, s.o.Database)), b.by(), b.by(vocab.LabelOutbox), s.sel),
		says{fill: []string{"database", s.o.Database, "outboxes", "outbox {{ $labels.outbox }}, read from it"}},
		map[string]string{"outbox": s.name})
}
