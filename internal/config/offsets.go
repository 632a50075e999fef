package config

import (
	"maps"
	"slices"
	"strings"
)

// OffsetsGroupColumn is the column of an offsets table naming the
// consumer group, and the label its groups' series carry.
const OffsetsGroupColumn = "consumer_group"

// watermillPrefix and watermillOffsetsPrefix are how watermill-sql names
// a topic's messages table and its offsets table.
const (
	watermillPrefix        = "watermill_"
	watermillOffsetsPrefix = "watermill_offsets_"
)

// WatermillOffsetsTable is the offsets table watermill-sql keeps beside
// messages table t (watermill_TOPIC gives watermill_offsets_TOPIC, in
// the same schema), "" when t is not named as watermill-sql names one.
func WatermillOffsetsTable(t string) string {
	schema, rel := "", t
	if i := strings.LastIndex(t, "."); i >= 0 {
		schema, rel = t[:i+1], t[i+1:]
	}
	if !strings.HasPrefix(rel, watermillPrefix) || strings.HasPrefix(rel, watermillOffsetsPrefix) || rel == watermillPrefix {
		return ""
	}
	return schema + watermillOffsetsPrefix + strings.TrimPrefix(rel, watermillPrefix)
}

// fillOffsetsTable gives an outbox with the watermill-sql preset and no
// offsets_table the one its messages table's name implies.
func (o *Outbox) fillOffsetsTable() {
	if o.Preset == "watermill-sql" && o.OffsetsTable == "" {
		o.OffsetsTable = WatermillOffsetsTable(o.Table)
	}
}

// outboxOffsets checks offsets_table: a table name, on an outbox whose
// rows are never marked published (the groups' offsets say so), with the
// group as a label.
func (v *validator) outboxOffsets(p string, o *Outbox) {
	if o.OffsetsTable == "" {
		if o.Preset == "watermill-sql" && o.Table != "" {
			v.fail(p+".offsets_table", "is required: table %q is not named watermill_TOPIC, so its offsets table cannot be derived", o.Table)
		}
		return
	}
	v.table(p+".offsets_table", o.OffsetsTable)
	if o.Style() != StyleDeleteOnPublish {
		v.fail(p+".offsets_table", "a consumer group's offset says which messages it has consumed: give no status, published_at or dead_at with it")
	}
	if !slices.ContainsFunc(o.Labels, func(l Label) bool { return l.Column == OffsetsGroupColumn }) {
		v.fail(p+".labels", "with offsets_table, one label must read the column %s (one series per consumer group)", OffsetsGroupColumn)
	}
}

// offsetsUsers refuses the readers of a row's own state (audit, reconcile
// and the cdc link) on an outbox with offsets_table: there a message's
// state is one per consumer group.
func (v *validator) offsetsUsers() {
	offsets := func(name string) bool { o, ok := v.c.Outboxes[name]; return ok && o.OffsetsTable != "" }
	const why = "outbox %q has offsets_table: a message is pending or consumed per consumer group, not once"
	for _, name := range slices.Sorted(maps.Keys(v.c.Audit)) {
		if offsets(name) {
			v.fail("audit."+name, why, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.c.Reconcile)) {
		if r := v.c.Reconcile[name]; r.Outbox != nil && offsets(r.Outbox.Name) {
			v.fail("reconcile."+name+".outbox.name", why, r.Outbox.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.c.CDC)) {
		if c := v.c.CDC[name]; offsets(c.Outbox) {
			v.fail("cdc."+name+".outbox", why, c.Outbox)
		}
	}
}
