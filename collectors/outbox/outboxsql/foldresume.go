package outboxsql

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// WalkPos is a position in the order of the oldest index: a resumed
// walk reads the entries from At, a created_at as the column's text, on
// (those at At again: positions name no row, so that the walk stays an
// index-only scan; a walk that stopped among more than its limit of
// entries with one created_at would make no progress, its series lower
// bounds until they are published). The zero WalkPos is no position: the
// walk starts at the age since.
type WalkPos struct {
	At string
}

// Set reports whether p is a position.
func (p WalkPos) Set() bool { return p.At != "" }

// FoldResumeQuery is FoldBoundedQuery resumed: over the oldest index's
// entries from from on (from the age since when from is not set, or also
// not before it when it is), in created_at order (index-only), at most
// limit+1 of them, the oldest of those that folds into each target. A
// walk that proves, over several collections, that no unpublished row
// folds into a series (its rows all published as a backlog drained) can
// so go on where the last one stopped instead of passing every entry
// again. Each row it returns carries the walk's end: how many entries it
// passed (more than limit: it stopped early) and the last one's position,
// as two more columns (int8, text); one row of zero count, with no
// group, carries it when no target was met. "" without targets,
// labels or created_at. The values are inlined: run it unprepared.
//
// Columns: those of StateQuery, then entries, end created_at.
func (s *Spec) FoldResumeQuery(f LabelFold, targets [][]string, from WalkPos, since float64, limit int) string {
	n := len(s.O.Labels)
	if s.O.NoCreatedAt() || n == 0 || len(f.Keep) != n || len(targets) == 0 || limit < 1 {
		return ""
	}
	var keys []string
	for _, t := range targets {
		if len(t) == n {
			keys = append(keys, literal(FoldKey(t)))
		}
	}
	if len(keys) == 0 {
		return ""
	}
	ca := col(s.O.CreatedAt)
	conds := []string{s.unpublished()}
	start := "NULL"
	if from.Set() {
		at := s.typedCreated(literal(from.At))
		conds = append(conds, ca+" >= "+at)
		start = at
	}
	if since >= 0 {
		d := time.Duration(since * float64(time.Second))
		b := "(SELECT " + s.bound(s.O.CreatedAt, ReadNow+" - "+interval(d)) + ")"
		conds = append(conds, ca+" >= "+b)
		if !from.Set() {
			start = s.typedCreated(b)
		}
	}
	sh := s.stateShape()
	entries := fmt.Sprintf("SELECT %s, %s AS k, %s AS wc FROM %s t WHERE %s ORDER BY %s LIMIT %d",
		strings.Join(sh.inner, ", "), s.foldKeyExpr(f), ca, s.table, s.where(conds...), ca, limit+1)
	found := sh.aggregate(fmt.Sprintf("SELECT DISTINCT ON (x.k) x.* FROM e x WHERE x.k = ANY(ARRAY[%s]::text[]) ORDER BY x.k, x.wc",
		strings.Join(keys, ", ")))
	// The end rides on every row (so that their order does not matter),
	// and on one row of zero count, which the scan skips as a group.
	empty := []string{"''::text", "0::int4"}
	for range n {
		empty = append(empty, "NULL::text")
	}
	empty = append(empty, "0::int8", "NULL::float8")
	for range s.Deadlines() {
		empty = append(empty, "0::int8")
	}
	return fmt.Sprintf(`WITH e AS MATERIALIZED (%s),
tr AS (SELECT count(*)::int8 AS wn, coalesce(max(wc)::text, (%s)::text) AS wa FROM e),
g AS (%s)
SELECT g.*, tr.wn, tr.wa FROM g, tr
UNION ALL
SELECT %s, tr.wn, tr.wa FROM tr`, entries, start, found, strings.Join(empty, ", "))
}

// typedCreated is expr, a literal or an expression, as a value of the
// created_at column's own type (an untyped literal takes it).
func (s *Spec) typedCreated(expr string) string {
	return "coalesce((SELECT " + col(s.O.CreatedAt) + " FROM " + s.table + " t LIMIT 0), " + expr + ")"
}

