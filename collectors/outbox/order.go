package outbox

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Per-aggregate order (seed 000, section four: E9 and E10 of one
// conversation, committed in order, E9 stuck on one relay while another
// publishes E10). The broker keeps only the order it received, so the
// inversion is visible only here, while E9 is still unpublished: an
// unpublished row whose aggregate already has a published row with a
// higher sequence.
//
// The count is bounded like the state query's: it reads at most
// max_count+1 unpublished rows (in the unpublished index's order, the
// oldest of each label combination first, which is where a stuck E9 is)
// and probes each once through the (aggregate, sequence) index. Below
// max_count it is exact, so never 0 while such a row exists; above it,
// outbox_events_capped is 1 and it is a lower bound.
//
// A gap (9 then 11, 10 never written) is not an inversion: only a
// published row with a higher sequence and an unpublished one with a
// lower sequence make one. An aggregate whose sequence restarts (the
// aggregate deleted and created anew under the same id, counting from 1
// again) while published rows of its earlier life are still in the table
// shows its new unpublished rows as overtaken until those rows are
// purged; the metric cannot tell the two lives apart, so such
// applications should give the new life a new aggregate id.

var (
	outboxOutOfOrderHelp = "Unpublished rows of an aggregate whose later row (higher sequence) is already published: consumers see the successor first (seed 000, E9/E10). A lower bound while outbox_events_capped is 1."
	outboxNoReceiptHelp  = "Rows seen becoming published with no receipt (the receipt column NULL or empty): marked sent without the downstream's confirmation, e.g. by hand (seed 004)."
)

func init() {
	outboxDescribe = append(outboxDescribe,
		prometheus.NewDesc("outbox_out_of_order_events", outboxOutOfOrderHelp, []string{"outbox"}, nil),
		prometheus.NewDesc("outbox_published_without_receipt_events_total", outboxNoReceiptHelp, []string{"outbox"}, nil))
}

// orderDescs are the order and receipt descriptors with an outbox's label
// columns.
type orderDescs struct {
	outOfOrder, noReceipt *prometheus.Desc
}

func newOrderDescs(o *config.Outbox) orderDescs {
	l := []string{"outbox"}
	for _, x := range o.Labels {
		l = append(l, x.Name)
	}
	return orderDescs{
		outOfOrder: prometheus.NewDesc("outbox_out_of_order_events", outboxOutOfOrderHelp, l, nil),
		noReceipt:  prometheus.NewDesc("outbox_published_without_receipt_events_total", outboxNoReceiptHelp, l, nil),
	}
}

// sendOrder sends one series' order and receipt metrics, when configured.
func (c *Collector) sendOrder(gauge, counter func(*prometheus.Desc, float64, ...string), s Series, l []string) {
	d := c.order
	if OrderEnabled(c.o) {
		gauge(d.outOfOrder, s.OutOfOrder, l...)
	}
	if c.o.Receipt != "" && c.o.PublishedAt != "" {
		counter(d.noReceipt, float64(s.NoReceipt), l...)
	}
}

// OrderEnabled reports whether outbox o measures per-aggregate order.
func OrderEnabled(o *config.Outbox) bool {
	return o.Aggregate != "" && o.Sequence != "" && o.Style() != config.StyleDeleteOnPublish
}

// publishedPredicate is the condition of published rows, columns
// qualified with q: a published status, or published_at set.
func (s *Spec) publishedPredicate(q string) string {
	o := s.O
	if o.Style() == config.StyleStatus && len(o.Published) > 0 {
		return q + pg.Ident(o.Status) + " IN (" + s.statusList(o.Published) + ")"
	}
	if o.PublishedAt != "" {
		p := q + pg.Ident(o.PublishedAt) + " IS NOT NULL"
		if o.Style() == config.StyleStatus && len(o.Dead) > 0 {
			p += " AND " + q + pg.Ident(o.Status) + " NOT IN (" + s.statusList(o.Dead) + ")"
		}
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

// OrderQuery counts, by label values, the unpublished rows overtaken by a
// published successor, among at most max_count+1 unpublished rows; ""
// without aggregate and sequence. Columns: labels..., rows.
func (s *Spec) OrderQuery() string {
	if !OrderEnabled(s.O) {
		return ""
	}
	inner := []string{col(s.O.Aggregate) + " AS ag", col(s.O.Sequence) + " AS sq"}
	var outer, group []string
	for i, l := range s.O.Labels {
		a := "l" + strconv.Itoa(i)
		inner = append(inner, col(l.Column)+" AS "+a)
		outer = append(outer, "u."+a+"::text")
		group = append(group, strconv.Itoa(i+1))
	}
	groupBy := ""
	if len(group) > 0 {
		groupBy = "\nGROUP BY " + strings.Join(group, ", ")
	}
	return fmt.Sprintf(`SELECT %s FROM (SELECT %s FROM %s t WHERE %s LIMIT %d) u
WHERE EXISTS (%s)%s`,
		strings.Join(append(outer, "count(*)::int8"), ", "), strings.Join(inner, ", "), s.table,
		s.where(s.UnpublishedPredicate()), s.O.MaxCount+1, s.overtaken("u"), groupBy)
}

// orderGroup is one row of the order query.
type orderGroup struct {
	labels []string
	rows   int64
}

// queueOrder adds the order query to a sample's batch.
func (s *Sampler) queueOrder(b *pgx.Batch, spec *Spec, r *read) {
	q := spec.OrderQuery()
	if q == "" {
		return
	}
	nl := len(s.o.Labels)
	b.Queue(q).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			g := orderGroup{}
			labels := make([]*string, nl)
			dest := make([]any, 0, nl+1)
			for i := range labels {
				dest = append(dest, &labels[i])
			}
			if err := rows.Scan(append(dest, &g.rows)...); err != nil {
				return fmt.Errorf("count out-of-order rows: %w", err)
			}
			g.labels = strs(labels)
			r.order = append(r.order, g)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("count out-of-order rows: %w", err)
		}
		return nil
	})
}

