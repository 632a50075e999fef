package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Querier is what the queries run on: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Column is one column of the outbox table as the catalog describes it.
type Column struct {
	Name string
	// Type is the type's name in pg_type (timestamptz, int4, text, ...).
	Type string
	// Category is pg_type.typcategory: S string, N numeric, D date/time,
	// E enum, ...
	Category string
	NotNull  bool
}

// IsInteger reports an integer type.
func (c Column) IsInteger() bool {
	switch c.Type {
	case "int2", "int4", "int8":
		return true
	}
	return false
}

// IsTimestamp reports timestamp or timestamptz.
func (c Column) IsTimestamp() bool { return c.Type == "timestamptz" || c.Type == "timestamp" }

// IsText reports a string or enum type.
func (c Column) IsText() bool { return c.Category == "S" || c.Category == "E" }

// ErrNoTable is returned when the outbox table does not exist.
var ErrNoTable = errors.New("table does not exist")

// Introspect reads the columns of table ("schema.table" or "table") from
// the catalog.
func Introspect(ctx context.Context, q Querier, table string) (map[string]Column, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pg.Table(table)).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look up table %s: %w", table, err)
	}
	if !exists {
		return nil, fmt.Errorf("look up table %s: %w", table, ErrNoTable)
	}
	rows, err := q.Query(ctx, `
SELECT a.attname::text, t.typname::text, t.typcategory::text, a.attnotnull
FROM pg_attribute a JOIN pg_type d ON d.oid = a.atttypid
JOIN pg_type t ON t.oid = CASE WHEN d.typtype = 'd' THEN d.typbasetype ELSE d.oid END
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, pg.Table(table))
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	cols := map[string]Column{}
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type, &c.Category, &c.NotNull); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", table, err)
		}
		cols[c.Name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	return cols, nil
}

// Spec is an outbox's configuration joined with its table's column types:
// it builds the queries and decides from what they read.
type Spec struct {
	Name      string
	O         *config.Outbox
	Rules     *Rules
	IntStatus bool
	table     string
	// labelsNotNull: every label column is declared NOT NULL.
	labelsNotNull bool
}

// NewSpec builds the queries of outbox name. cols are the table's columns
// from Introspect; only the status column's type is used here (Check
// judges the others).
func NewSpec(name string, o *config.Outbox, cols map[string]Column) (*Spec, error) {
	s := &Spec{Name: name, O: o, table: pg.Table(o.Table)}
	if o.Status != "" {
		c, ok := cols[o.Status]
		if !ok {
			return nil, fmt.Errorf("outbox %q: status column %q does not exist in %s", name, o.Status, o.Table)
		}
		s.IntStatus = c.IsInteger()
	}
	s.labelsNotNull = true
	for _, l := range o.Labels {
		s.labelsNotNull = s.labelsNotNull && cols[l.Column].NotNull
	}
	r, err := NewRules(o, s.IntStatus)
	if err != nil {
		return nil, fmt.Errorf("outbox %q: %w", name, err)
	}
	s.Rules = r
	return s, nil
}

func col(name string) string { return "t." + pg.Ident(name) }

// ts is a timestamp column as timestamptz, so that both timestamp types
// compare with now() in the session's time zone alike.
func ts(name string) string { return col(name) + "::timestamptz" }

func interval(d time.Duration) string {
	return "'" + strconv.FormatInt(d.Microseconds(), 10) + " microseconds'::interval"
}

// statusList inlines status values as literals, so that the planner can
// match a partial index predicate such as status IN ('PENDING','CLAIMED').
func (s *Spec) statusList(vals []string) string {
	out := make([]string, 0, len(vals))
	for _, v := range vals {
		if s.IntStatus {
			c, _ := canonicalStatus(v, true) // NewRules checked them
			out = append(out, c)
		} else {
			out = append(out, pg.Literal(v))
		}
	}
	return strings.Join(out, ",")
}

// unpublishedStatuses are the status values of unpublished rows: pending,
// in_flight and those listed only under unknown, in config order.
func (s *Spec) unpublishedStatuses() []string {
	return dedupe(s.O.Pending, s.O.InFlight, s.unknownOnly())
}

// claimedStatuses are in_flight and unknown-only values.
func (s *Spec) claimedStatuses() []string {
	return dedupe(s.O.InFlight, s.unknownOnly())
}

func (s *Spec) unknownOnly() []string {
	listed := map[string]bool{}
	for _, set := range [][]string{s.O.Pending, s.O.InFlight, s.O.Published, s.O.Dead} {
		for _, v := range set {
			listed[v] = true
		}
	}
	var out []string
	for _, v := range s.O.Unknown {
		if !listed[v] {
			out = append(out, v)
		}
	}
	return out
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

// UnpublishedPredicate is the condition of unpublished rows, as it stands
// in every query and in the partial index: "" for a delete-on-publish
// table, where every row is unpublished.
func (s *Spec) UnpublishedPredicate() string { return s.unpublished("t.") }

func (s *Spec) unpublished(q string) string {
	col := func(c string) string { return q + pg.Ident(c) }
	o := s.O
	switch o.Style() {
	case config.StyleStatus:
		return col(o.Status) + " IN (" + s.statusList(s.unpublishedStatuses()) + ")"
	case config.StyleTimestamps:
		var p []string
		if o.PublishedAt != "" {
			p = append(p, col(o.PublishedAt)+" IS NULL")
		}
		if o.DeadAt != "" {
			p = append(p, col(o.DeadAt)+" IS NULL")
		}
		return strings.Join(p, " AND ")
	}
	return ""
}

// DeadPredicate is the condition of dead rows, "" when the outbox has no
// way to mark a row dead.
func (s *Spec) DeadPredicate() string { return s.dead("t.") }

func (s *Spec) dead(q string) string {
	col := func(c string) string { return q + pg.Ident(c) }
	o := s.O
	switch o.Style() {
	case config.StyleStatus:
		if len(o.Dead) > 0 {
			return col(o.Status) + " IN (" + s.statusList(o.Dead) + ")"
		}
	case config.StyleTimestamps:
		if o.DeadAt != "" {
			p := col(o.DeadAt) + " IS NOT NULL"
			if o.PublishedAt != "" {
				p += " AND " + col(o.PublishedAt) + " IS NULL"
			}
			return p
		}
	}
	return ""
}

// where joins predicates with AND and adds the configured filter, the
// only raw SQL besides unknown_when, in parentheses.
func (s *Spec) where(preds ...string) string {
	var p []string
	for _, x := range preds {
		if x != "" {
			p = append(p, x)
		}
	}
	if s.O.Filter != "" {
		p = append(p, "("+s.O.Filter+")")
	}
	if len(p) == 0 {
		return "TRUE"
	}
	return strings.Join(p, " AND ")
}

func (s *Spec) labelExprs() []string {
	out := make([]string, len(s.O.Labels))
	for i, l := range s.O.Labels {
		out[i] = col(l.Column) + "::text"
	}
	return out
}

// factExprs are the SELECT expressions of a row's Facts, in Facts order:
// status, claim set, lease passed, attempted, unknown_when.
func (s *Spec) factExprs() []string {
	o := s.O
	st := "''::text"
	if o.Status != "" {
		st = col(o.Status) + "::text"
	}
	claim, passed := "false", "false"
	switch {
	case o.ClaimedAt != "":
		claim = col(o.ClaimedAt) + " IS NOT NULL"
		if o.LeaseTTL > 0 {
			passed = "coalesce(" + col(o.ClaimedAt) + " < now() - " + interval(o.LeaseTTL) + ", false)"
		}
	case o.LeaseUntil != "":
		claim = col(o.LeaseUntil) + " IS NOT NULL"
		passed = "coalesce(" + col(o.LeaseUntil) + " < now(), false)"
	}
	attempted := "false"
	if o.Attempts != "" {
		attempted = "coalesce(" + col(o.Attempts) + " > 0, false)"
	}
	uw := "false"
	if o.UnknownWhen != "" {
		uw = "coalesce((" + o.UnknownWhen + "), false)"
	}
	return []string{st, claim, passed, attempted, uw}
}

// Bits of the facts column of the state query.
const (
	factClaim = 1 << iota
	factLeasePassed
	factAttempted
	factUnknownWhen
)

// FactsFromBits decodes the facts column of the state query.
func FactsFromBits(status string, bits int32) Facts {
	return Facts{Status: status, ClaimSet: bits&factClaim != 0, LeasePassed: bits&factLeasePassed != 0,
		Attempted: bits&factAttempted != 0, UnknownWhen: bits&factUnknownWhen != 0}
}

// StateQuery aggregates the unpublished rows by status, facts and label
// values: count, age of the oldest, count past its deadline. It reads at
// most MaxCount+1 rows (a LIMIT subquery), so that a huge backlog costs
// no more than MaxCount rows; a total above MaxCount means capped.
//
// The subquery only passes the columns on (an index-only scan of the
// unpublished index when it includes them); the facts are folded into
// one small integer in the grouping, which keeps the per-row work small.
//
// Columns: status, facts bits, labels..., rows, oldest age seconds, past
// deadline rows for each of Deadlines.
func (s *Spec) StateQuery() string {
	o := s.O
	inner := []string{}
	add := func(expr, alias string) { inner = append(inner, expr+" AS "+alias) }
	st := "''::text"
	if o.Status != "" {
		add(col(o.Status), "st")
		st = "s.st::text"
	}
	// (SELECT now() ...) is an InitPlan: computed once, not per row.
	var bits []string
	claimed := fmt.Sprintf("%d", factClaim)
	passed := fmt.Sprintf("%d", factClaim|factLeasePassed)
	switch {
	case o.ClaimedAt != "" && o.LeaseTTL > 0:
		add(col(o.ClaimedAt), "cl")
		bits = append(bits, "CASE WHEN s.cl IS NULL THEN 0 WHEN s.cl < (SELECT now() - "+interval(o.LeaseTTL)+") THEN "+passed+" ELSE "+claimed+" END")
	case o.ClaimedAt != "":
		add(col(o.ClaimedAt), "cl")
		bits = append(bits, "CASE WHEN s.cl IS NULL THEN 0 ELSE "+claimed+" END")
	case o.LeaseUntil != "":
		add(col(o.LeaseUntil), "cl")
		bits = append(bits, "CASE WHEN s.cl IS NULL THEN 0 WHEN s.cl < (SELECT now()) THEN "+passed+" ELSE "+claimed+" END")
	}
	if o.Attempts != "" {
		add(col(o.Attempts), "at")
		bits = append(bits, fmt.Sprintf("CASE WHEN s.at > 0 THEN %d ELSE 0 END", factAttempted))
	}
	if o.UnknownWhen != "" {
		add("coalesce(("+o.UnknownWhen+"), false)", "uw")
		bits = append(bits, fmt.Sprintf("CASE WHEN s.uw THEN %d ELSE 0 END", factUnknownWhen))
	}
	f := "0"
	if len(bits) > 0 {
		f = strings.Join(bits, " + ")
	}
	outer := []string{st, "(" + f + ")::int4"}
	for i, l := range o.Labels {
		a := "l" + strconv.Itoa(i)
		add(col(l.Column), a)
		outer = append(outer, "s."+a+"::text")
	}
	add(col(o.CreatedAt), "cr")
	group := make([]string, len(outer))
	for i := range group {
		group[i] = strconv.Itoa(i + 1)
	}
	// One past-deadline count per distinct deadline, each a plain
	// timestamp comparison; the group's first label picks its own.
	var late []string
	for _, d := range s.Deadlines() {
		late = append(late, "(count(*) FILTER (WHERE s.cr < (SELECT now() - "+interval(d)+")))::int8")
	}
	return fmt.Sprintf(`SELECT %s, count(*)::int8, extract(epoch from now() - min(s.cr)::timestamptz)::float8, %s
FROM (SELECT %s FROM %s t WHERE %s LIMIT %d) s
GROUP BY %s`,
		strings.Join(outer, ", "), strings.Join(late, ", "), strings.Join(inner, ", "), s.table,
		s.where(s.UnpublishedPredicate()), o.MaxCount+1, strings.Join(group, ", "))
}

// Deadlines are the distinct deadlines of the outbox, shortest first: the
// past-deadline columns of the state query.
func (s *Spec) Deadlines() []time.Duration {
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

// lateColumn is the index, among Deadlines, of the deadline of rows with
// these label values.
func (s *Spec) lateColumn(labels []string) int {
	d := Deadline(s.O, labels)
	for i, x := range s.Deadlines() {
		if x == d {
			return i
		}
	}
	return 0
}

// DeadQuery counts dead rows by label values, at most MaxCount+1 of them.
// "" when the outbox has no dead rows. Columns: labels..., rows.
func (s *Spec) DeadQuery() string {
	dp := s.DeadPredicate()
	if dp == "" {
		return ""
	}
	labels := s.labelExprs()
	if len(labels) == 0 {
		return fmt.Sprintf(`SELECT count(*)::int8 FROM (SELECT 1 FROM %s t WHERE %s LIMIT %d) s`,
			s.table, s.where(dp), s.O.MaxCount+1)
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
		strings.Join(outer, ", "), strings.Join(inner, ", "), s.table, s.where(dp), s.O.MaxCount+1,
		strings.Join(group, ", "))
}

// MaxOldestTuples bounds the label combinations the oldest-row skip-scan
// visits.
const MaxOldestTuples = 10000

// OldestQuery finds the age of the oldest unpublished row per label
// combination exactly, whatever the backlog: a recursive skip-scan that
// takes one row per combination from an index on (labels..., created_at),
// instead of reading every row. Without labels it is a min() that an
// index on created_at answers from its first entry. It is used when the
// state query was capped.
//
// Combinations with a NULL label value are not visited by the skip-scan
// (a row comparison with NULL is not true); their age comes from the
// capped state query only.
//
// Columns: labels..., oldest age seconds.
func (s *Spec) OldestQuery() string {
	up := s.UnpublishedPredicate()
	labels := s.O.Labels
	if len(labels) == 0 {
		return fmt.Sprintf(`SELECT coalesce(extract(epoch from now() - min(%s))::float8, 0) FROM %s t WHERE %s`,
			ts(s.O.CreatedAt), s.table, s.where(up))
	}
	outs := make([]string, len(labels))
	for i := range labels {
		outs[i] = "r.l" + strconv.Itoa(i) + "::text"
	}
	return fmt.Sprintf(`%s
SELECT %s, extract(epoch from now() - r.cr::timestamptz)::float8 FROM r LIMIT %d`,
		s.skipScan(), strings.Join(outs, ", "), MaxOldestTuples)
}

// skipScan is a recursive CTE r(l0, ..., cr) that visits each combination
// of label values among the unpublished rows once, with its oldest
// created_at: each step is one descent of the unpublished index to the
// first entry past the previous combination. Combinations with a NULL are
// passed over (a row comparison with NULL is not true).
func (s *Spec) skipScan() string {
	labels := s.O.Labels
	cols := make([]string, len(labels))
	sel := make([]string, len(labels))
	prev := make([]string, len(labels))
	for i, l := range labels {
		cols[i] = col(l.Column)
		sel[i] = cols[i] + " AS l" + strconv.Itoa(i)
		prev[i] = "r.l" + strconv.Itoa(i)
	}
	var cmp string
	if len(labels) == 1 {
		cmp = cols[0] + " > " + prev[0]
	} else {
		cmp = "(" + strings.Join(cols, ", ") + ") > (" + strings.Join(prev, ", ") + ")"
	}
	up := s.UnpublishedPredicate()
	selList := strings.Join(sel, ", ") + ", " + col(s.O.CreatedAt) + " AS cr"
	order := strings.Join(cols, ", ") + ", " + col(s.O.CreatedAt)
	return fmt.Sprintf(`WITH RECURSIVE r AS (
  (SELECT %[1]s FROM %[2]s t WHERE %[3]s ORDER BY %[4]s LIMIT 1)
  UNION ALL
  SELECT n.* FROM r, LATERAL (SELECT %[1]s FROM %[2]s t WHERE %[5]s ORDER BY %[4]s LIMIT 1) n
)`, selList, s.table, s.where(up), order, s.where(up, cmp))
}

// leaseColumn is the column whose value identifies a lease.
func (s *Spec) leaseColumn() string {
	if s.O.LeaseUntil != "" {
		return s.O.LeaseUntil
	}
	if s.O.ClaimedAt != "" && s.O.LeaseTTL > 0 {
		return s.O.ClaimedAt
	}
	return ""
}

// LeaseQuery reads the claimed unpublished rows whose lease expired after
// $1 (microseconds since the epoch, exclusive; NULL means now() -
// SkewWindow) and before now, earliest expiry first, at most
// MaxPublishedRows; "" without a lease to judge. Each scrape reads only
// the leases that expired since the last one (a range of the lease
// index), not every lease still expired, so a relay that died holding
// many rows costs one read of them. Columns: id, lease column and expiry,
// both in microseconds since the epoch.
func (s *Spec) LeaseQuery() string {
	lc := s.leaseColumn()
	if lc == "" {
		return ""
	}
	bound := "coalesce('epoch'::timestamptz + $1::int8 * interval '1 microsecond', now() - " + interval(SkewWindow) + ")"
	var claimed, passed, expiry string
	if s.O.LeaseUntil != "" {
		passed = col(lc) + " < now() AND " + col(lc) + " > " + bound
		expiry = ts(lc)
	} else {
		// claimed_at < now() - ttl, not claimed_at + ttl < now(), so that an
		// index on claimed_at serves it.
		ttl := interval(s.O.LeaseTTL)
		passed = col(lc) + " < now() - " + ttl + " AND " + col(lc) + " > " + bound + " - " + ttl
		expiry = ts(lc) + " + " + ttl
	}
	if s.O.Style() == config.StyleStatus && len(s.O.InFlight) > 0 {
		claimed = col(s.O.Status) + " IN (" + s.statusList(s.claimedStatuses()) + ")"
	}
	return fmt.Sprintf(`SELECT %s::text, (extract(epoch from %s) * 1000000)::int8, (extract(epoch from %s) * 1000000)::int8
FROM %s t WHERE %s ORDER BY %s LIMIT %d`,
		col(s.O.ID), ts(lc), expiry, s.table, s.where(s.UnpublishedPredicate(), claimed, passed), col(lc), MaxPublishedRows)
}

// MaxPublishedRows bounds the rows one read of published rows (or of
// expired leases) returns; past it the watermark catches up over the
// following scrapes.
const MaxPublishedRows = 100000

// PublishedQuery reads rows published after $1 (microseconds since the
// epoch, exclusive; NULL means now() - SkewWindow), oldest first, at most MaxPublishedRows; "" without
// published_at. Columns: id, labels..., published_at in microseconds,
// latency seconds.
func (s *Spec) PublishedQuery() string {
	o := s.O
	if o.PublishedAt == "" {
		return ""
	}
	sel := []string{col(o.ID) + "::text"}
	sel = append(sel, s.labelExprs()...)
	sel = append(sel,
		"(extract(epoch from "+ts(o.PublishedAt)+") * 1000000)::int8",
		"extract(epoch from "+ts(o.PublishedAt)+" - "+ts(o.CreatedAt)+")::float8")
	sel = append(sel, s.publishedExtras()...)
	return fmt.Sprintf(`SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d`,
		strings.Join(sel, ", "), s.table,
		s.where(col(o.PublishedAt)+" > coalesce('epoch'::timestamptz + $1::int8 * interval '1 microsecond', now() - "+interval(SkewWindow)+")"),
		col(o.PublishedAt), MaxPublishedRows)
}

// StuckQuery reads the oldest unpublished rows, at most $1. Columns:
// id, facts..., labels..., age seconds, attempts, last_error (at most
// 200 characters).
//
// Without labels the unpublished index is ordered by created_at and
// serves ORDER BY created_at LIMIT directly. With labels it leads with
// the label columns, so the query takes the $1 oldest rows of each label
// combination (the skip-scan, then one index range each) and keeps the
// $1 oldest of those: its cost follows the combinations, not the
// backlog. Rows with a NULL label are read apart, unless the catalog
// says the label columns are NOT NULL.
func (s *Spec) StuckQuery() string {
	o := s.O
	sel := []string{col(o.ID) + "::text"}
	sel = append(sel, s.factExprs()...)
	sel = append(sel, s.labelExprs()...)
	// Never negative (a writer's clock ahead), 0 for a NULL created_at.
	sel = append(sel, "greatest(coalesce(extract(epoch from now() - "+ts(o.CreatedAt)+")::float8, 0), 0)")
	if o.Attempts != "" {
		sel = append(sel, "coalesce("+col(o.Attempts)+", 0)::int8")
	} else {
		sel = append(sel, "0::int8")
	}
	if o.LastError != "" {
		sel = append(sel, "coalesce(left("+col(o.LastError)+"::text, "+strconv.Itoa(LastErrorChars)+"), '')")
	} else {
		sel = append(sel, "''::text")
	}
	up := s.UnpublishedPredicate()
	if len(o.Labels) == 0 {
		return fmt.Sprintf(`SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT $1`,
			strings.Join(sel, ", "), s.table, s.where(up), col(o.CreatedAt))
	}
	aliased := make([]string, len(sel))
	outs := make([]string, len(sel))
	for i, x := range sel {
		aliased[i] = x + " AS s" + strconv.Itoa(i)
		outs[i] = "u.s" + strconv.Itoa(i)
	}
	inner := strings.Join(aliased, ", ") + ", " + col(o.CreatedAt) + " AS ord"
	var eq, isNull []string
	for i, l := range o.Labels {
		eq = append(eq, col(l.Column)+" = g.l"+strconv.Itoa(i))
		isNull = append(isNull, col(l.Column)+" IS NULL")
	}
	nulls := ""
	if !s.labelsNotNull {
		nulls = fmt.Sprintf(`
  UNION ALL
  (SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT $1)`,
			inner, s.table, s.where(up, "("+strings.Join(isNull, " OR ")+")"), col(o.CreatedAt))
	}
	return fmt.Sprintf(`%s
SELECT %s FROM (
  (SELECT x.* FROM (SELECT * FROM r LIMIT %d) g CROSS JOIN LATERAL
    (SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT $1) x)%s
) u ORDER BY u.ord LIMIT $1`,
		s.skipScan(), strings.Join(outs, ", "), MaxOldestTuples,
		inner, s.table, s.where(append([]string{up}, eq...)...), col(o.CreatedAt), nulls)
}

// NowQuery reads the database's transaction time in microseconds.
const NowQuery = `SELECT (extract(epoch from now()) * 1000000)::int8`

// Index is an index a query needs.
type Index struct {
	Name    string
	Columns []string
	Include []string
	Where   string
	// For names the queries the index serves.
	For string
}

// SQL is the statement that creates the index without blocking writes.
func (ix Index) SQL(table string) string {
	cols := make([]string, len(ix.Columns))
	for i, c := range ix.Columns {
		cols[i] = pg.Ident(c)
	}
	stmt := fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s)",
		pg.Ident(ix.Name), pg.Table(table), strings.Join(cols, ", "))
	if len(ix.Include) > 0 {
		inc := make([]string, len(ix.Include))
		for i, c := range ix.Include {
			inc[i] = pg.Ident(c)
		}
		stmt += " INCLUDE (" + strings.Join(inc, ", ") + ")"
	}
	if ix.Where != "" {
		stmt += " WHERE " + ix.Where
	}
	return stmt + ";"
}

// IndexName is a stable index name, outbox_exporter_<outbox>_<suffix>,
// shortened with a hash when it would pass PostgreSQL's 63 bytes.
func IndexName(outbox, suffix string) string {
	n := "outbox_exporter_" + outbox + "_" + suffix
	if len(n) <= 63 {
		return n
	}
	h := sha256.Sum256([]byte(n))
	tail := "_" + hex.EncodeToString(h[:4]) + "_" + suffix
	return n[:63-len(tail)] + tail
}

// Indexes are the indexes the outbox's queries need:
//
//   - unpublished: (labels..., created_at) over unpublished rows, with the
//     columns the state query reads included, so that the state query
//     is an index-only scan of the unpublished rows and the oldest-row
//     skip-scan finds each label combination's oldest row directly;
//   - dead: (labels...) over dead rows;
//   - lease: (lease_until or claimed_at) over unpublished rows, so the
//     expired leases are a range read;
//   - published_at: for the published counters' watermark.
func (s *Spec) Indexes() map[string]Index {
	o := s.O
	out := map[string]Index{}
	var labels []string
	for _, l := range o.Labels {
		labels = append(labels, l.Column)
	}
	var include []string
	for _, c := range append([]string{o.Status, o.LeaseUntil, o.ClaimedAt, o.Attempts}, orderInclude(o)...) {
		if c != "" && !slices.Contains(labels, c) && c != o.CreatedAt && !slices.Contains(include, c) {
			include = append(include, c)
		}
	}
	up := s.unpublished("")
	out["unpublished"] = Index{Name: IndexName(s.Name, "unpublished"),
		Columns: append(append([]string{}, labels...), o.CreatedAt), Include: include, Where: up,
		For: "the state, oldest-row and stuck-row queries"}
	if dp := s.dead(""); dp != "" {
		cols := labels
		if len(cols) == 0 {
			cols = []string{o.CreatedAt}
		}
		out["dead"] = Index{Name: IndexName(s.Name, "dead"), Columns: cols, Where: dp, For: "the dead-row count"}
	}
	if lc := s.leaseColumn(); lc != "" {
		// id and status included: the expired leases are then read from
		// the index alone, however many there are.
		var inc []string
		for _, c := range []string{o.ID, o.Status} {
			if c != "" && c != lc && !slices.Contains(inc, c) {
				inc = append(inc, c)
			}
		}
		// Only rows with a lease: the index stays small, and its predicate
		// is not implied by the state query's, so the planner cannot pick
		// it there instead of the covering unpublished index.
		where := pg.Ident(lc) + " IS NOT NULL"
		if up != "" {
			where = up + " AND " + where
		}
		out["lease"] = Index{Name: IndexName(s.Name, "lease"), Columns: []string{lc}, Include: inc, Where: where,
			For: "the expired-lease query"}
	}
	if o.PublishedAt != "" {
		out["published_at"] = Index{Name: IndexName(s.Name, "published_at"), Columns: []string{o.PublishedAt},
			For: "the published counters' watermark"}
	}
	return out
}
