package outboxsql

import (
	"fmt"
	"strconv"
	"strings"
)

// labelNullable reports whether label column i may hold NULL: the
// catalog does not declare it NOT NULL. Only such columns cost the
// NULL-aware branches below.
func (s *Spec) labelNullable(i int) bool { return !s.cols[s.O.Labels[i].Column].NotNull }

// labelMatches are the ways the label columns of t can equal the first n
// values of a combination of alias p (columns p.l0, p.l1, ...), NULL
// included: one list of conditions per NULL pattern of the nullable
// columns. A NULL value matches only through IS NULL, since `t.c = NULL`
// is never true and IS NOT DISTINCT FROM is no index condition; each
// variant is guarded by the NULL-ness of p's values, a condition on the
// outer row alone that PostgreSQL evaluates once (a one-time filter), so
// exactly one variant reads the index and the others cost nothing.
func (s *Spec) labelMatches(p string, n int) [][]string {
	out := [][]string{nil}
	for i := 0; i < n; i++ {
		c, v := col(s.O.Labels[i].Column), p+".l"+strconv.Itoa(i)
		var next [][]string
		for _, conds := range out {
			next = append(next, append(append([]string{}, conds...), c+" = "+v))
			if s.labelNullable(i) {
				next = append(next, append(append([]string{}, conds...), v+" IS NULL", c+" IS NULL"))
			}
		}
		out = next
	}
	return out
}

// perMatch is the UNION ALL of one read per variant of labelMatches(p,
// all labels): read(conds) is the read of the rows of one combination.
func (s *Spec) perMatch(p string, read func(conds []string) string) string {
	var reads []string
	for _, m := range s.labelMatches(p, len(s.O.Labels)) {
		reads = append(reads, read(m))
	}
	return strings.Join(reads, "\n    UNION ALL\n    ")
}

// skipScan is a recursive CTE r(l0, ..., [cr]) that visits each
// combination of label values among the rows matching pred once, NULLs
// included (with its first value of tail, a column expression, in cr
// when tail is not ""): each step is one descent of an index on
// (labels..., tail) to the first entry past the previous combination.
func (s *Spec) skipScan(pred, tail string) string {
	labels := s.O.Labels
	cols := make([]string, len(labels))
	sel := make([]string, len(labels))
	for i, l := range labels {
		cols[i] = col(l.Column)
		sel[i] = cols[i] + " AS l" + strconv.Itoa(i)
	}
	selList := strings.Join(sel, ", ")
	order := strings.Join(cols, ", ")
	if tail != "" {
		selList += ", " + tail + " AS cr"
		order += ", " + tail
	}
	first := fmt.Sprintf("SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT 1", selList, s.table, s.where(pred), order)
	var steps []string
	for _, past := range s.pastCombo() {
		steps = append(steps, fmt.Sprintf("(SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT 1)",
			selList, s.table, s.where(append([]string{pred}, past...)...), order))
	}
	step := steps[0]
	if len(steps) > 1 {
		// The branches are in index order and PostgreSQL's Append runs
		// them in turn, so LIMIT 1 stops at the first that has a row:
		// usually the first or second, one index descent each.
		step = "SELECT * FROM (\n    " + strings.Join(steps, "\n    UNION ALL\n    ") + "\n  ) b LIMIT 1"
	}
	return fmt.Sprintf(`WITH RECURSIVE r AS (
  (%s)
  UNION ALL
  SELECT n.* FROM r, LATERAL (%s) n
)`, first, step)
}

// pastCombo are the ranges of the index past the combination r, in index
// order (ascending, NULLS LAST like the index), as lists of conditions.
// Without a nullable label it is one row comparison. Otherwise, from the
// last column to the first: the rows equal to r on the columns before j
// and greater on column j, then those equal before j and NULL at j when
// r's value at j is not NULL (NULL sorts after every value). Equality
// before j is labelMatches', so a NULL in r is stepped past as well.
func (s *Spec) pastCombo() [][]string {
	labels := s.O.Labels
	nullable := false
	for i := range labels {
		nullable = nullable || s.labelNullable(i)
	}
	if !nullable {
		cols := make([]string, len(labels))
		prev := make([]string, len(labels))
		for i, l := range labels {
			cols[i] = col(l.Column)
			prev[i] = "r.l" + strconv.Itoa(i)
		}
		if len(labels) == 1 {
			return [][]string{{cols[0] + " > " + prev[0]}}
		}
		return [][]string{{"(" + strings.Join(cols, ", ") + ") > (" + strings.Join(prev, ", ") + ")"}}
	}
	var out [][]string
	for j := len(labels) - 1; j >= 0; j-- {
		c, v := col(labels[j].Column), "r.l"+strconv.Itoa(j)
		for _, m := range s.labelMatches("r", j) {
			out = append(out, append(append([]string{}, m...), c+" > "+v))
			if s.labelNullable(j) {
				out = append(out, append(append([]string{}, m...), v+" IS NOT NULL", c+" IS NULL"))
			}
		}
	}
	return out
}
