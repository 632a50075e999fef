package outboxsql

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
// that folds into it. It is one walk in created_at order through the
// oldest index (an index-only scan: the label columns are included),
// from the age since (inclusive; from the first entry when since is
// negative) to the age until (inclusive; to the last entry when until is
// negative): a recursive query whose each step is one descent to the
// first row at or after the previous one that folds into a series not
// met yet (the fold computed in SQL as FoldKey computes it, compared as
// an encoded key), ending when every series was met. Its cost is the
// index entries between since and the last series' oldest row. It
// completes the capped reads when the per combination skip-scan stopped
// after MaxOldestTuples combinations and more rows than the read past
// it took were older than a series' oldest row found so far: every
// series' oldest age is then exact at any number of combinations. ""
// without targets, labels or created_at. The values are inlined: run
// it unprepared.
//
// Columns: those of StateQuery.
func (s *Spec) FoldOldestQuery(f LabelFold, targets [][]string, since, until float64) string {
	n := len(s.O.Labels)
	if s.O.NoCreatedAt() || n == 0 || len(f.Keep) != n || len(targets) == 0 {
		return ""
	}
	sh := s.stateShape()
	var keys, aliases []string
	for _, t := range targets {
		if len(t) == n {
			keys = append(keys, literal(FoldKey(t)))
		}
	}
	for _, x := range sh.inner {
		aliases = append(aliases, x[strings.LastIndex(x, " AS ")+4:])
	}
	ca := col(s.O.CreatedAt)
	conds := []string{s.unpublished()}
	if until >= 0 {
		d := time.Duration(until * float64(time.Second))
		conds = append(conds, ca+" <= (SELECT "+s.bound(s.O.CreatedAt, ReadNow+" - "+interval(d))+")")
	}
	first := slices.Clone(conds)
	if since >= 0 {
		d := time.Duration(since * float64(time.Second))
		first = append(first, ca+" >= (SELECT "+s.bound(s.O.CreatedAt, ReadNow+" - "+interval(d))+")")
	}
	key := s.foldKeyExpr(f)
	if pre := s.foldPrefilter(f, targets); pre != "" {
		conds = append(conds, pre)
		first = append(first, pre)
	}
	all := "ARRAY[" + strings.Join(keys, ", ") + "]::text[]"
	sel := strings.Join(sh.inner, ", ") + ", " + key + " AS k"
	walk := fmt.Sprintf(`WITH RECURSIVE w AS (
  (SELECT %[1]s, array_remove(%[2]s, %[3]s) AS rest FROM %[4]s t WHERE %[5]s ORDER BY %[6]s LIMIT 1)
  UNION ALL
  SELECT n.* FROM w, LATERAL (SELECT %[1]s, array_remove(w.rest, %[3]s) AS rest FROM %[4]s t WHERE %[7]s ORDER BY %[6]s LIMIT 1) n
  WHERE cardinality(w.rest) > 0
)
SELECT %[8]s FROM w`, sel, all, key, s.table, s.where(append(first, key+" = ANY("+all+")")...), ca,
		s.where(append(conds, ca+" >= w.cr", key+" = ANY(w.rest)")...), strings.Join(aliases, ", "))
	return sh.aggregate(walk)
}

// FoldKey encodes the label values of a series as foldKeyExpr does in
// SQL: each value's length in characters, a colon, the value.
func FoldKey(vals []string) string {
	var b strings.Builder
	for _, v := range vals {
		b.WriteString(strconv.Itoa(utf8.RuneCountInString(v)) + ":" + v)
	}
	return b.String()
}

// foldKeyExpr is the encoded key (FoldKey) of the series a row folds
// into by f: the combination of its column-folded values when admitted,
// else (its first value if pinned, else Other, then Other throughout);
// with one label, the column-folded value.
func (s *Spec) foldKeyExpr(f LabelFold) string {
	n := len(s.O.Labels)
	enc := func(x string) string { return "length(" + x + ")::text || ':' || " + x }
	folded := make([]string, n)
	encoded := make([]string, n)
	for i := range n {
		folded[i] = s.foldedLabel(f, i)
		encoded[i] = enc(folded[i])
	}
	if n == 1 {
		return "(" + encoded[0] + ")"
	}
	first := literal(f.Other)
	if ps := without(f.Pinned, f.Other); len(ps) > 0 {
		e := s.labelText(0)
		first = "(CASE WHEN " + e + " IN (" + literalList(ps) + ") THEN " + e + " ELSE " + literal(f.Other) + " END)"
	}
	rest := []string{enc(first)}
	for i := 1; i < n; i++ {
		rest = append(rest, literal(strconv.Itoa(utf8.RuneCountInString(f.Other))+":"+f.Other))
	}
	notAdmitted := "(" + strings.Join(rest, " || ") + ")"
	if len(f.Tuples) == 0 {
		return notAdmitted
	}
	var rows []string
	for _, x := range f.Tuples {
		rows = append(rows, "("+literalList(x)+")")
	}
	return "(CASE WHEN (" + strings.Join(folded, ", ") + ") IN (VALUES " + strings.Join(rows, ", ") + ") THEN " +
		strings.Join(encoded, " || ") + " ELSE " + notAdmitted + " END)"
}

