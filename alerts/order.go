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
		if s.o.Aggregate != "" && s.o.Sequence != "" {
			rules = append(rules, b.ticketThenPage(s.name, "OutboxOutOfOrderEvents", "5m",
				fmt.Sprintf("max by (%s) ("+vocab.OutboxOutOfOrder+"%s) > 0", s.by, s.sel),
				"Outbox events were overtaken by a later event of their aggregate.",
				"Outbox {{ $labels.outbox }}"+s.lt+" holds {{ $value }} unpublished events whose aggregate already has a later event published: consumers got the successor first.",
				" It has lasted 30 minutes.")...)
		}
		if s.o.Receipt == "" || s.o.PublishedAt == "" {
			return rules
		}
		return append(rules, b.ticketThenPage(s.name, "OutboxPublishedWithoutReceipt", "1m",
			fmt.Sprintf("sum by (%s) (increase("+vocab.OutboxPublishedNoReceipt+"%s[10m])) > 0", s.by, s.sel),
			"Outbox events were marked published without a receipt.",
			"{{ $value | humanize }} events of outbox {{ $labels.outbox }}"+s.lt+" were marked published in the last 10 minutes without the downstream's receipt: nothing shows the downstream got them.",
			" It has gone on for 30 minutes.")...)
	})
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Audit)) {
		a := b.cfg.Audit[name]
		if a.Aggregate == "" || a.Sequence == "" {
			continue
		}
		rules = append(rules, b.ticketThenPage(name, "OutboxAuditOrderInversions", "1m",
			fmt.Sprintf("max by (%s) (increase("+vocab.AuditOrderInversions+"%s[10m])) > 0", b.by(vocab.LabelOutbox), b.selector(eq(vocab.LabelOutbox, name))),
			"Consumers received events of an aggregate out of order.",
			"The audit of outbox {{ $labels.outbox }} saw {{ $value | humanize }} records in the last 10 minutes arrive on their partition after a later record of their aggregate: consumers applied them out of order.",
			" It has gone on for 30 minutes.")...)
	}
	return rules
}

// ticketThenPage is an alert on outbox that opens a ticket (warning) once
// expr has held for ticketFor and pages (critical, its description ending
// in lasted) once it has held for orderSustained.
func (b *builder) ticketThenPage(outbox, name, ticketFor, expr, summary, desc, lasted string) []Rule {
	own := map[string]string{"outbox": outbox}
	return []Rule{
		b.alert(name, SeverityWarning, expr, ticketFor, summary, desc, own),
		b.alert(name, SeverityCritical, expr, orderSustained, summary, desc+lasted, own),
	}
}
