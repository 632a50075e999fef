package config

import (
	"maps"
	"slices"
)

// order validates the keys of per-aggregate order and receipts:
// outboxes.NAME.aggregate/.sequence/.receipt and
// audit.NAME.aggregate/.sequence. Aggregate and sequence go together: one
// without the other measures nothing, so it is an error rather than a
// silently absent metric.
func (v *validator) order() {
	for _, name := range slices.Sorted(maps.Keys(v.c.Outboxes)) {
		o, p := v.c.Outboxes[name], "outboxes."+name
		v.column(p+".aggregate", o.Aggregate)
		v.column(p+".sequence", o.Sequence)
		v.column(p+".receipt", o.Receipt)
		v.pair(p, o.Aggregate, o.Sequence)
		if o.Receipt != "" && o.PublishedAt == "" {
			v.fail(p+".receipt", "needs published_at: rows are seen becoming published by it")
		}
		if o.Aggregate != "" && o.Style() == StyleDeleteOnPublish {
			v.fail(p+".aggregate", "needs status or published_at: the published successor of a row is what makes it out of order")
		}
		if o.Aggregate != "" && o.NoCreatedAt() {
			v.fail(p+".aggregate", "needs created_at: the rows of an aggregate are read in the order of their creation")
		}
		if o.Aggregate != "" && o.Aggregate == o.Sequence {
			v.fail(p+".sequence", "must be another column than aggregate")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.c.Audit)) {
		a, p := v.c.Audit[name], "audit."+name
		for k, val := range map[string]string{"aggregate": a.Aggregate, "sequence": a.Sequence} {
			if val != "" && !eventIDRe.MatchString(val) {
				v.fail(p+"."+k, "is not header:NAME, key or json:PATH")
			}
		}
		v.pair(p, a.Aggregate, a.Sequence)
	}
}

// pair reports an aggregate given without a sequence or the reverse.
func (v *validator) pair(p, aggregate, sequence string) {
	switch {
	case aggregate != "" && sequence == "":
		v.fail(p+".sequence", "is required with aggregate: the order of events within an aggregate")
	case aggregate == "" && sequence != "":
		v.fail(p+".aggregate", "is required with sequence: the aggregate whose events the sequence orders")
	}
}
