package audit

import (
	"fmt"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// outboxQuery returns the query that reads the sampled rows of an outbox
// created since $1: id as text, class (0 unpublished, 1 published, 2
// dead), published_at (NULL without that column) and created_at. It reads
// no body column. Its cost is one range scan of created_at over the window
// (an index on created_at serves it) and, below sample 1, one md5 per row
// scanned; only the sampled rows travel.
//
// The state predicates are written here rather than shared with the outbox
// collector, which is built at the same time; the rules are the SPEC's: a
// status column with published/dead value lists, or published_at/dead_at
// set, or a delete-on-publish table whose rows are all unpublished.
func outboxQuery(o *config.Outbox, s Sampler) string {
	id := pg.Ident(o.ID)
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s::text, %s, %s, %s FROM %s WHERE %s >= $1",
		id, classExpr(o), publishedAtExpr(o), pg.Ident(o.CreatedAt), pg.Table(o.Table), pg.Ident(o.CreatedAt))
	if o.Filter != "" {
		fmt.Fprintf(&b, " AND (%s)", o.Filter)
	}
	if p := s.SQL(id + "::text"); p != "" {
		fmt.Fprintf(&b, " AND %s", p)
	}
	return b.String()
}

// classExpr is the SQL expression for a row's Class.
func classExpr(o *config.Outbox) string {
	switch o.Style() {
	case config.StyleStatus:
		st := pg.Ident(o.Status)
		var b strings.Builder
		b.WriteString("CASE")
		if len(o.Published) > 0 {
			fmt.Fprintf(&b, " WHEN %s IN (%s) THEN %d", st, literals(o.Published), Published)
		}
		if len(o.Dead) > 0 {
			fmt.Fprintf(&b, " WHEN %s IN (%s) THEN %d", st, literals(o.Dead), Dead)
		}
		fmt.Fprintf(&b, " ELSE %d END", Unpublished)
		if len(o.Published) == 0 && len(o.Dead) == 0 {
			return fmt.Sprint(int(Unpublished))
		}
		return b.String()
	case config.StyleTimestamps:
		var b strings.Builder
		b.WriteString("CASE")
		if o.PublishedAt != "" {
			fmt.Fprintf(&b, " WHEN %s IS NOT NULL THEN %d", pg.Ident(o.PublishedAt), Published)
		}
		if o.DeadAt != "" {
			fmt.Fprintf(&b, " WHEN %s IS NOT NULL THEN %d", pg.Ident(o.DeadAt), Dead)
		}
		fmt.Fprintf(&b, " ELSE %d END", Unpublished)
		return b.String()
	}
	return fmt.Sprint(int(Unpublished))
}

func publishedAtExpr(o *config.Outbox) string {
	if o.PublishedAt == "" {
		return "NULL::timestamptz"
	}
	return pg.Ident(o.PublishedAt)
}

func literals(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = pg.Literal(v)
	}
	return strings.Join(q, ", ")
}
