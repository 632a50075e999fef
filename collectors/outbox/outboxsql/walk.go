package outboxsql

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The capped reads of the unpublished rows. When more rows are
// unpublished than max_count, the collector cannot count them all; it
// still owes every series its exact oldest age, and those ages are what
// on-call pages on. The oldest rows of the whole outbox are found by
// walking the index on created_at alone ("oldest"): the first row the
// walk meets of a series is that series' oldest row, whatever the number
// of label combinations. The state query is that walk: it reads its
// MaxCount+1 rows oldest first. The series the walk meets none of are read
// apart: those of a deadline override (OverridesQuery, known from the
// config), then the admitted combinations (ProbeQuery), and only when a
// series folded into "other" is left the per combination skip-scan
// (PendingQuery).

// Overrides are the first label's values with a deadline override,
// sorted.
func (s *Spec) Overrides() []string {
	if len(s.O.Labels) == 0 {
		return nil
	}
	var out []string
	for v := range s.O.Deadlines {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// OverridesQuery is the state query over, for each value with a deadline
// override, its MaxCount oldest unpublished rows: the series with a
// deadline of their own are read directly, so they exist with their exact
// oldest age and past-deadline count (exact up to MaxCount rows) even
// when the walk met none of their rows. "" without overrides.
//
// Columns: those of StateQuery.
func (s *Spec) OverridesQuery() string {
	vals := s.Overrides()
	if len(vals) == 0 {
		return ""
	}
	sh := s.stateShape()
	inner := strings.Join(sh.inner, ", ")
	first := s.O.Labels[0].Column
	var reads []string
	for _, v := range vals {
		reads = append(reads, fmt.Sprintf("(SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d)", inner, s.table,
			s.where(s.unpublished(), s.valueIs(first, v, true)), col(s.OrderColumn()), s.O.MaxCount))
	}
	return sh.aggregate(strings.Join(reads, "\n  UNION ALL\n  "))
}

// ProbeQuery is the state query over, for each combination of label
// values (as the state-shaped queries return them: NULL as ""), its k
// oldest unclaimed unpublished rows (its k oldest unpublished rows, claimed
// or not, with claimed), through the unpublished index (one range each).
// The values are inlined as literals, so the query text changes with
// them: run it unprepared. "" without combinations.
//
// Columns: those of StateQuery.
func (s *Spec) ProbeQuery(combos [][]string, k int, claimed bool) string {
	if len(combos) == 0 {
		return ""
	}
	sh := s.stateShape()
	inner := strings.Join(sh.inner, ", ")
	return sh.aggregate(s.byCombos(combos, func(labels []string) string {
		conds := []string{s.unpublished()}
		if !claimed {
			conds = append(conds, not(s.ClaimedPredicate()))
		}
		return fmt.Sprintf("SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d", inner, s.table,
			s.where(append(conds, labels...)...), col(s.OrderColumn()), max(k, 1))
	}))
}

// valueIs is the condition that column c holds v as text. A string
// column is compared with the literal, an index condition; another type
// is compared as text when v comes from the config (it may not be a
// value of the type), and with the literal, converted by the server, when
// v was read from the column. "" stands for NULL too in a nullable
// column, as the state-shaped queries return NULL as "".
func (s *Spec) valueIs(c, v string, fromConfig bool) string {
	info := s.cols[c]
	eq := col(c) + " = " + literal(v)
	switch {
	case info.Category != "S" && fromConfig:
		eq = col(c) + "::text = " + literal(v)
	case info.Category != "S" && v == "":
		eq = "FALSE"
	}
	if v == "" && !info.NotNull {
		return "(" + col(c) + " IS NULL OR " + eq + ")"
	}
	return eq
}

// literal quotes v as an escape string literal, whatever the session's
// standard_conforming_strings.
func literal(v string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(v) + "'"
}

// OldestQuery finds the age of the oldest unpublished row per label
// combination exactly, whatever the backlog: a recursive skip-scan that
// takes one row per combination from an index on (labels..., created_at),
// instead of reading every row; combinations with a NULL label value
// are visited like the others. Without labels it is a min() that an
// index on created_at answers from its first entry. It runs, with
// PendingQuery, only when the capped walk in time order cannot cover
// every series: its cost grows with the number of combinations, and it
// stops after MaxOldestTuples of them.
//
// Columns: labels..., oldest age seconds. "" without created_at.
func (s *Spec) OldestQuery() string {
	if s.O.NoCreatedAt() {
		return ""
	}
	up := s.unpublished()
	labels := s.O.Labels
	if len(labels) == 0 {
		// min() of the column itself, converted afterwards: a conversion
		// inside min() defeats the index.
		return fmt.Sprintf(`SELECT coalesce(extract(epoch from `+ReadNow+` - %s)::float8, 0) FROM %s t WHERE %s`,
			s.tz(s.O.CreatedAt, "min("+col(s.O.CreatedAt)+")"), s.table, s.where(up))
	}
	outs := make([]string, len(labels))
	for i := range labels {
		outs[i] = "r.l" + strconv.Itoa(i) + "::text"
	}
	return fmt.Sprintf(`%s
SELECT %s, extract(epoch from `+ReadNow+` - %s)::float8 FROM r LIMIT %d`,
		s.skipScan(up, col(s.O.CreatedAt)), strings.Join(outs, ", "), s.tz(s.O.CreatedAt, "r.cr"), MaxOldestTuples)
}
