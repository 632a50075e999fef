package outboxsql

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// stateShape is the SELECT of the state-shaped queries: inner passes the
// columns a row's facts are decided from on (an index-only scan of the
// unpublished index when it includes them); outer folds them into
// status, one small integer of fact bits and the label values, and
// aggregates count, oldest age and one past-deadline count per distinct
// deadline.
type stateShape struct {
	inner, outer, group, aggs []string
}

// Bits of the facts column of the state-shaped queries: the claim column
// is set, the lease has passed, attempts > 0, unknown_when holds.
const (
	FactClaim = 1 << iota
	FactLeasePassed
	FactAttempted
	FactUnknownWhen
)

func (s *Spec) stateShape() stateShape {
	o := s.O
	var sh stateShape
	add := func(expr, alias string) { sh.inner = append(sh.inner, expr+" AS "+alias) }
	st := "''::text"
	if o.Status != "" {
		add(col(o.Status), "st")
		st = "coalesce(s.st::text, " + s.nullStatus() + ")"
	}
	// (SELECT ...) around now() is an InitPlan: computed once, not per row.
	var bits []string
	claimed := strconv.Itoa(FactClaim)
	passed := strconv.Itoa(FactClaim | FactLeasePassed)
	if cc := claimColumn(o); cc != "" {
		add(col(cc), "cl")
		if s.LeaseColumn() != "" {
			bits = append(bits, "CASE WHEN s.cl IS NULL THEN 0 WHEN "+s.leasePassedInit("s.cl")+" THEN "+passed+" ELSE "+claimed+" END")
		} else {
			bits = append(bits, "CASE WHEN s.cl IS NULL THEN 0 ELSE "+claimed+" END")
		}
	}
	if o.Attempts != "" {
		add(col(o.Attempts), "at")
		bits = append(bits, fmt.Sprintf("CASE WHEN s.at > %s THEN %d ELSE 0 END", s.attemptsOnInsert(), FactAttempted))
	}
	if o.UnknownWhen != "" {
		add("coalesce(("+o.UnknownWhen+"), false)", "uw")
		bits = append(bits, fmt.Sprintf("CASE WHEN s.uw THEN %d ELSE 0 END", FactUnknownWhen))
	}
	f := "0"
	if len(bits) > 0 {
		f = strings.Join(bits, " + ")
	}
	sh.outer = []string{st, "(" + f + ")::int4"}
	for i, l := range o.Labels {
		a := "l" + strconv.Itoa(i)
		add(col(l.Column), a)
		sh.outer = append(sh.outer, "s."+a+"::text")
	}
	for i := range sh.outer {
		sh.group = append(sh.group, strconv.Itoa(i+1))
	}
	if o.NoCreatedAt() {
		// No creation time: no age, no past-deadline counts (Deadlines
		// is empty), and a NULL age the scan leaves unset.
		sh.aggs = []string{"count(*)::int8", "NULL::float8"}
		return sh
	}
	add(col(o.CreatedAt), "cr")
	sh.aggs = []string{"count(*)::int8",
		"extract(epoch from " + ReadNow + " - " + s.tz(o.CreatedAt, "min(s.cr)") + ")::float8"}
	// One past-deadline count per distinct deadline, each a plain
	// comparison with the column's own type; the group's labels pick one.
	for _, d := range s.Deadlines() {
		sh.aggs = append(sh.aggs, "(count(*) FILTER (WHERE s.cr < (SELECT "+s.bound(o.CreatedAt, ReadNow+" - "+interval(d))+")))::int8")
	}
	return sh
}

// leasePassedInit is leasePassed with now() computed once per query.
func (s *Spec) leasePassedInit(v string) string {
	if s.O.LeaseUntil != "" {
		return v + " < (SELECT " + s.bound(s.LeaseColumn(), ReadNow) + ")"
	}
	return v + " < (SELECT " + s.bound(s.LeaseColumn(), ReadNow+" - "+interval(s.O.LeaseTTL)) + ")"
}

