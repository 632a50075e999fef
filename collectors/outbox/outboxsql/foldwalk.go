package outboxsql

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// LabelFold is how the series cap folds a row's label values into its
// series, as FoldOldestQuery tests it in SQL on the values as the
// state-shaped queries return them (text, NULL as ""): each column keeps
// the values it admitted (the first also its pinned ones) and folds the
// others into Other; a combination of those column values keeps them
// when admitted (Tuples), else it becomes (its first value if pinned,
// else Other, then Other throughout). With one label only the column
// folds.
type LabelFold struct {
	Other string
	// Keep are, per label column, the values that keep their own
	// value in that column.
	Keep [][]string
	// Pinned are the first column's values that keep their value in a
	// combination not admitted.
	Pinned []string
	// Tuples are the admitted combinations of column values.
	Tuples [][]string
}

// FoldOldestQuery is the state query over, for each series of targets
// (its label values as the cap folds them), the oldest unpublished row
// that folds into it, read in created_at order through the oldest index
// and filtered by the fold (an index-only scan: the label columns are
// included), from the age since (inclusive; the whole index when since
// is negative). Each series costs the index entries from since up to its
// oldest row, or to the end when it has none. It completes the capped
// reads when the per combination skip-scan stopped after
// MaxOldestTuples combinations and more rows than the read past it
// took were older than a series' oldest row found so far: the series'
// oldest age is then exact at any number of combinations. Targets that
// no row can fold into are left out; "" when none is left, without
// labels, or without created_at. The values are inlined: run it
// unprepared.
//
// Columns: those of StateQuery.
func (s *Spec) FoldOldestQuery(f LabelFold, targets [][]string, since float64) string {
	if s.O.NoCreatedAt() || len(s.O.Labels) == 0 {
		return ""
	}
	sh := s.stateShape()
	conds := []string{s.unpublished()}
	if since >= 0 {
		d := time.Duration(since * float64(time.Second))
		conds = append(conds, col(s.O.CreatedAt)+" >= (SELECT "+s.bound(s.O.CreatedAt, ReadNow+" - "+interval(d))+")")
	}
	var reads []string
	for _, t := range targets {
		c := s.foldsInto(f, t)
		if c == "" {
			continue
		}
		reads = append(reads, fmt.Sprintf("(SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT 1)", strings.Join(sh.inner, ", "),
			s.table, s.where(append(slices.Clone(conds), c)...), col(s.O.CreatedAt)))
	}
	if len(reads) == 0 {
		return ""
	}
	return sh.aggregate(strings.Join(reads, "\n  UNION ALL\n  "))
}

// foldsInto is the condition that a row folds into the series t; ""
// when no row can.
func (s *Spec) foldsInto(f LabelFold, t []string) string {
	n := len(s.O.Labels)
	if len(t) != n || len(f.Keep) != n {
		return ""
	}
	folded := make([]string, n)
	for i := range n {
		folded[i] = s.foldedLabel(f, i)
	}
	if n == 1 {
		return folded[0] + " = " + literal(t[0])
	}
	var alts []string
	if slices.ContainsFunc(f.Tuples, func(x []string) bool { return slices.Equal(x, t) }) {
		alts = append(alts, "("+strings.Join(folded, ", ")+") = ("+literalList(t)+")")
	}
	restOther := !slices.ContainsFunc(t[1:], func(v string) bool { return v != f.Other })
	pinned := slices.Contains(f.Pinned, t[0]) && t[0] != f.Other
	if restOther && (t[0] == f.Other || pinned) {
		var c []string
		if len(f.Tuples) > 0 {
			var rows []string
			for _, x := range f.Tuples {
				rows = append(rows, "("+literalList(x)+")")
			}
			c = append(c, "("+strings.Join(folded, ", ")+") NOT IN (VALUES "+strings.Join(rows, ", ")+")")
		}
		if pinned {
			c = append(c, s.labelText(0)+" = "+literal(t[0]))
		} else if ps := without(f.Pinned, f.Other); len(ps) > 0 {
			c = append(c, s.labelText(0)+" NOT IN ("+literalList(ps)+")")
		}
		if len(c) == 0 {
			c = []string{"TRUE"}
		}
		alts = append(alts, "("+strings.Join(c, " AND ")+")")
	}
	if len(alts) == 0 {
		return ""
	}
	return "(" + strings.Join(alts, " OR ") + ")"
}

// labelText is label column i's value as the state-shaped queries
// return it: text, NULL as "".
func (s *Spec) labelText(i int) string {
	return "coalesce((" + col(s.O.Labels[i].Column) + ")::text, '')"
}

// foldedLabel is label column i's value folded by f's column cap.
func (s *Spec) foldedLabel(f LabelFold, i int) string {
	keep := without(f.Keep[i], f.Other)
	if len(keep) == 0 {
		return literal(f.Other)
	}
	e := s.labelText(i)
	return "(CASE WHEN " + e + " IN (" + literalList(keep) + ") THEN " + e + " ELSE " + literal(f.Other) + " END)"
}

// literalList is vals as a comma-separated list of text literals.
func literalList(vals []string) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = literal(v) + "::text"
	}
	return strings.Join(out, ", ")
}

// without is vals less v, sorted (a stable query text for equal sets).
func without(vals []string, v string) []string {
	out := slices.DeleteFunc(slices.Clone(vals), func(x string) bool { return x == v })
	slices.Sort(out)
	return out
}
