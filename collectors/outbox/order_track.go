package outbox

import (
	"context"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// OrderRescanEvery is how often the order check scans the unpublished
// rows in full; in between it follows the rows published since the last
// read (order.go).
const OrderRescanEvery = 5 * time.Minute

// orderState is what the order check keeps between samples.
type orderState struct {
	// spec is the spec aggType and seqType were read for.
	spec             *Spec
	aggType, seqType string
	// tracked maps each aggregate known to be overtaken (as text) to the
	// highest published sequence known to overtake it (as text).
	tracked  map[string]string
	lastFull time.Time
	// rescan is OrderRescanEvery; tests shorten it.
	rescan time.Duration
}

// orderRead is what one sample's order queries read.
type orderRead struct {
	full    bool
	types   [2]string
	seed    map[string]string
	tracked map[string]string
	groups  []orderGroup
}

// orderGroup is one label combination of the recount.
type orderGroup struct {
	labels []string
	rows   int64
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

// orderSeedQuery is the full scan: the overtaken aggregates among at most
// max_count+1 unpublished rows, each with its highest published sequence.
// Columns: aggregate, sequence, as text.
func (s *Spec) orderSeedQuery() string {
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

// orderRecountQuery counts the unpublished rows of the tracked aggregates
// ($1, as text) below their overtaking sequences ($2, as text), by
// aggregate and label values; aggType and seqType are the columns' types,
// so that the aggregate is compared in its own type, through the index.
// Columns: aggregate, labels..., rows.
func (s *Spec) orderRecountQuery(aggType, seqType string) string {
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

// orderTypesQuery reads the types of the aggregate and sequence columns.
const orderTypesQuery = `SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`

// queueOrder adds the order check's batch queries: the column types when
// the spec is new, the full scan when it is due.
func (s *Sampler) queueOrder(b *pgx.Batch, spec *Spec, r *read) {
	if !OrderEnabled(s.o) {
		return
	}
	st := &s.order
	if st.spec != spec {
		for i, c := range []string{s.o.Aggregate, s.o.Sequence} {
			b.Queue(orderTypesQuery, spec.table, c).QueryRow(func(row pgx.Row) error {
				if err := row.Scan(&r.order.types[i]); err != nil {
					return fmt.Errorf("read the type of column %s: %w", c, err)
				}
				return nil
			})
		}
	}
	rescan := st.rescan
	if rescan == 0 {
		rescan = OrderRescanEvery
	}
	if st.spec != spec || s.o.PublishedAt == "" || time.Since(st.lastFull) >= rescan {
		r.order.full = true
		r.order.seed = map[string]string{}
		b.Queue(spec.orderSeedQuery()).Query(func(rows pgx.Rows) error {
			defer rows.Close()
			for rows.Next() {
				var ag, hi *string
				if err := rows.Scan(&ag, &hi); err != nil {
					return fmt.Errorf("find out-of-order rows: %w", err)
				}
				if ag != nil && hi != nil {
					r.order.seed[*ag] = *hi
				}
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("find out-of-order rows: %w", err)
			}
			return nil
		})
	}
}

// fetchOrder runs after the batch: it adds the aggregates the rows just
// read as published overtake, and counts the unpublished rows of every
// tracked aggregate again, dropping those no longer overtaken. It changes
// nothing in the sampler (applyOrder does).
func (s *Sampler) fetchOrder(ctx context.Context, conn *pgx.Conn, spec *Spec, r *read) error {
	if !OrderEnabled(s.o) {
		return nil
	}
	st, or := &s.order, &r.order
	aggType, seqType := st.aggType, st.seqType
	if st.spec != spec {
		aggType, seqType = or.types[0], or.types[1]
	}
	tracked := map[string]string{}
	if or.full {
		for k, v := range or.seed {
			tracked[k] = v
		}
	} else {
		for k, v := range st.tracked {
			tracked[k] = v
		}
	}
	for _, p := range r.published {
		if p.Overtakes != nil {
			raise(tracked, *p.Overtakes, p.Sequence)
		}
	}
	for len(tracked) > s.o.MaxCount {
		// Bounded like the counts: a lower bound past max_count.
		for k := range tracked {
			delete(tracked, k)
			break
		}
	}
	or.tracked = tracked
	if len(tracked) == 0 {
		return nil
	}
	aggs, his := make([]string, 0, len(tracked)), make([]string, 0, len(tracked))
	for k, v := range tracked {
		aggs, his = append(aggs, k), append(his, v)
	}
	nl := len(s.o.Labels)
	still := map[string]bool{}
	err := pg.ReadOnly(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, spec.orderRecountQuery(aggType, seqType), aggs, his)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				ag     string
				g      orderGroup
				labels = make([]*string, nl)
				dest   = []any{&ag}
			)
			for i := range labels {
				dest = append(dest, &labels[i])
			}
			if err := rows.Scan(append(dest, &g.rows)...); err != nil {
				return err
			}
			g.labels = strs(labels)
			still[ag] = true
			or.groups = append(or.groups, g)
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("count out-of-order rows: %w", err)
	}
	for k := range tracked {
		if !still[k] {
			delete(tracked, k)
		}
	}
	return nil
}

// raise records that sequence hi overtakes aggregate ag, keeping the
// highest known.
func raise(tracked map[string]string, ag, hi string) {
	if old, ok := tracked[ag]; ok {
		a, okA := new(big.Rat).SetString(old)
		b, okB := new(big.Rat).SetString(hi)
		if okA && okB && a.Cmp(b) >= 0 {
			return
		}
	}
	tracked[ag] = hi
}

// applyOrder adds the out-of-order counts to the series at gives and
// keeps what the next sample needs.
func (s *Sampler) applyOrder(r *read, at func([]string) *Series) {
	if !OrderEnabled(s.o) {
		return
	}
	for _, g := range r.order.groups {
		at(g.labels).OutOfOrder += float64(g.rows)
	}
	st := &s.order
	if st.spec != s.spec {
		st.spec, st.aggType, st.seqType = s.spec, r.order.types[0], r.order.types[1]
	}
	if r.order.full {
		st.lastFull = time.Now()
	}
	st.tracked = r.order.tracked
}

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

// publishedExtraDest are the scan destinations of publishedExtras, told
// apart by the query's columns: one more for a receipt, two more for the
// order probe.
func publishedExtraDest(rows pgx.Rows, nl int, p *PublishedRow) []any {
	switch len(rows.FieldDescriptions()) - (nl + 3) {
	case 1:
		return []any{&p.NoReceipt}
	case 2:
		return []any{&p.Overtakes, &p.Sequence}
	case 3:
		return []any{&p.NoReceipt, &p.Overtakes, &p.Sequence}
	}
	return nil
}
