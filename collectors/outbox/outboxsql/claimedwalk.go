package outboxsql

import (
	"fmt"
	"strings"
)

// The capped reads of the claimed rows. When more rows are claimed than
// max_count (a relay holding a huge batch), each part of them
// (ClaimedParts, and apart the claimed rows with an unknown result) is
// walked in the order of the lease index, earliest lease first: one
// bounded range whatever the number of label combinations. A walk that
// ends before its part does leaves unread the series it met no row of;
// those are read apart, an admitted combination or a value with a
// deadline override by a range of its own (ClaimedProbeQuery), and only
// a series folded into "other" that no walk met by the per combination
// skip-scans (ClaimedCappedQuery, ClaimedUnknownQuery).

// ClaimedUnknownPart is, among claimed rows, the condition of an unknown
// result; "" when a claimed row never has one.
func (s *Spec) ClaimedUnknownPart() string { return s.claimedUnknown() }

// ClaimedBudget is how many rows each read of the claimed rows takes
// while they are capped: MaxCount shared among the parts, at least 1.
func (s *Spec) ClaimedBudget() int { return max(s.O.MaxCount/s.claimedReads(), 1) }

// ClaimedWalkQuery is the state query over the first k+1 claimed rows
// matching part (one of ClaimedParts or ClaimedUnknownPart), in the
// order of the lease index: more than k rows read means the walk ended
// before the part did. "" when no row is ever claimed.
//
// Columns: those of StateQuery.
func (s *Spec) ClaimedWalkQuery(part string, k int) string {
	cl := s.ClaimedPredicate()
	if cl == "" {
		return ""
	}
	sh := s.stateShape()
	return sh.aggregate(fmt.Sprintf("SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d",
		strings.Join(sh.inner, ", "), s.table, s.where(s.unpublished(), cl, part), col(s.claimedOrder()), max(k, 1)+1))
}

// ClaimedProbeQuery is the state query over, for each combination of
// label values (as the state-shaped queries return them: NULL as ""),
// its k earliest claimed rows matching part, and for each first label
// value of firsts its k+1 earliest: one range each of the claimed index
// by label. The values are inlined as literals: run it unprepared. ""
// without combinations or values, or when no row is ever claimed.
//
// Columns: those of StateQuery.
func (s *Spec) ClaimedProbeQuery(combos [][]string, firsts []string, part string, k int) string {
	cl := s.ClaimedPredicate()
	if cl == "" || len(combos)+len(firsts) == 0 || len(s.O.Labels) == 0 {
		return ""
	}
	sh := s.stateShape()
	inner := strings.Join(sh.inner, ", ")
	read := func(conds []string, limit int) string {
		return fmt.Sprintf("SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d", inner, s.table,
			s.where(append([]string{s.unpublished(), cl, part}, conds...)...), col(s.claimedOrder()), limit)
	}
	var reads []string
	if len(combos) > 0 {
		reads = append(reads, s.byCombos(combos, func(conds []string) string { return read(conds, max(k, 1)) }))
	}
	for _, v := range firsts {
		reads = append(reads, "("+read([]string{s.valueIs(s.O.Labels[0].Column, v, true)}, max(k, 1)+1)+")")
	}
	return sh.aggregate(strings.Join(reads, "\n  UNION ALL\n  "))
}