// aggregate is the state-shaped aggregate over the rows of from, a
// subquery whose columns are sh.inner's aliases.
func (sh stateShape) aggregate(from string) string {
	return fmt.Sprintf("SELECT %s, %s\nFROM (%s) s\nGROUP BY %s", strings.Join(sh.outer, ", "),
		strings.Join(sh.aggs, ", "), from, strings.Join(sh.group, ", "))
}

// StateQuery aggregates the unpublished rows by status, facts and label
// values: count, age of the oldest, count past each deadline. It reads
// at most MaxCount+1 rows, the oldest first (in created_at order, the
// id's on a table with no creation time, through the oldest index), so
// that a huge backlog costs no more than MaxCount rows; a total above
// MaxCount means capped, and the rows it read are then a walk of the
// oldest unpublished rows by time: every label combination it met has
// its exact oldest age, whatever the number of combinations (walk.go,
// and the collector's cover.go for the series it did not meet).
//
// Columns: status, facts bits, labels..., rows, oldest age seconds, past
// deadline rows for each of Deadlines.
func (s *Spec) StateQuery() string {
	sh := s.stateShape()
	return sh.aggregate(fmt.Sprintf("SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d",
		strings.Join(sh.inner, ", "), s.table, s.where(s.unpublished()), col(s.OrderColumn()), s.O.MaxCount+1))
}

// ClaimedQuery is the state query over the claimed unpublished rows only,
// through the lease (or claimed) index: in_flight and lease_expired rows
// and their unknown results stay exact while the pending rows are capped,
// unless more than MaxCount rows are claimed. "" when no row is ever
// claimed.
func (s *Spec) ClaimedQuery() string {
	cl := s.ClaimedPredicate()
	if cl == "" {
		return ""
	}
	sh := s.stateShape()
	return sh.aggregate(fmt.Sprintf("SELECT %s FROM %s t WHERE %s LIMIT %d",
		strings.Join(sh.inner, ", "), s.table, s.where(s.unpublished(), cl), s.O.MaxCount+1))
}

// ClaimedCountQuery counts the claimed unpublished rows up to
// MaxCount+1, an index-only count of the lease (or claimed) index: it
// tells whether they are capped before any of them is grouped
// (ClaimedQuery when they are not, the walks of claimedwalk.go when
// they are). "" when no row is ever claimed.
//
// Columns: the count.
func (s *Spec) ClaimedCountQuery() string {
	cl := s.ClaimedPredicate()
	if cl == "" {
		return ""
	}
	return fmt.Sprintf("SELECT count(*)::int8 FROM (SELECT 1 FROM %s t WHERE %s LIMIT %d) c",
		s.table, s.where(s.unpublished(), cl), s.O.MaxCount+1)
}

// UnknownQuery is the state query over the unclaimed unpublished rows
// whose result is unknown (a status listed under pending and unknown, or
// unknown_when), through the unknown index, at most MaxCount+1 rows;
// while capped, only its unknown results are used. "" when an unclaimed
// row never has an unknown result.
func (s *Spec) UnknownQuery() string {
	up := s.unknownPredicate("t.")
	if up == "" {
		return ""
	}
	sh := s.stateShape()
	return sh.aggregate(fmt.Sprintf("SELECT %s FROM %s t WHERE %s LIMIT %d",
		strings.Join(sh.inner, ", "), s.table, s.where(s.unpublished(), not(s.ClaimedPredicate()), up), s.O.MaxCount+1))
}

// PendingQuery is the state query over the unclaimed unpublished rows
// while capped, when the walk in time order (StateQuery) could not cover
// every series: the oldest k of each label combination, where the
// combinations come from the skip-scan (at most MaxOldestTuples) and k is
// MaxCount divided among them, at least 1. So every combination that has
// a pending row reads at least one, its oldest age is exact, and its rows
// past their deadline (the oldest ones) are exact up to k; a NULL label
// value is a value like any other. Its cost grows with the number of
// combinations (one index descent each), which is why it is only the
// fallback.
func (s *Spec) PendingQuery() string {
	return s.perCombo(and(s.unpublished(), not(s.ClaimedPredicate())), col(s.OrderColumn()), []string{""}, 1)
}

