package discover

import (
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// topicOffsetsColumns are the columns of watermill-sql's offsets table.
var topicOffsetsColumns = []string{config.OffsetsGroupColumn, "offset_acked", "last_processed_transaction_id"}

// matchTopic recognises a topic of a preset whose tables are named per
// topic (watermill-sql): a messages table named watermill_TOPIC with the
// columns the preset reads and a transaction_id, beside its offsets table
// watermill_offsets_TOPIC in the same schema. The consumer group comes
// from the offsets table; tables lists every table of the catalog.
func matchTopic(t Table, tables map[string]Table) (Found, bool) {
	p, ok := config.LookupPreset("watermill-sql")
	off := config.WatermillOffsetsTable(t.Name)
	if !ok || off == "" {
		return Found{}, false
	}
	ot, ok := tables[t.Schema+"."+off]
	if !ok || !hasAll(ot, topicOffsetsColumns) {
		return Found{}, false
	}
	g := p.Base()
	need := []string{"transaction_id"}
	for _, c := range g.Columns() {
		if c != config.OffsetsGroupColumn {
			need = append(need, c)
		}
	}
	if !hasAll(t, need) || !t.Cols[g.Fill.CreatedAt].IsTimestamp() {
		return Found{}, false
	}
	f := Found{Table: t, Preset: p, Gen: g, Keys: []string{"table: " + t.QualifiedName()}}
	f.Notes = append(f.Notes, "cannot see: "+g.Blind)
	return f, true
}

// hasAll reports whether t has every column of cols.
func hasAll(t Table, cols []string) bool {
	for _, c := range cols {
		if _, ok := t.Cols[c]; !ok {
			return false
		}
	}
	return true
}

// byName indexes tables by schema.name.
func byName(tables []Table) map[string]Table {
	m := make(map[string]Table, len(tables))
	for _, t := range tables {
		m[t.QualifiedName()] = t
	}
	return m
}

// isTopicOffsets reports an offsets table of a topic found: it is read
// with its messages table, not on its own.
func isTopicOffsets(t Table) bool {
	return strings.HasPrefix(t.Name, "watermill_offsets_") && hasAll(t, topicOffsetsColumns)
}
