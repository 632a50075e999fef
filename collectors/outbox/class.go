package outbox

import (
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Class is what a row's columns alone say about it, without a lease to
// judge: the part of Classify the audit and reconcile need, computed by
// the server for each row they read (outboxsql.ClassExpr).
type Class = outboxsql.Class

// ClassValues are the SQL values ClassExpr yields, by Class.
type ClassValues = outboxsql.ClassValues

// Classes, as Classify's states fold into them.
const (
	ClassUnpublished = outboxsql.ClassUnpublished
	ClassPublished   = outboxsql.ClassPublished
	ClassDead        = outboxsql.ClassDead
	ClassIgnored     = outboxsql.ClassIgnored
)

// ClassExpr is an SQL expression giving the class of a row of o, as the
// value vals holds for it; q prefixes the column names ("t." or "").
func ClassExpr(o *config.Outbox, q string, vals ClassValues) string {
	return outboxsql.ClassExpr(o, q, vals)
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
