package outboxsql

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// OrderEnabled reports whether outbox o measures per-aggregate order.
func OrderEnabled(o *config.Outbox) bool {
	return o.Aggregate != "" && o.Sequence != "" && o.Style() != config.StyleDeleteOnPublish
}

// publishedPredicate is the condition of published rows, columns
// qualified with q (predicates.go's one copy of the rules); FALSE where no
// row is ever seen published.
func (s *Spec) publishedPredicate(q string) string {
	if p := s.rules(q).published(); p != "" {
		return p
	}
	return "FALSE"
}

// overtaken is the probe of one unpublished row u(ag, sq): a published
// row of its aggregate with a higher sequence. One descent of the
// (aggregate, sequence) index; the filter applies to the successor too,
// since it names the rows that belong to this outbox.
func (s *Spec) overtaken(u string) string {
	return fmt.Sprintf(`SELECT 1 FROM %s t WHERE %s`, s.table,
		s.where(col(s.O.Aggregate)+" = "+u+".ag", col(s.O.Sequence)+" > "+u+".sq", s.publishedPredicate("t.")))
}

// OrderIndexes is the index the order probe needs: (aggregate, sequence)
// over the published rows only. The successor a probe looks for is
// published; in a healthy outbox the later rows of an unpublished row's
// aggregate are unpublished too, so the probe finds no entry at all and
// reads neither entries nor table pages it would have to check.
func (s *Spec) OrderIndexes() map[string]Index {
	if !OrderEnabled(s.O) {
		return nil
	}
	cols := []string{s.O.Aggregate, s.O.Sequence}
	return map[string]Index{
		"aggregate": {Name: IndexName(s.Name, "aggregate"), Columns: cols, Where: s.publishedPredicate(""),
			For: "the out-of-order probe of each unpublished row"},
		"aggregate_unpublished": {Name: IndexName(s.Name, "aggregate_unpublished"), Columns: cols, Where: s.rules("").unpublished(),
			For: "the out-of-order probe of each newly published row and the recount of overtaken aggregates"},
	}
}

// orderInclude are the columns the unpublished index also carries when
// order is measured, so that the order query reads the unpublished rows'
// aggregate and sequence from it alone, as the state query reads its
// columns.
func orderInclude(o *config.Outbox) []string {
	if !OrderEnabled(o) {
		return nil
	}
	return []string{o.Aggregate, o.Sequence}
}

// orderPlanned is the order query as check plans it. No index condition
// is required of the probe: on a small table the planner reads the whole
// partial index of published rows once instead of probing it per row,
// which is as good; without an index on the aggregate the probe reads the
// table or a whole index, which check refuses.
//
// The probe of a published row for an unpublished predecessor (in the
// published query, and the access path of the recount) is planned on its
// own: it must find the aggregate's unpublished rows through an index,
// not read every unpublished row. The values compared are subqueries
// that return nothing (WHERE false): parameters of the columns' own types
// to the planner, whatever those types are, and no scan of their own.
func (s *Spec) orderPlanned() []Plan {
	q := s.OrderSeedQuery()
	if q == "" {
		return nil
	}
	o := s.O
	none := func(c string) string { return "(SELECT " + col(c) + " FROM " + s.table + " t WHERE false)" }
	probe := fmt.Sprintf(`SELECT 1 FROM %s t WHERE %s LIMIT 1`, s.table, s.where(
		col(o.Aggregate)+" = "+none(o.Aggregate), col(o.Sequence)+" < "+none(o.Sequence), s.UnpublishedPredicate()))
	return []Plan{
		{Name: "out_of_order", SQL: q, Index: "aggregate"},
		{Name: "out_of_order predecessor probe", SQL: probe, Index: "aggregate_unpublished", Rule: PlanRule{CondOn: o.Aggregate}},
	}
}