// foldPrefilter is a condition every row folding into one of targets
// meets, far cheaper than the fold itself, so that the walk passes the
// rows of other series at the cost of a comparison or two: for a few
// targets, each target's values other than Other (an admitted
// combination holds those values, a combination not admitted its
// pinned first value, or else a first value not pinned); for more, the
// same on the first value alone. And a row whose values are an
// admitted combination of kept values keeps its own series (not a
// target here). "" when it would let every row through.
func (s *Spec) foldPrefilter(f LabelFold, targets [][]string) string {
	n := len(s.O.Labels)
	var conds []string
	if len(targets) <= maxTargetPrefilter {
		if c := s.targetPrefilter(f, targets); c != "" {
			conds = append(conds, c)
		}
	} else if c := s.firstPrefilter(f, targets); c != "" {
		conds = append(conds, c)
	}
	var pure []string
	for _, x := range f.Tuples {
		ok := len(x) == n && !slices.ContainsFunc(targets, func(t []string) bool { return slices.Equal(t, x) })
		for i := 0; ok && i < n; i++ {
			ok = x[i] != f.Other && slices.Contains(f.Keep[i], x[i])
		}
		if ok {
			pure = append(pure, "("+literalList(x)+")")
		}
	}
	if len(pure) > 0 {
		vals := make([]string, n)
		for i := range n {
			vals[i] = s.labelText(i)
		}
		conds = append(conds, "("+strings.Join(vals, ", ")+") NOT IN (VALUES "+strings.Join(pure, ", ")+")")
	}
	return strings.Join(conds, " AND ")
}

// maxTargetPrefilter is how many targets the prefilter tests one by one
// (an OR of their conditions, evaluated in turn); past it, only their
// first values are tested, in one hashed list.
const maxTargetPrefilter = 8

// targetPrefilter is the OR of each target's necessary condition; ""
// when one lets every row through.
func (s *Spec) targetPrefilter(f LabelFold, targets [][]string) string {
	ps := without(f.Pinned, f.Other)
	var alts []string
	for _, t := range targets {
		var forms [][]string
		if len(t) == 1 {
			// One label: the column fold alone.
			forms = append(forms, nil)
			if keep := without(f.Keep[0], f.Other); t[0] == f.Other && len(keep) > 0 {
				forms[0] = []string{s.labelText(0) + " NOT IN (" + literalList(keep) + ")"}
			} else if t[0] != f.Other {
				forms[0] = []string{s.labelText(0) + " = " + literal(t[0])}
			}
		} else if slices.ContainsFunc(f.Tuples, func(x []string) bool { return slices.Equal(x, t) }) {
			var c []string
			for i, v := range t {
				if v != f.Other {
					c = append(c, s.labelText(i)+" = "+literal(v))
				}
			}
			forms = append(forms, c)
		}
		if len(t) > 1 && !slices.ContainsFunc(t[1:], func(v string) bool { return v != f.Other }) {
			switch {
			case t[0] != f.Other && slices.Contains(f.Pinned, t[0]):
				forms = append(forms, []string{s.labelText(0) + " = " + literal(t[0])})
			case t[0] == f.Other && len(ps) > 0:
				forms = append(forms, []string{s.labelText(0) + " NOT IN (" + literalList(ps) + ")"})
			case t[0] == f.Other:
				forms = append(forms, nil)
			}
		}
		for _, c := range forms {
			if len(c) == 0 {
				return ""
			}
			alts = append(alts, "("+strings.Join(c, " AND ")+")")
		}
	}
	if len(alts) == 0 {
		return "FALSE"
	}
	return "(" + strings.Join(alts, " OR ") + ")"
}

// firstPrefilter is the targets' necessary condition on the first
// value alone: one of their first values other than Other, or, when one
// of them has Other there, a first value not pinned; "" when it lets
// every row through.
func (s *Spec) firstPrefilter(f LabelFold, targets [][]string) string {
	var firsts []string
	anyOther := false
	for _, t := range targets {
		if t[0] == f.Other {
			anyOther = true
		} else if !slices.Contains(firsts, t[0]) {
			firsts = append(firsts, t[0])
		}
	}
	slices.Sort(firsts)
	e0 := s.labelText(0)
	ps := without(f.Pinned, f.Other)
	switch {
	case anyOther && len(ps) > 0 && len(firsts) > 0:
		return "(" + e0 + " NOT IN (" + literalList(ps) + ") OR " + e0 + " IN (" + literalList(firsts) + "))"
	case !anyOther && len(firsts) > 0:
		return e0 + " IN (" + literalList(firsts) + ")"
	case anyOther && len(ps) > 0:
		return e0 + " NOT IN (" + literalList(ps) + ")"
	}
	return ""
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
