package alerts

import (
	"fmt"
	"maps"
	"slices"
)

// orderSustained is how long an order inversion or receipt-less publishes
// must go on before the ticket becomes a page: one stuck E9 is a ticket,
// half an hour of them means consumers keep applying events out of order.
const orderSustained = "30m"

// orderAlerts fire on per-aggregate order broken (seed 000, E9/E10) and on
// rows marked published without the downstream's receipt (seed 004): a
// ticket at once, a page when it lasts.
func (b *builder) orderAlerts() []Rule {
	var rules []Rule
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Outboxes)) {
		o := b.cfg.Outboxes[name]
		by := b.outboxBy(o)
		sel := b.selector(eq("outbox", name))
		lt := labelText(o)
		if o.Aggregate != "" && o.Sequence != "" {
			expr := fmt.Sprintf("max by (%s) (outbox_out_of_order_events%s) > 0", by, sel)
			desc := "Outbox {{ $labels.outbox }}" + lt + " holds {{ $value }} unpublished events whose aggregate already has a later event published: consumers got the successor first."
			rules = append(rules,
				b.alert("OutboxOutOfOrderEvents", SeverityWarning, expr, "5m",
					"Outbox events were overtaken by a later event of their aggregate.", desc, map[string]string{"outbox": name}),
				b.alert("OutboxOutOfOrderEvents", SeverityCritical, expr, orderSustained,
					"Outbox events were overtaken by a later event of their aggregate.", desc+" It has lasted 30 minutes.", map[string]string{"outbox": name}))
		}
		if o.Receipt != "" && o.PublishedAt != "" {
			expr := fmt.Sprintf("sum by (%s) (increase(outbox_published_without_receipt_events_total%s[10m])) > 0", by, sel)
			desc := "{{ $value | humanize }} events of outbox {{ $labels.outbox }}" + lt + " were marked published in the last 10 minutes without the downstream's receipt: nothing shows the downstream got them."
			rules = append(rules,
				b.alert("OutboxPublishedWithoutReceipt", SeverityWarning, expr, "1m",
					"Outbox events were marked published without a receipt.", desc, map[string]string{"outbox": name}),
				b.alert("OutboxPublishedWithoutReceipt", SeverityCritical, expr, orderSustained,
					"Outbox events were marked published without a receipt.", desc+" It has gone on for 30 minutes.", map[string]string{"outbox": name}))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Audit)) {
		a := b.cfg.Audit[name]
		if a.Aggregate == "" || a.Sequence == "" {
			continue
		}
		expr := fmt.Sprintf("max by (%s) (increase(outbox_audit_order_inversions_total%s[10m])) > 0", b.by("outbox"), b.selector(eq("outbox", name)))
		desc := "The audit of outbox {{ $labels.outbox }} saw {{ $value | humanize }} records in the last 10 minutes arrive on their partition after a later record of their aggregate: consumers applied them out of order."
		rules = append(rules,
			b.alert("OutboxAuditOrderInversions", SeverityWarning, expr, "1m",
				"Consumers received events of an aggregate out of order.", desc, map[string]string{"outbox": name}),
			b.alert("OutboxAuditOrderInversions", SeverityCritical, expr, orderSustained,
				"Consumers received events of an aggregate out of order.", desc+" It has gone on for 30 minutes.", map[string]string{"outbox": name}))
	}
	return rules
}
