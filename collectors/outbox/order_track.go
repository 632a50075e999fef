package outbox

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// OrderRescanEvery is how often the order check scans the unpublished
// rows in full; in between it follows the rows published since the last
// read (order.go).
const OrderRescanEvery = 5 * time.Minute

// orderState is what the order check keeps between samples.
type orderState struct {
	// spec is the spec aggType and seqType were read for.
	spec             *boundSpec
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

// queueOrder adds the order check's batch queries: the column types when
// the spec is new, the full scan when it is due.
func (s *Sampler) queueOrder(b *pgx.Batch, spec *boundSpec, r *read) {
	if !outboxsql.OrderEnabled(s.o) {
		return
	}
	st := &s.order
	if st.spec != spec {
		for i, c := range []string{s.o.Aggregate, s.o.Sequence} {
			b.Queue(outboxsql.OrderTypesQuery, spec.Table(), c).QueryRow(func(row pgx.Row) error {
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
		b.Queue(spec.OrderSeedQuery()).Query(func(rows pgx.Rows) error {
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
func (s *Sampler) fetchOrder(ctx context.Context, conn *pgx.Conn, spec *boundSpec, r *read) error {
	if !outboxsql.OrderEnabled(s.o) {
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
		rows, err := tx.Query(ctx, spec.OrderRecountQuery(aggType, seqType), aggs, his)
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
	if !outboxsql.OrderEnabled(s.o) {
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
