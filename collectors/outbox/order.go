package outbox

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Per-aggregate order (seed 000, section four: E9 and E10 of one
// conversation, committed in order, E9 stuck on one relay while another
// publishes E10). The broker keeps only the order it received, so the
// inversion is visible only here, while E9 is still unpublished: an
// unpublished row whose aggregate already has a published row with a
// higher sequence.
//
// Probing every unpublished row at every scrape would cost as much as
// the state count again, so the rows are followed instead (order_track.go):
// a full scan at start and every OrderRescanEvery finds the overtaken
// aggregates (it reads at most max_count+1 unpublished rows and probes
// each once through the (aggregate, sequence) index of published rows);
// between full scans, each row read by the published-rows watermark is
// probed once for an unpublished predecessor, and only the aggregates
// known to be overtaken are counted again. Below max_count the gauge is
// exact for inversions made by a publish (E10 published while E9 waits);
// one made by an unpublished row written below an already published
// sequence (a late commit, a restarted sequence) shows at the next full
// scan. Without published_at there is no watermark, and every sample is
// a full scan.
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
func (s *Spec) orderPlanned() []plannedQuery {
	q := s.orderSeedQuery()
	if q == "" {
		return nil
	}
	o := s.O
	none := func(c string) string { return "(SELECT " + col(c) + " FROM " + s.table + " t WHERE false)" }
	probe := fmt.Sprintf(`SELECT 1 FROM %s t WHERE %s LIMIT 1`, s.table, s.where(
		col(o.Aggregate)+" = "+none(o.Aggregate), col(o.Sequence)+" < "+none(o.Sequence), s.UnpublishedPredicate()))
	return []plannedQuery{
		{name: "out_of_order", sql: q, index: "aggregate"},
		{name: "out_of_order predecessor probe", sql: probe, index: "aggregate_unpublished", rule: planRule{condOn: o.Aggregate}},
	}
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

// stuckOrderQuery reads the out-of-order rows among at most max_count+1
// unpublished rows, oldest first, at most $1, with the columns of
// StuckQuery followed by the aggregate, the sequence and the highest
// published sequence of the aggregate (the one that overtook it).
func (s *Spec) stuckOrderQuery() string {
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

// withOrder adds to the oldest rows of a stuck-rows answer the rows out
// of order (at most limit more), each with its aggregate, its sequence
// and the sequence that overtook it, and keeps the answer oldest first.
func withOrder(ctx context.Context, tx pgx.Tx, spec *Spec, rows []StuckRow, limit int) ([]StuckRow, error) {
	if !OrderEnabled(spec.O) {
		return rows, nil
	}
	o := spec.O
	res, err := tx.Query(ctx, spec.stuckOrderQuery(), limit)
	if err != nil {
		return nil, fmt.Errorf("out-of-order rows of outbox %q: %w", spec.Name, err)
	}
	defer res.Close()
	at := map[string]int{}
	for i, r := range rows {
		at[r.ID] = i
	}
	nl := len(o.Labels)
	for res.Next() {
		var (
			r      StuckRow
			f      Facts
			labels = make([]*string, nl)
			agg    *string
			seq    string
			over   string
		)
		dest := []any{&r.ID, &f.Status, &f.ClaimSet, &f.LeasePassed, &f.Attempted, &f.UnknownWhen}
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &r.AgeSeconds, &r.Attempts, &r.LastError, &agg, &seq, &over)
		if err := res.Scan(dest...); err != nil {
			return nil, fmt.Errorf("out-of-order rows of outbox %q: %w", spec.Name, err)
		}
		r.ID = strings.ToValidUTF8(r.ID, "\uFFFD")
		order := &StuckOrder{Sequence: seq, OvertakenBy: over}
		if agg != nil {
			order.Aggregate = strings.ToValidUTF8(*agg, "\uFFFD")
		}
		if i, ok := at[r.ID]; ok {
			rows[i].Order = order
			continue
		}
		r.decide(spec, f, strs(labels))
		r.Order = order
		rows = append(rows, r)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("out-of-order rows of outbox %q: %w", spec.Name, err)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].AgeSeconds > rows[j].AgeSeconds })
	return rows, nil
}

// StuckOrder is, for a stuck row out of order, its place in its
// aggregate and the published sequence that overtook it.
type StuckOrder struct {
	Aggregate   string `json:"aggregate"`
	Sequence    string `json:"sequence"`
	OvertakenBy string `json:"overtaken_by"`
}
