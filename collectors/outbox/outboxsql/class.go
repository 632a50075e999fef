package outboxsql

import (
	"strconv"
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Class is what a row's columns alone say about it, without a lease to
// judge: the part of Classify the audit and reconcile need, computed by
// the server for each row they read.
type Class int

// Classes, as the collector's states fold into them.
const (
	// ClassUnpublished: pending, in flight or lease expired.
	ClassUnpublished Class = iota
	ClassPublished
	ClassDead
	// ClassIgnored: a NULL status or one listed nowhere in the
	// configuration; the collector counts it as outbox_unclassified_events.
	ClassIgnored
	numClasses
)

// ClassValues are the SQL values ClassExpr yields, by Class.
type ClassValues [numClasses]int

// ClassExpr is an SQL expression giving the class of a row of o by the
// rules of Rules.Classify, as the value vals holds for it; q prefixes the
// column names ("t." or ""). It is built from the same predicates as the
// collector's queries (sqlRules). Status values are inlined as literals,
// which the server types by the column.
func ClassExpr(o *config.Outbox, q string, vals ClassValues) string {
	v := func(c Class) string { return strconv.Itoa(vals[c]) }
	r := sqlRules{o: o, q: q, lit: pg.Literal}
	var b strings.Builder
	b.WriteString("CASE")
	if p := r.published(); p != "" {
		b.WriteString(" WHEN " + p + " THEN " + v(ClassPublished))
	}
	if p := r.dead(); p != "" {
		b.WriteString(" WHEN " + p + " THEN " + v(ClassDead))
	}
	up := r.unpublished()
	if up == "" {
		return v(ClassUnpublished)
	}
	b.WriteString(" WHEN " + up + " THEN " + v(ClassUnpublished))
	b.WriteString(" ELSE " + v(ClassIgnored) + " END")
	return b.String()
}