// WalkSeen is a transaction open at an earlier HorizonQuery: its virtual
// transaction id and the earliest its created_at values can be, in
// microseconds since the epoch (Known false: not known, it was open at
// the first look).
type WalkSeen struct {
	VXID  string
	Micro int64
	Known bool
}

// HorizonQuery reads the transactions open now in the outbox's database
// (pg_locks holds each one's virtual transaction id, readable by any
// role; prepared transactions count too) and, from them, the horizon:
// the created_at before which no row can still commit. A row's
// created_at defaults to its transaction's start, so a transaction can
// commit rows no older than it started, and it started after the last
// look that did not see it (seen, the transactions of the last look with
// their bounds, and prev, the time of that look, in microseconds;
// prevKnown false when there was none). The start itself
// (pg_stat_activity.xact_start) is not used: only the roles the exporter
// should not need may read it for every session.
// The horizon is unknown (NULL) while a transaction whose start cannot
// be bounded is open, or on a standby (the primary's transactions are
// not seen). ends are positions; each is returned as the earlier of
// itself and the horizon, the position a later walk must start from.
//
// Virtual transaction ids are those of one server run: the server's
// start time is returned too, and a look at another server or run (a
// failover, a restart) must not be bounded by the last one's.
//
// Columns: the open transactions' ids (text[]) and starts in
// microseconds (int8[], NULL where unknown), now in microseconds, the
// horizon known (bool), the server's start time (text), then for each of
// ends its created_at text.
func (s *Spec) HorizonQuery(seen []WalkSeen, prev int64, prevKnown bool, ends []WalkPos) string {
	vals := []string{"(NULL::text, NULL::int8)"}
	for _, x := range seen {
		m := "NULL::int8"
		if x.Known {
			m = strconv.FormatInt(x.Micro, 10) + "::int8"
		}
		vals = append(vals, "("+literal(x.VXID)+", "+m+")")
	}
	fresh := "NULL::int8"
	if prevKnown {
		fresh = strconv.FormatInt(prev, 10) + "::int8"
	}
	micros := func(e string) string { return "(extract(epoch from " + e + ") * 1000000)::int8" }
	h := "(SELECT CASE WHEN pg_is_in_recovery() OR EXISTS (SELECT 1 FROM b WHERE b.at IS NULL) THEN NULL ELSE least(" +
		micros("now()") + ", (SELECT min(b.at) FROM b)) END)"
	hpos := s.typedCreated("(SELECT " + s.bound(s.O.CreatedAt, "('epoch'::timestamptz + (SELECT h FROM hz) * '1 microsecond'::interval)") + ")")
	var cols []string
	for _, p := range ends {
		cols = append(cols, "(least("+s.typedCreated(literal(p.At))+", "+hpos+"))::text")
	}
	sel := "SELECT coalesce((SELECT array_agg(v ORDER BY v) FROM b), '{}'), coalesce((SELECT array_agg(at ORDER BY v) FROM b), '{}'), " +
		micros("now()") + ", (SELECT h FROM hz) IS NOT NULL, pg_postmaster_start_time()::text"
	if len(cols) > 0 {
		sel += ", " + strings.Join(cols, ", ")
	}
	return fmt.Sprintf(`WITH db AS (SELECT oid FROM pg_database WHERE datname = current_database()),
seen(v, at) AS (VALUES %s),
open AS (SELECT DISTINCT l.virtualtransaction AS v FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.virtualtransaction IS NOT NULL AND l.pid IS DISTINCT FROM pg_backend_pid()
    AND (a.datid = (SELECT oid FROM db) OR l.pid IS NULL AND l.database = (SELECT oid FROM db))),
b AS (SELECT o.v, CASE WHEN s.v IS NOT NULL THEN s.at ELSE %s END AS at FROM open o LEFT JOIN seen s ON s.v = o.v),
hz AS (SELECT %s AS h)
%s`, strings.Join(vals, ", "), fresh, h, sel)
}

// WalkPosBeforeQuery tells whether position a is not after b (one bool).
func (s *Spec) WalkPosBeforeQuery(a, b WalkPos) string {
	return "SELECT " + s.typedCreated(literal(a.At)) + " <= " + s.typedCreated(literal(b.At))
}