// StuckOrderQuery reads the out-of-order rows among at most max_count+1
// unpublished rows, oldest first, at most $1, with the columns of
// StuckQuery followed by the aggregate, the sequence and the highest
// published sequence of the aggregate (the one that overtook it).
func (s *Spec) StuckOrderQuery() string {
	o := s.O
	sel := s.stuckColumns()
	inner := make([]string, len(sel))
	outer := make([]string, len(sel))
	for i, x := range sel {
		inner[i] = x + " AS s" + strconv.Itoa(i)
		outer[i] = "u.s" + strconv.Itoa(i)
	}
	inner = append(inner, col(o.Aggregate)+" AS ag", col(o.Sequence)+" AS sq", col(o.CreatedAt)+" AS ord")
	over := fmt.Sprintf(`(SELECT max(%s) FROM %s t WHERE %s)::text`, col(o.Sequence), s.table,
		s.where(col(o.Aggregate)+" = u.ag", col(o.Sequence)+" > u.sq", s.publishedPredicate("t.")))
	return fmt.Sprintf(`SELECT %s, u.ag::text, u.sq::text, %s
FROM (SELECT %s FROM %s t WHERE %s LIMIT %d) u
WHERE EXISTS (%s) ORDER BY u.ord LIMIT $1`,
		strings.Join(outer, ", "), over, strings.Join(inner, ", "), s.table, s.where(s.UnpublishedPredicate()),
		o.MaxCount+1, s.overtaken("u"))
}

// overtakes is the published query's probe of one published row t: an
// unpublished row of its aggregate with a lower sequence. Columns: the
// aggregate as text when it overtakes one (else NULL), the sequence.
func (s *Spec) overtakes() []string {
	o := s.O
	// The filter names columns unqualified, so inside the probe it binds
	// to the probed row u.
	probe := fmt.Sprintf(`SELECT 1 FROM %s u WHERE %s`, s.table, s.where(
		"u."+pg.Ident(o.Aggregate)+" = "+col(o.Aggregate), "u."+pg.Ident(o.Sequence)+" < "+col(o.Sequence),
		s.rules("u.").unpublished()))
	return []string{"CASE WHEN EXISTS (" + probe + ") THEN " + col(o.Aggregate) + "::text END",
		"coalesce(" + col(o.Sequence) + "::text, '')"}
}

// OrderSeedQuery is the full scan: the overtaken aggregates among at most
// max_count+1 unpublished rows, each with its highest published sequence.
// Columns: aggregate, sequence, as text.
func (s *Spec) OrderSeedQuery() string {
	if !OrderEnabled(s.O) {
		return ""
	}
	o := s.O
	top := fmt.Sprintf(`(SELECT max(%s) FROM %s t WHERE %s)::text`, col(o.Sequence), s.table,
		s.where(col(o.Aggregate)+" = u.ag", s.publishedPredicate("t.")))
	return fmt.Sprintf(`SELECT DISTINCT u.ag::text, %s
FROM (SELECT %s AS ag, %s AS sq FROM %s t WHERE %s LIMIT %d) u
WHERE EXISTS (%s)`, top, col(o.Aggregate), col(o.Sequence), s.table, s.where(s.UnpublishedPredicate()),
		o.MaxCount+1, s.overtaken("u"))
}

// OrderRecountQuery counts the unpublished rows of the tracked aggregates
// ($1, as text) below their overtaking sequences ($2, as text), by
// aggregate and label values; aggType and seqType are the columns' types,
// so that the aggregate is compared in its own type, through the index.
// Columns: aggregate, labels..., rows.
func (s *Spec) OrderRecountQuery(aggType, seqType string) string {
	o := s.O
	sel := []string{"a.ag"}
	group := []string{"1"}
	for i, l := range o.Labels {
		sel = append(sel, col(l.Column)+"::text")
		group = append(group, strconv.Itoa(i+2))
	}
	// The probe again, for these few rows: the overtaking row may have
	// been deleted since (retention), and then the row is not overtaken.
	still := fmt.Sprintf(`EXISTS (SELECT 1 FROM %s p WHERE %s)`, s.table, s.where(
		"p."+pg.Ident(o.Aggregate)+" = "+col(o.Aggregate), "p."+pg.Ident(o.Sequence)+" > "+col(o.Sequence),
		s.publishedPredicate("p.")))
	return fmt.Sprintf(`SELECT %s, count(*)::int8 FROM unnest($1::text[], $2::text[]) a(ag, hi)
JOIN %s t ON %s = a.ag::%s AND %s < a.hi::%s
WHERE %s GROUP BY %s`, strings.Join(sel, ", "), s.table, col(o.Aggregate), aggType, col(o.Sequence), seqType,
		s.where(s.UnpublishedPredicate(), still), strings.Join(group, ", "))
}

// OrderTypesQuery reads the types of the aggregate and sequence columns.
const OrderTypesQuery = `SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`

// publishedExtras are the published query's columns beyond id, labels,
// published_at and latency: the receipt (receipt.go), then the order
// probe.
func (s *Spec) publishedExtras() []string {
	out := s.receiptExprs()
	if OrderEnabled(s.O) {
		out = append(out, s.overtakes()...)
	}
	return out
}