// shares are the CTEs g (the combinations, at most MaxOldestTuples) and
// k (MaxCount divided among them and among the reads sharing it, at
// least 1) following a skip-scan r.
func (s *Spec) shares(reads int) string {
	return fmt.Sprintf(`,
g AS (SELECT * FROM r LIMIT %d),
k AS (SELECT greatest(1, %d / greatest(count(*) * %d, 1))::int8 AS k FROM g)`, MaxOldestTuples, s.O.MaxCount, max(reads, 1))
}

// Deadlines are the distinct deadlines of the outbox, shortest first: the
// past-deadline columns of the state query.
func (s *Spec) Deadlines() []time.Duration {
	if s.O.NoCreatedAt() {
		return nil
	}
	ds := []time.Duration{s.O.Deadline}
	for _, d := range s.O.Deadlines {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	out := ds[:1]
	for _, d := range ds[1:] {
		if d != out[len(out)-1] {
			out = append(out, d)
		}
	}
	return out
}

// DeadQuery counts dead rows by label values, at most MaxCount+1 of them.
// "" when the outbox has no dead rows. Columns: labels..., rows.
func (s *Spec) DeadQuery() string { return s.countByLabels(s.DeadPredicate()) }

// UnclassifiedQuery counts the rows in no state (a NULL status or one
// listed nowhere) by label values, at most MaxCount+1, through the
// unclassified index. "" when every row has a state. Columns: labels...,
// rows.
func (s *Spec) UnclassifiedQuery() string { return s.countByLabels(s.UnclassifiedPredicate()) }

func (s *Spec) countByLabels(pred string) string {
	if pred == "" {
		return ""
	}
	labels := s.labelExprs()
	if len(labels) == 0 {
		return fmt.Sprintf(`SELECT count(*)::int8 FROM (SELECT 1 FROM %s t WHERE %s LIMIT %d) s`,
			s.table, s.where(pred), s.O.MaxCount+1)
	}
	inner := make([]string, len(labels))
	outer := make([]string, len(labels))
	group := make([]string, len(labels))
	for i, l := range labels {
		inner[i] = l + " AS c" + strconv.Itoa(i)
		outer[i] = "c" + strconv.Itoa(i)
		group[i] = strconv.Itoa(i + 1)
	}
	return fmt.Sprintf(`SELECT %s, count(*)::int8 FROM (SELECT %s FROM %s t WHERE %s LIMIT %d) s GROUP BY %s`,
		strings.Join(outer, ", "), strings.Join(inner, ", "), s.table, s.where(pred), s.O.MaxCount+1,
		strings.Join(group, ", "))
}

// DeadCappedQuery counts dead rows per label combination while the dead
// count is capped: up to k rows of each combination the skip-scan of the
// dead index finds (k is MaxCount divided among them, at least 1), so no
// combination with a dead row reads 0, NULL label values included. ""
// without labels or dead rows. Columns: labels..., rows.
func (s *Spec) DeadCappedQuery() string { return s.countCappedByLabels(s.DeadPredicate()) }

// UnclassifiedCappedQuery is DeadCappedQuery for the rows in no state,
// through the unclassified index.
func (s *Spec) UnclassifiedCappedQuery() string {
	return s.countCappedByLabels(s.UnclassifiedPredicate())
}

func (s *Spec) countCappedByLabels(dp string) string {
	if dp == "" || len(s.O.Labels) == 0 {
		return ""
	}
	var gl []string
	for i := range s.O.Labels {
		gl = append(gl, "g.l"+strconv.Itoa(i)+"::text")
	}
	count := s.perMatch("g", func(m []string) string {
		return fmt.Sprintf("(SELECT 1 FROM %s t WHERE %s LIMIT (SELECT k FROM k))", s.table, s.where(append([]string{dp}, m...)...))
	})
	return s.skipScan(dp, "") + s.shares(1) + fmt.Sprintf(`
SELECT %s, (SELECT count(*) FROM (
    %s
  ) z)::int8 FROM g`, strings.Join(gl, ", "), count)
}

// MaxOldestTuples bounds the label combinations the skip-scans visit.
const MaxOldestTuples = 10000

// MaxUnclassifiedStatuses bounds the distinct unclassified status values
// check lists, and MaxUnclassifiedRows the rows it reads for them.
const (
	MaxUnclassifiedStatuses = 20
	MaxUnclassifiedRows     = 100000
)

// UnclassifiedStatusesQuery lists the status values of rows in no state,
// with their counts among at most MaxUnclassifiedRows such rows read
// through the unclassified index, most frequent first. "" when every row
// has a state. Columns: status (NULL for a NULL status), rows.
func (s *Spec) UnclassifiedStatusesQuery() string {
	p := s.UnclassifiedPredicate()
	if p == "" {
		return ""
	}
	return fmt.Sprintf(`SELECT st, count(*)::int8 FROM (SELECT %s::text AS st FROM %s t WHERE %s LIMIT %d) s
GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT %d`, col(s.O.Status), s.table, s.where(p), MaxUnclassifiedRows, MaxUnclassifiedStatuses)
}

// perCombo is the state-shaped aggregate of, for each label combination
// of g (a skip-scan over pred ordered by order, NULL values included),
// the first k rows of each part (disjoint predicates ANDed to pred) in
// that order. k divides MaxCount among the combinations and the reads,
// which number shared (the parts of this query and of the queries
// sharing its budget).
func (s *Spec) perCombo(pred, order string, parts []string, shared int) string {
	sh := s.stateShape()
	inner := strings.Join(sh.inner, ", ")
	var reads []string
	if len(s.O.Labels) == 0 {
		for _, p := range parts {
			reads = append(reads, fmt.Sprintf("(SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d)",
				inner, s.table, s.where(pred, p), order, max(s.O.MaxCount/max(shared, 1), 1)))
		}
		return sh.aggregate(strings.Join(reads, "\n  UNION ALL\n  "))
	}
	for _, p := range parts {
		one := s.perMatch("g", func(m []string) string {
			return fmt.Sprintf("(SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT (SELECT k FROM k))",
				inner, s.table, s.where(append([]string{pred, p}, m...)...), order)
		})
		reads = append(reads, fmt.Sprintf("(SELECT x.* FROM g CROSS JOIN LATERAL (\n    %s\n  ) x)", one))
	}
	return s.skipScan(pred, order) + s.shares(shared) + "\n" + sh.aggregate(strings.Join(reads, "\n  UNION ALL\n  "))
}

// claimedOrder is the order of the claimed index after the labels: the
// lease column, else OrderColumn.
func (s *Spec) claimedOrder() string {
	if lc := s.LeaseColumn(); lc != "" {
		return lc
	}
	return s.OrderColumn()
}

// OrderColumn is the column rows are read oldest first by, and the
// indexes' key after the labels: created_at, or the id on a table with
// no creation time (an order that only keeps reads and index keys
// stable; no age is judged from it).
func (s *Spec) OrderColumn() string {
	if s.O.NoCreatedAt() {
		return s.O.ID
	}
	return s.O.CreatedAt
}

// ClaimedCappedQuery is the state query over the claimed rows when even
// they are more than MaxCount (a relay that died holding a huge batch):
// for each label combination of claimed rows (a skip-scan of the claimed
// index), the k earliest leases that have passed and, apart, the k
// earliest live (or absent) ones, so that neither lease_expired nor
// in_flight reads 0 in a combination that has such a row. Its unknown
// results are read by ClaimedUnknownQuery. "" when no row is ever
// claimed.
func (s *Spec) ClaimedCappedQuery() string {
	cl := s.ClaimedPredicate()
	if cl == "" {
		return ""
	}
	return s.perCombo(and(s.unpublished(), cl), col(s.claimedOrder()), s.ClaimedParts(), s.claimedReads())
}

// ClaimedParts are the disjoint conditions the claimed rows are read in
// while capped, each a range of the claimed indexes after the labels, so
// that none scans past the rows of another: with a lease column, the
// leases passed, live and absent; else one part, "" (every claimed row).
func (s *Spec) ClaimedParts() []string {
	lc := s.LeaseColumn()
	if lc == "" {
		return []string{""}
	}
	live := col(lc) + " >= " + s.bound(lc, ReadNow)
	if s.O.LeaseUntil == "" {
		live = col(lc) + " >= " + s.bound(lc, ReadNow+" - "+interval(s.O.LeaseTTL))
	}
	return []string{s.leasePassed(col(lc)), live, col(lc) + " IS NULL"}
}

// claimedReads is how many per label set reads share MaxCount while the
// claimed rows are capped: ClaimedCappedQuery's parts and
// ClaimedUnknownQuery's, so that together they read at most about
// MaxCount rows.
func (s *Spec) claimedReads() int {
	n := 1
	if s.LeaseColumn() != "" {
		n = 3
	}
	if s.claimedUnknown() != "" {
		n++
	}
	return n
}

// claimedUnknown is, among claimed rows, the condition of an unknown
// result: a status under unknown, unknown_when, or a passed lease after
// an attempt.
func (s *Spec) claimedUnknown() string {
	var p []string
	if s.O.Style() == config.StyleStatus && len(s.O.Unknown) > 0 {
		p = append(p, s.rules("t.").in(s.O.Unknown))
	}
	if s.O.UnknownWhen != "" {
		p = append(p, "("+s.O.UnknownWhen+")")
	}
	if lc := s.LeaseColumn(); lc != "" && s.O.Attempts != "" {
		p = append(p, "("+s.leasePassed(col(lc))+" AND "+col(s.O.Attempts)+" > "+s.attemptsOnInsert()+")")
	}
	if len(p) == 0 {
		return ""
	}
	return "(" + strings.Join(p, " OR ") + ")"
}

// claimedUnknownIndexed is claimedUnknown without the lease's time, the
// predicate of the claimed_unknown index: a passed lease after an attempt
// becomes any claimed row after an attempt (a row a relay retries), so
// that the walk of the claimed rows with an unknown result, whose
// condition implies it, reads those rows alone instead of filtering
// every passed lease. Unqualified; "" when a claimed row never has an
// unknown result.
func (s *Spec) claimedUnknownIndexed() string {
	var p []string
	if s.O.Style() == config.StyleStatus && len(s.O.Unknown) > 0 {
		p = append(p, s.rules("").in(s.O.Unknown))
	}
	if s.O.UnknownWhen != "" {
		p = append(p, "("+s.O.UnknownWhen+")")
	}
	if lc := s.LeaseColumn(); lc != "" && s.O.Attempts != "" {
		p = append(p, pg.Ident(s.O.Attempts)+" > "+s.attemptsOnInsert())
	}
	if len(p) == 0 {
		return ""
	}
	return "(" + strings.Join(p, " OR ") + ")"
}

// ClaimedUnknownQuery reads, with ClaimedCappedQuery, the claimed rows
// with an unknown result: the k earliest of each label combination, so
// none reads 0 that has one. Only their unknown results are used. ""
// when a claimed row never has one.
func (s *Spec) ClaimedUnknownQuery() string {
	cl, cu := s.ClaimedPredicate(), s.claimedUnknown()
	if cl == "" || cu == "" {
		return ""
	}
	return s.perCombo(and(s.unpublished(), cl), col(s.claimedOrder()), []string{cu}, s.claimedReads())
}

// UnknownCappedQuery is UnknownQuery when more than MaxCount unclaimed
// rows have an unknown result: the k oldest of each label combination
// the skip-scan of the unknown index finds.
func (s *Spec) UnknownCappedQuery() string {
	up := s.unknownPredicate("t.")
	if up == "" {
		return ""
	}
	return s.perCombo(and(s.unpublished(), not(s.ClaimedPredicate()), up), col(s.OrderColumn()), []string{""}, 1)
}
