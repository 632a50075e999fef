package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// boundSpec is an outbox's queries built for its table's columns, with
// the rules that decide a row's state from what they read: both depend
// on the column types (an integer status is read in canonical form).
type boundSpec struct {
	*outboxsql.Spec
	Rules *Rules
}

// openSpec reads the columns of outbox name's table and builds its
// queries and rules; behind is the lookback of an outbox published by a
// replication slot, 0 for any other.
func openSpec(ctx context.Context, q outboxsql.Querier, name string, o *config.Outbox, behind time.Duration) (*boundSpec, error) {
	cols, err := outboxsql.Introspect(ctx, q, o.Table)
	if err != nil {
		return nil, err
	}
	spec, err := outboxsql.NewSpec(name, o, cols)
	if err != nil {
		return nil, err
	}
	spec.Behind = behind
	rules, err := NewRules(o, spec.IntStatus)
	if err != nil {
		return nil, fmt.Errorf("outbox %q: %w", name, err)
	}
	return &boundSpec{Spec: spec, Rules: rules}, nil
}

// FactsFromBits decodes the facts column of the state query.
func FactsFromBits(status string, bits int32) Facts {
	return Facts{Status: status, ClaimSet: bits&outboxsql.FactClaim != 0, LeasePassed: bits&outboxsql.FactLeasePassed != 0,
		Attempted: bits&outboxsql.FactAttempted != 0, UnknownWhen: bits&outboxsql.FactUnknownWhen != 0}
}

// strs turns label values read from the table into label values: NULL
// is "", and invalid UTF-8 (text in a SQL_ASCII database may hold any
// bytes) has each invalid sequence replaced by U+FFFD, so that a metric
// can always be built from it.
func strs(ps []*string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p != nil {
			out[i] = strings.ToValidUTF8(*p, "\uFFFD")
		}
	}
	return out
}

// queueGroups queues a state-shaped query whose groups are appended to
// *dst, tagged with the part that read them.
func queueGroups(b *pgx.Batch, q string, spec *boundSpec, p part, dst *[]group, what string) {
	b.Queue(q).Query(func(rows pgx.Rows) error {
		gs, err := scanGroups(rows, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for i := range gs {
			gs[i].part = p
		}
		*dst = append(*dst, gs...)
		return nil
	})
}

// queueCounts queues a query of label values and a count (the dead and
// unclassified counts).
func queueCounts(b *pgx.Batch, q string, nl int, dst *[]group, what string) {
	b.Queue(q).Query(func(rows pgx.Rows) error {
		gs, err := scanCounts(rows, nl)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		*dst = append(*dst, gs...)
		return nil
	})
}

// scanGroups reads a state-shaped query.
func scanGroups(rows pgx.Rows, spec *boundSpec) ([]group, error) {
	defer rows.Close()
	nl, nd := len(spec.O.Labels), len(spec.Deadlines())
	var out []group
	for rows.Next() {
		var (
			g      = group{late: make([]int64, nd)}
			labels = make([]*string, nl)
			age    *float64
			status string
			bits   int32
		)
		dest := []any{&status, &bits}
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &g.rows, &age)
		for i := range g.late {
			dest = append(dest, &g.late[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		g.labels = strs(labels)
		g.facts = FactsFromBits(status, bits)
		if age != nil && *age > 0 {
			g.age = *age
		}
		if g.rows > 0 {
			out = append(out, g)
		}
	}
	return out, rows.Err()
}

// scanCounts reads labels..., rows.
func scanCounts(rows pgx.Rows, nl int) ([]group, error) {
	defer rows.Close()
	var out []group
	for rows.Next() {
		var (
			g      group
			labels = make([]*string, nl)
			dest   []any
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &g.rows)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		g.labels = strs(labels)
		if g.rows > 0 {
			out = append(out, g)
		}
	}
	return out, rows.Err()
}

func scanOldest(rows pgx.Rows, nl int) ([]oldest, error) {
	defer rows.Close()
	var out []oldest
	for rows.Next() {
		var (
			labels = make([]*string, nl)
			age    *float64
			dest   []any
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &age)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		o := oldest{labels: strs(labels)}
		if age != nil && *age > 0 {
			o.age = *age
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// leaseKey identifies one lease of one row: a row claimed again has a new
// lease, so a new key.
func leaseKey(id string, lease int64) string { return id + "\x00" + strconv.FormatInt(lease, 10) }

func scanLeases(rows pgx.Rows) ([]Mark, error) {
	defer rows.Close()
	var out []Mark
	for rows.Next() {
		var (
			id            string
			lease, expiry int64
		)
		if err := rows.Scan(&id, &lease, &expiry); err != nil {
			return nil, err
		}
		out = append(out, Mark{Key: leaseKey(id, lease), At: expiry})
	}
	return out, rows.Err()
}

func scanLive(rows pgx.Rows) ([]liveLease, error) {
	defer rows.Close()
	var out []liveLease
	for rows.Next() {
		var l liveLease
		if err := rows.Scan(&l.id, &l.lease, &l.expiry); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func scanFates(rows pgx.Rows) (map[string]leaseFate, error) {
	defer rows.Close()
	out := map[string]leaseFate{}
	for rows.Next() {
		var (
			id string
			f  leaseFate
		)
		if err := rows.Scan(&id, &f.class, &f.claimed, &f.publishedAt, &f.lease); err != nil {
			return nil, err
		}
		out[id] = f
	}
	return out, rows.Err()
}

func scanPublished(rows pgx.Rows, nl int) ([]PublishedRow, error) {
	defer rows.Close()
	var out []PublishedRow
	for rows.Next() {
		var (
			p      PublishedRow
			labels = make([]*string, nl)
			dest   = []any{&p.ID}
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &p.PublishedAt, &p.Latency)
		dest = append(dest, publishedExtraDest(rows, nl, &p)...)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		p.Labels = strs(labels)
		out = append(out, p)
	}
	return out, rows.Err()
}
