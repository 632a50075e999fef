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

		rules = append(rules, b.alert("OutboxNotificationDeadlineMissed", SeverityCritical,
			fmt.Sprintf("max by (%[1]s) (%[3]s%[2]s)\n> on (%[1]s)\nmax by (%[1]s) (%[4]s%[2]s)", by, sel, vocab.OutboxOldestPendingAge, vocab.OutboxDeadline),
			"1m",
			"An outbox event is older than its notification deadline.",
			"The oldest unpublished event of outbox {{ $labels.outbox }}"+lt+" is {{ $value | humanizeDuration }} old, past its notification deadline.",
			own))

		rules = append(rules, b.standbyLag(s))

		if hasLease(o) {
			rules = append(rules, b.alert("OutboxLeaseExpiriesSustained", SeverityWarning,
				fmt.Sprintf("max by (%s) (rate(%s%s[10m])) * 60 > 0", b.by(vocab.LabelOutbox), vocab.OutboxLeaseExpirations, sel),
				"15m",
				"Relay leases keep expiring.",
				"Leases on rows of outbox {{ $labels.outbox }} have expired for 15 minutes without pause ({{ $value | humanize }} per minute): relays die, hang or overrun their lease while publishing.",
				own))
		}
		if hasUnknown(o) {
			rules = append(rules, b.alert("OutboxUnknownResultEvents", SeverityWarning,
				fmt.Sprintf("max by (%s) (%s%s) > 0", by, vocab.OutboxUnknownResult, sel),
				"15m",
				"Outbox events have an unknown publish result.",
				"Outbox {{ $labels.outbox }}"+lt+" has {{ $value }} events whose publish result is unknown: the broker may hold them, so their retry may duplicate them.",
				own))
		}
		if hasDead(o) {
			rules = append(rules, b.alert("OutboxDeadEvents", SeverityWarning,
				fmt.Sprintf("max by (%s) (%s%s) > 0", by, vocab.OutboxEvents, b.selector(eq(vocab.LabelOutbox, name), eq(vocab.LabelState, vocab.StateDead))),
				"5m",
				"Outbox events were abandoned.",
				"Outbox {{ $labels.outbox }}"+lt+" holds {{ $value }} dead events: relays gave up on them and they will never be published unless someone replays them.",
				own))
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
	return b.alert("OutboxStandbyReplayLagEatsDeadline", SeverityWarning,
		fmt.Sprintf("max by (%s) ("+vocab.DatabaseReplayLag+"%s)\n> on (%s) group_right\n0.5 * min by (%s) ("+vocab.OutboxDeadline+"%s)",
			b.by(), b.selector(eq(vocab.LabelDatabase, s.o.Database)), b.by(), b.by(vocab.LabelOutbox), s.sel),
		"2m",
		"The standby an outbox is read from lags behind by more than half its deadline.",
		"Outbox {{ $labels.outbox }} is read from database "+s.o.Database+", a standby whose replay is {{ $value | humanizeDuration }} behind the primary: more than half the outbox's shortest deadline. Its ages and counts are that old; a missed deadline pages late.",
		map[string]string{"outbox": s.name})
}