// applyOrder adds the out-of-order counts to the series at gives.
func applyOrder(r *read, at func([]string) *Series) {
	for _, g := range r.order {
		at(g.labels).OutOfOrder += float64(g.rows)
	}
}

// OrderIndexes is the index the order probe needs: (aggregate, sequence)
// over every row, since the successor it looks for is published, with
// the column that says so included, so the probe reads the index alone.
func (s *Spec) OrderIndexes() map[string]Index {
	if !OrderEnabled(s.O) {
		return nil
	}
	inc := s.O.Status
	if s.O.Style() != config.StyleStatus || len(s.O.Published) == 0 {
		inc = s.O.PublishedAt
	}
	return map[string]Index{"aggregate": {Name: IndexName(s.Name, "aggregate"),
		Columns: []string{s.O.Aggregate, s.O.Sequence}, Include: []string{inc},
		For: "the out-of-order probe of each unpublished row"}}
}

// orderPlanned is the order query as check plans it: its probe must be an
// index condition on the aggregate.
func (s *Spec) orderPlanned() []plannedQuery {
	q := s.OrderQuery()
	if q == "" {
		return nil
	}
	return []plannedQuery{{name: "out_of_order", sql: q, index: "aggregate", rule: planRule{condOn: s.O.Aggregate}}}
}

// orderNeeds are the column types check wants for aggregate, sequence and
// receipt.
func orderNeeds(o *config.Outbox) []columnNeed {
	var out []columnNeed
	if o.Aggregate != "" {
		out = append(out, columnNeed{"aggregate", o.Aggregate, anyType, ""})
	}
	if o.Sequence != "" {
		out = append(out, columnNeed{"sequence", o.Sequence, func(c Column) bool { return c.IsInteger() || c.Type == "numeric" },
			"an integer or numeric type"})
	}
	if o.Receipt != "" {
		out = append(out, columnNeed{"receipt", o.Receipt, anyType, ""})
	}
	return out
}
