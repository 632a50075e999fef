package audit

import (
	"fmt"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// outboxQuery returns the query that reads the sampled rows of an outbox
// the audit judges, given $1, the start of the span the topics cover plus
// grace: id as text, class (0 unpublished, 1 published, 2 dead),
// published_at (NULL without that column) and created_at. It reads no
// body column. The rows are chosen by what can be on the topics:
//
//   - published rows by when they were published (published_at ≥ $1), so
//     a backlog row created long ago and published now is judged (item
//     10); without a published_at column, by created_at ≥ $1, since
//     nothing else tells when a row was published;
//   - unpublished rows a relay may have sent: every claimed one whatever
//     its age (status in in_flight or unknown, or a lease_until or
//     claimed_at set), and the pending ones created inside the window.
//     A relay draining a backlog publishes old rows, so age cannot bound
//     the claimed ones; but a pending row with no claim on it was not
//     sent by a live relay, and reading every one of a 2M-row backlog
//     every comparison would cost seconds (BENCHMARKS.md);
//   - dead rows by dead_at ≥ $1, or created_at ≥ $1 without dead_at, so
//     that a dead row whose event is on the topics is reported.
//
// Each branch also requires the row's class (outbox.ClassExpr, the
// collector's rules), so a row is read once, in its class. Below sample 1
// each branch costs one md5 per row it scans; only sampled rows travel.
func outboxQuery(o *config.Outbox, s Sampler) string {
	id := pg.Ident(o.ID)
	class := classExpr(o)
	sel := fmt.Sprintf("SELECT %s::text, %s, %s, %s FROM %s WHERE ", id, class, publishedAtExpr(o), pg.Ident(o.CreatedAt), pg.Table(o.Table))
	var extra string
	if o.Filter != "" {
		extra += fmt.Sprintf(" AND (%s)", o.Filter)
	}
	if p := s.SQL(id + "::text"); p != "" {
		extra += " AND " + p
	}
	var parts []string
	for _, b := range branches(o) {
		parts = append(parts, sel+b.pred+fmt.Sprintf(" AND %s = %d", class, int(b.class))+extra)
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

type branch struct {
	class Class
	pred  string
}

// branches are the row choices of outboxQuery, by class.
func branches(o *config.Outbox) []branch {
	created := pg.Ident(o.CreatedAt) + " >= $1::timestamptz"
	in := func(list []string) string {
		lits := make([]string, len(list))
		for i, v := range list {
			lits[i] = pg.Literal(v)
		}
		return pg.Ident(o.Status) + " IN (" + strings.Join(lits, ", ") + ")"
	}
	var bs []branch
	switch {
	case o.PublishedAt != "":
		bs = append(bs, branch{Published, pg.Ident(o.PublishedAt) + " >= $1::timestamptz"})
	case o.Style() == config.StyleStatus && len(o.Published) > 0:
		bs = append(bs, branch{Published, in(o.Published) + " AND " + created})
	}
	claimed := ""
	switch {
	case o.LeaseUntil != "":
		claimed = pg.Ident(o.LeaseUntil) + " IS NOT NULL"
	case o.ClaimedAt != "":
		claimed = pg.Ident(o.ClaimedAt) + " IS NOT NULL"
	}
	recent := created
	if claimed != "" {
		recent = "(" + created + " OR " + claimed + ")"
	}
	switch o.Style() {
	case config.StyleStatus:
		if c := append(append([]string{}, o.InFlight...), o.Unknown...); len(c) > 0 {
			bs = append(bs, branch{Unpublished, in(c)})
		}
		if len(o.Pending) > 0 {
			bs = append(bs, branch{Unpublished, in(o.Pending) + " AND " + recent})
		}
	case config.StyleTimestamps:
		p := pg.Ident(o.PublishedAt) + " IS NULL"
		if o.PublishedAt == "" {
			p = "TRUE"
		}
		if o.DeadAt != "" {
			p += " AND " + pg.Ident(o.DeadAt) + " IS NULL"
		}
		bs = append(bs, branch{Unpublished, p + " AND " + recent})
	default:
		bs = append(bs, branch{Unpublished, recent})
	}
	switch {
	case o.DeadAt != "":
		bs = append(bs, branch{Dead, pg.Ident(o.DeadAt) + " >= $1::timestamptz"})
	case o.Style() == config.StyleStatus && len(o.Dead) > 0:
		bs = append(bs, branch{Dead, in(o.Dead) + " AND " + created})
	}
	return bs
}

// classExpr is the SQL expression for a row's Class: the outbox
// collector's state rules (outbox.ClassExpr), so that a row is published,
// dead or unpublished here exactly when the collector counts it so.
func classExpr(o *config.Outbox) string {
	return outbox.ClassExpr(o, "", outbox.ClassValues{
		outbox.ClassUnpublished: int(Unpublished),
		outbox.ClassPublished:   int(Published),
		outbox.ClassDead:        int(Dead),
		outbox.ClassIgnored:     int(Ignored),
	})
}

func publishedAtExpr(o *config.Outbox) string {
	if o.PublishedAt == "" {
		return "NULL::timestamptz"
	}
	return pg.Ident(o.PublishedAt)
}

// OutboxQuery is the comparison's query for outbox o at a sample share,
// for the benchmark; its one parameter, when it has one, is the start of
// the judged window plus grace.
func OutboxQuery(o *config.Outbox, sample float64) string { return outboxQuery(o, NewSampler(sample)) }
