package alerts

import (
	"fmt"
	"maps"
	"slices"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// orderSustained is how long an order inversion or receipt-less publishes
// must go on before the ticket becomes a page: one stuck E9 is a ticket,
// half an hour of them means consumers keep applying events out of order.
const orderSustained = "30m"

// orderAlerts fire on per-aggregate order broken (two relays publishing
// a later event of an aggregate before an earlier one) and on rows marked
// published without the downstream's receipt: a ticket at once, a page when it lasts.
func (b *builder) orderAlerts() []Rule {
	rules := b.perOutbox(func(s outboxScope) []Rule {
		var rules []Rule
		own := map[string]string{"outbox": s.name}
		labels := []string{"labels", s.lt}
		if s.o.Aggregate != "" && s.o.Sequence != "" {
			rules = append(rules, b.ticketThenPage("OutboxOutOfOrderEvents",
				fmt.Sprintf("max by (%s) ("+vocab.OutboxOutOfOrder+"%s) > 0", s.by, s.sel), labels, own)...)
		}
		if s.o.Receipt == "" || s.o.PublishedAt == "" {
			return rules
		}
		return append(rules, b.ticketThenPage("OutboxPublishedWithoutReceipt",
			fmt.Sprintf("sum by (%s) (increase("+vocab.OutboxPublishedNoReceipt+"%s[10m])) > 0", s.by, s.sel), labels, own)...)
	})
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Audit)) {
		a := b.cfg.Audit[name]
		if a.Aggregate == "" || a.Sequence == "" {
			continue
		}
		rules = append(rules, b.ticketThenPage("OutboxAuditOrderInversions",
			fmt.Sprintf("max by (%s) (increase("+vocab.AuditOrderInversions+"%s[10m])) > 0", b.by(vocab.LabelOutbox), b.selector(eq(vocab.LabelOutbox, name))),
			nil, map[string]string{"outbox": name})...)
	}
	return rules
}

// ticketThenPage is the two rules of an alert on expr that opens a
// ticket (warning) and, once it lasts orderSustained, pages (critical);
// fill fills both descriptions' slots.
func (b *builder) ticketThenPage(name, expr string, fill []string, labels map[string]string) []Rule {
	return []Rule{
		b.alert(name, expr, says{severity: SeverityWarning, fill: fill}, labels),
		b.alert(name, expr, says{severity: SeverityCritical, fill: fill}, labels),
	}
}
