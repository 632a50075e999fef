package audit

import (
	"fmt"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// outboxQuery returns the query that reads the sampled rows of an outbox
// created since $1: id as text, class (0 unpublished, 1 published, 2
// dead), published_at (NULL without that column) and created_at. It reads
// no body column. Its cost is one range scan of created_at over the window
// (an index on created_at serves it) and, below sample 1, one md5 per row
// scanned; only the sampled rows travel.
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
