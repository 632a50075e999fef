package outboxsql

import (
	"strings"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// sqlRules writes the state rules of Rules.Classify as SQL predicates:
// the one SQL copy of them, which the collector's queries, its partial
// indexes, ClassExpr (the audit and reconcile) all build on.
// TestPredicatesAgreeWithClassify compares it with Classify on the real
// server for every combination of facts.
type sqlRules struct {
	o *config.Outbox
	// q prefixes the column names ("t." or "").
	q string
	// lit writes one configured status value as an SQL literal.
	lit func(string) string
}

func (r sqlRules) col(c string) string { return r.q + pg.Ident(c) }

func (r sqlRules) in(vals []string) string {
	lits := make([]string, len(vals))
	for i, v := range vals {
		lits[i] = r.lit(v)
	}
	return r.col(r.o.Status) + " IN (" + strings.Join(lits, ",") + ")"
}

// claimColumn is the column whose being set means a row was claimed:
// claimed_at, else lease_until; "" without either.
func claimColumn(o *config.Outbox) string {
	if o.ClaimedAt != "" {
		return o.ClaimedAt
	}
	return o.LeaseUntil
}

// unpublished is the condition of rows neither published nor dead; ""
// for a delete-on-publish table, where every row is unpublished.
func (r sqlRules) unpublished() string {
	o := r.o
	switch o.Style() {
	case config.StyleStatus:
		return r.in(unpublishedStatuses(o))
	case config.StyleTimestamps:
		var p []string
		if o.PublishedAt != "" {
			p = append(p, r.col(o.PublishedAt)+" IS NULL")
		}
		if o.DeadAt != "" {
			p = append(p, r.col(o.DeadAt)+" IS NULL")
		}
		return strings.Join(p, " AND ")
	}
	return ""
}

// published is the condition of published rows; "" when a row is never
// seen published (a delete-on-publish table).
func (r sqlRules) published() string {
	o := r.o
	switch o.Style() {
	case config.StyleStatus:
		if len(o.Published) > 0 {
			return r.in(o.Published)
		}
	case config.StyleTimestamps:
		if o.PublishedAt != "" {
			return r.col(o.PublishedAt) + " IS NOT NULL"
		}
	}
	return ""
}

// dead is the condition of dead rows, "" when the outbox has no way to
// mark a row dead.
func (r sqlRules) dead() string {
	o := r.o
	switch o.Style() {
	case config.StyleStatus:
		if len(o.Dead) > 0 {
			return r.in(o.Dead)
		}
	case config.StyleTimestamps:
		if o.DeadAt != "" {
			p := r.col(o.DeadAt) + " IS NOT NULL"
			if o.PublishedAt != "" {
				p += " AND " + r.col(o.PublishedAt) + " IS NULL"
			}
			return p
		}
	}
	return ""
}

// claimed is, among unpublished rows, the condition of claimed ones
// (InFlight or LeaseExpired); "" when no row is ever claimed. It is
// NULL-safe on unpublished rows, so NOT claimed is the pending rows.
func (r sqlRules) claimed() string {
	o := r.o
	cc := claimColumn(o)
	var p []string
	if o.Style() == config.StyleStatus {
		if cs := claimedStatuses(o); len(cs) > 0 {
			p = append(p, r.in(cs))
		}
		if len(o.InFlight) > 0 {
			// The status alone decides.
			cc = ""
		}
	}
	if cc != "" {
		p = append(p, r.col(cc)+" IS NOT NULL")
	}
	if len(p) > 1 {
		return "(" + strings.Join(p, " OR ") + ")"
	}
	return strings.Join(p, "")
}

// unclassified is the condition of rows in no state: a NULL status or
// one listed nowhere; "" when every row has a state.
func (r sqlRules) unclassified() string {
	o := r.o
	if o.Style() != config.StyleStatus {
		return ""
	}
	all := dedupe(o.Pending, o.InFlight, o.Published, o.Dead, o.Unknown)
	return "(" + r.col(o.Status) + " IS NULL OR NOT " + r.in(all) + ")"
}

// unpublishedStatuses are the status values of unpublished rows: pending,
// in_flight and those listed only under unknown, in config order.
func unpublishedStatuses(o *config.Outbox) []string {
	return dedupe(o.Pending, o.InFlight, unknownOnly(o))
}

// claimedStatuses are in_flight and unknown-only values.
func claimedStatuses(o *config.Outbox) []string {
	return dedupe(o.InFlight, unknownOnly(o))
}

// unknownPending are the unknown values also listed under pending: the
// only way an unclaimed row has an unknown result by its status.
func unknownPending(o *config.Outbox) []string {
	var out []string
	for _, v := range o.Unknown {
		if contains(o.Pending, v) && !contains(o.InFlight, v) {
			out = append(out, v)
		}
	}
	return out
}

func unknownOnly(o *config.Outbox) []string {
	var out []string
	for _, v := range o.Unknown {
		if !contains(o.Pending, v) && !contains(o.InFlight, v) && !contains(o.Published, v) && !contains(o.Dead, v) {
			out = append(out, v)
		}
	}
	return out
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func dedupe(sets ...[]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, set := range sets {
		for _, v := range set {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// and joins the non-empty predicates with AND; "" when none.
func and(preds ...string) string {
	var p []string
	for _, x := range preds {
		if x != "" {
			p = append(p, x)
		}
	}
	return strings.Join(p, " AND ")
}

// not negates a predicate; "" (no condition, i.e. never true, as claimed
// and unclassified use it) becomes "".
func not(pred string) string {
	if pred == "" {
		return ""
	}
	return "NOT " + pred
}
