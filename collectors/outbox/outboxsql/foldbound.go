package outboxsql

import (
	"fmt"
	"strings"
	"time"
)

// FoldBoundedQuery is FoldOldestQuery for series no row was found of at
// all (a combination kept from earlier scrapes whose rows are gone, as a
// backlog drains), with a bounded cost: it reads at most limit index
// entries, and count tells whether there were more. When every target's
// first value is first (not Other: every row folding into them holds
// that value first), the entries are those of first's whole range of the
// unpublished index (label columns first), usually a few or none (not
// on an offsets table, which has no such index); else
// the oldest entries by time from the age since, through the oldest
// index. Of those entries, it returns the oldest that folds into each
// target. When count returns more than limit, the read stopped early:
// a target it found in first's range, or did not find at all, may have
// an older row than it returned (its oldest age is then a lower bound);
// a target it found by time has its exact oldest row. "" without
// targets, labels or created_at. The values are inlined: run them
// unprepared.
//
// Columns: those of StateQuery; count's, one int8.
func (s *Spec) FoldBoundedQuery(f LabelFold, targets [][]string, first string, since float64, limit int) (query, count string) {
	n := len(s.O.Labels)
	if s.O.NoCreatedAt() || n == 0 || len(f.Keep) != n || len(targets) == 0 || limit < 1 {
		return "", ""
	}
	var keys []string
	for _, t := range targets {
		if len(t) == n {
			keys = append(keys, literal(FoldKey(t)))
		}
	}
	if len(keys) == 0 {
		return "", ""
	}
	ca := col(s.O.CreatedAt)
	conds := []string{s.unpublished()}
	order := ca
	if first != f.Other && first != "" && s.O.OffsetsTable == "" {
		// In the order of the unpublished index, so that LIMIT stops
		// the range scan, whatever the planner estimates; from the
		// range's start, as since would be a filter there, not a bound
		// (the entries it passed would not count).
		conds = append(conds, s.valueIs(s.O.Labels[0].Column, first, false))
		var cols []string
		for _, l := range s.O.Labels {
			cols = append(cols, col(l.Column))
		}
		order = strings.Join(append(cols, col(s.OrderColumn())), ", ")
	} else if since >= 0 {
		d := time.Duration(since * float64(time.Second))
		conds = append(conds, ca+" >= (SELECT "+s.bound(s.O.CreatedAt, ReadNow+" - "+interval(d))+")")
	}
	sh := s.stateShape()
	entries := fmt.Sprintf("SELECT %s, %s AS k FROM %s t WHERE %s ORDER BY %s LIMIT %d",
		strings.Join(sh.inner, ", "), s.foldKeyExpr(f), s.table, s.where(conds...), order, limit)
	query = sh.aggregate(fmt.Sprintf("SELECT DISTINCT ON (x.k) x.* FROM (%s) x WHERE x.k = ANY(ARRAY[%s]::text[]) ORDER BY x.k, x.cr",
		entries, strings.Join(keys, ", ")))
	count = fmt.Sprintf("SELECT count(*)::int8 FROM (SELECT 1 FROM %s t WHERE %s ORDER BY %s LIMIT %d) x",
		s.table, s.where(conds...), order, limit+1)
	return query, count
}
