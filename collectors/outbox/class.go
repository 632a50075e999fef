package outbox

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

// Classes, as Classify's states fold into them.
const (
	// ClassUnpublished: Pending, InFlight or LeaseExpired.
	ClassUnpublished Class = iota
	ClassPublished
	ClassDead
	// ClassIgnored: a status listed nowhere in the configuration, which
	// the collector counts in no state.
	ClassIgnored
	numClasses
)

// ClassValues are the SQL values ClassExpr yields, by Class.
type ClassValues [numClasses]int

// ClassExpr is an SQL expression giving the class of a row of o by the
// rules of Rules.Classify, as the value vals holds for it; q prefixes the
// column names ("t." or ""). Status values are inlined as literals, typed
// by the column as the collector's queries have them.
func ClassExpr(o *config.Outbox, q string, vals ClassValues) string {
	v := func(c Class) string { return strconv.Itoa(vals[c]) }
	in := func(list []string) string {
		lits := make([]string, len(list))
		for i, s := range list {
			lits[i] = pg.Literal(s)
		}
		return q + pg.Ident(o.Status) + " IN (" + strings.Join(lits, ", ") + ")"
	}
	var b strings.Builder
	b.WriteString("CASE")
	switch o.Style() {
	case config.StyleStatus:
		if len(o.Published) > 0 {
			b.WriteString(" WHEN " + in(o.Published) + " THEN " + v(ClassPublished))
		}
		if len(o.Dead) > 0 {
			b.WriteString(" WHEN " + in(o.Dead) + " THEN " + v(ClassDead))
		}
		if u := dedupe(o.Pending, o.InFlight, o.Unknown); len(u) > 0 {
			b.WriteString(" WHEN " + in(u) + " THEN " + v(ClassUnpublished))
		}
		b.WriteString(" ELSE " + v(ClassIgnored) + " END")
	case config.StyleTimestamps:
		if o.PublishedAt != "" {
			b.WriteString(" WHEN " + q + pg.Ident(o.PublishedAt) + " IS NOT NULL THEN " + v(ClassPublished))
		}
		if o.DeadAt != "" {
			b.WriteString(" WHEN " + q + pg.Ident(o.DeadAt) + " IS NOT NULL THEN " + v(ClassDead))
		}
		b.WriteString(" ELSE " + v(ClassUnpublished) + " END")
	default:
		return v(ClassUnpublished)
	}
	return b.String()
}

// ClassOf folds a state of Classify into its Class.
func ClassOf(s State) Class {
	switch s {
	case Published:
		return ClassPublished
	case Dead:
		return ClassDead
	case Ignored:
		return ClassIgnored
	}
	return ClassUnpublished
}
