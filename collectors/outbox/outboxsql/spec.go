package outboxsql

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// ReadNow is the time the rows a session sees are as of, in place of
// now() in every query: now() on a primary, and on a standby that has
// replayed all the WAL it received; on a standby with WAL waiting to be
// replayed (replay lagging or paused), the commit time of the last
// transaction it replayed (the server's start when it replayed none
// since: its rows are at least that old). Ages and deadlines are then judged at the time
// the standby's rows are true for, not at a now() they are not: a row the
// primary published while replay paused is not aged past its deadline
// for the pause, and the published watermark stays behind what is
// visible, so rows that appear when replay resumes are counted even if
// their published_at is older than the last collection. It is a
// sub-select, computed once per statement.
const ReadNow = `(SELECT CASE WHEN pg_is_in_recovery() AND NOT coalesce(pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn(), false)
  THEN least(now(), coalesce(pg_last_xact_replay_timestamp(), pg_postmaster_start_time())) ELSE now() END)`

// Spec is an outbox's configuration joined with its table's column types:
// it builds the queries the collector, the stuck-rows page and check run.
type Spec struct {
	Name      string
	O         *config.Outbox
	IntStatus bool
	table     string
	cols      map[string]Column
	// Behind is the lookback of an outbox published by a replication
	// slot (behind.go); 0 for any other.
	Behind time.Duration
}

// NewSpec builds the queries of outbox name. cols are the table's columns
// from Introspect; the status column's type decides how status values are
// written, and the timestamp columns' types how they are compared (the
// outbox's check judges the rest). With an integer status column, every
// configured status value must be an integer. An outbox with a preset of
// several schema generations is read as the generation its columns
// match: Spec.O is that outbox.
func NewSpec(name string, o *config.Outbox, cols map[string]Column) (*Spec, error) {
	o, _ = o.ForColumns(HasColumn(cols))
	o = o.WithNullStatus()
	if c, ok := cols[o.Status]; ok && c.Type == "bool" {
		var err error
		if o, err = boolStatuses(o); err != nil {
			return nil, fmt.Errorf("outbox %q: %w", name, err)
		}
	}
	s := &Spec{Name: name, O: o, table: pg.Table(o.Table), cols: cols}
	if o.OffsetsTable != "" {
		s.table = offsetsFrom(o)
	}
	if o.Status != "" {
		c, ok := cols[o.Status]
		if !ok {
			return nil, fmt.Errorf("outbox %q: status column %q does not exist in %s", name, o.Status, o.Table)
		}
		s.IntStatus = c.IsInteger()
	}
	for _, vals := range [][]string{o.Pending, o.InFlight, o.Published, o.Dead, o.Unknown} {
		for _, v := range vals {
			if _, err := CanonicalStatus(v, s.IntStatus); err != nil {
				return nil, fmt.Errorf("outbox %q: %w", name, err)
			}
		}
	}
	return s, nil
}

// boolStatuses is o, whose status column is a boolean (a published or
// dispatched flag), with its status values written as the server writes
// a boolean as text, true or false, so that the rules compare them with
// what the queries read.
func boolStatuses(o *config.Outbox) (*config.Outbox, error) {
	c := *o
	var err error
	conv := func(vals []string) []string {
		out := make([]string, len(vals))
		for i, v := range vals {
			b, e := strconv.ParseBool(strings.TrimSpace(v))
			switch {
			case v == config.NullStatusValue:
				out[i] = v
			case e != nil:
				if err == nil {
					err = fmt.Errorf("status value %q is not true or false, but the status column is a boolean", v)
				}
			default:
				out[i] = strconv.FormatBool(b)
			}
		}
		return out
	}
	c.Pending, c.InFlight, c.Published, c.Dead, c.Unknown = conv(o.Pending), conv(o.InFlight), conv(o.Published), conv(o.Dead), conv(o.Unknown)
	return &c, err
}

// HasColumn reports the columns of cols, as config's presets ask.
func HasColumn(cols map[string]Column) func(string) bool {
	return func(c string) bool { _, ok := cols[c]; return ok }
}

// nullStatus is what a NULL status reads as: NullStatusValue with
// null_status, else ”.
func (s *Spec) nullStatus() string {
	if s.O.NullStatus != "" {
		return pg.Literal(config.NullStatusValue)
	}
	return "''"
}

// attemptsOnInsert is the attempts value of a row never retried.
func (s *Spec) attemptsOnInsert() string { return strconv.Itoa(s.O.AttemptsOnInsert) }

// Table is the outbox's table as the queries name it, quoted.
func (s *Spec) Table() string { return s.table }

func col(name string) string { return "t." + pg.Ident(name) }

// Zoned reports a `timestamp without time zone` column: its values are
// read in the time_zone of the config, else in the session's TimeZone.
func (s *Spec) Zoned(c string) bool { return s.cols[c].Type == "timestamp" }

// AsTimestamptz is expr, a value of column c's type, as timestamptz,
// read as the queries read it (time_zone, else the session's TimeZone).
func (s *Spec) AsTimestamptz(c, expr string) string { return s.tz(c, expr) }

// tz is expr, a value of column c's type, as timestamptz. The conversion
// is applied to the value, never to the column inside an aggregate or a
// comparison, so that the column's index still serves the query.
func (s *Spec) tz(c, expr string) string {
	if u := s.epochUnit(c); u != "" {
		return "('epoch'::timestamptz + (" + expr + ") * '" + u + "'::interval)"
	}
	if !s.Zoned(c) {
		return expr
	}
	if s.O.TimeZone != "" {
		return "(" + expr + " AT TIME ZONE " + pg.Literal(s.O.TimeZone) + ")"
	}
	return "(" + expr + ")::timestamptz"
}

// bound is tzExpr, a timestamptz, in the type of column c, so that c
// compared with it is an index condition: a zoned timestamp column is
// compared in its time_zone; without one, timestamp against timestamptz
// is a cross-type B-tree operator in the session's TimeZone.
func (s *Spec) bound(c, tzExpr string) string {
	if u := s.epochUnit(c); u != "" {
		return "floor(extract(epoch from (" + tzExpr + ")) / extract(epoch from '" + u + "'::interval))::int8"
	}
	if s.Zoned(c) && s.O.TimeZone != "" {
		return "((" + tzExpr + ") AT TIME ZONE " + pg.Literal(s.O.TimeZone) + ")"
	}
	return tzExpr
}

// epochUnit is, for a time column of an integer type read with
// epoch_unit, the interval one unit of it is; "" for any other column.
func (s *Spec) epochUnit(c string) string {
	if s.O.EpochUnit == "" || !s.cols[c].IsInteger() {
		return ""
	}
	return map[string]string{"s": "1 second", "ms": "1 millisecond", "us": "1 microsecond"}[s.O.EpochUnit]
}

// epochMicros is a timestamptz expression in microseconds since the epoch.
func epochMicros(tzExpr string) string {
	return "(extract(epoch from " + tzExpr + ") * 1000000)::int8"
}

func interval(d time.Duration) string {
	return "'" + strconv.FormatInt(d.Microseconds(), 10) + " microseconds'::interval"
}

// literal writes one status value as the queries have it: inlined, so
// that the planner can match a partial index predicate such as status IN
// ('PENDING','CLAIMED'); integers in canonical form.
func (s *Spec) literal(v string) string {
	if s.IntStatus {
		c, _ := CanonicalStatus(v, true) // NewSpec checked them
		return c
	}
	return pg.Literal(v)
}

func (s *Spec) rules(q string) sqlRules { return sqlRules{o: s.O, q: q, lit: s.literal} }

// UnpublishedPredicate is the condition of unpublished rows, as it stands
// in every query and in the partial index: "" for a delete-on-publish
// table, where every row is unpublished.
func (s *Spec) UnpublishedPredicate() string { return s.rules("t.").unpublished() }

// DeadPredicate is the condition of dead rows, "" when the outbox has no
// way to mark a row dead.
func (s *Spec) DeadPredicate() string { return s.rules("t.").dead() }

// ClaimedPredicate is, among unpublished rows, the condition of claimed
// ones; "" when no row is ever claimed.
func (s *Spec) ClaimedPredicate() string { return s.rules("t.").claimed() }

// UnclassifiedPredicate is the condition of rows in no state; "" when
// every row has one.
func (s *Spec) UnclassifiedPredicate() string { return s.rules("t.").unclassified() }

// unknownPredicate is, among unclaimed unpublished rows, the condition of
// an unknown result: a status listed under both pending and unknown, or
// unknown_when; "" when an unclaimed row never has one.
func (s *Spec) unknownPredicate(q string) string {
	var p []string
	if up := unknownPending(s.O); len(up) > 0 {
		p = append(p, s.rules(q).in(up))
	}
	if s.O.UnknownWhen != "" {
		p = append(p, "("+s.O.UnknownWhen+")")
	}
	if len(p) == 0 {
		return ""
	}
	return "(" + strings.Join(p, " OR ") + ")"
}

// where joins predicates with AND and adds the configured filter, the
// only raw SQL besides unknown_when, in parentheses.
func (s *Spec) where(preds ...string) string {
	if s.O.Filter != "" {
		preds = append(preds, "("+s.O.Filter+")")
	}
	if p := and(preds...); p != "" {
		return p
	}
	return "TRUE"
}

func (s *Spec) labelExprs() []string {
	out := make([]string, len(s.O.Labels))
	for i, l := range s.O.Labels {
		out[i] = col(l.Column) + "::text"
	}
	return out
}

// LeaseColumn is the column whose value identifies a lease: lease_until,
// or claimed_at with lease_ttl; "" without a lease to judge.
func (s *Spec) LeaseColumn() string {
	if s.O.LeaseUntil != "" {
		return s.O.LeaseUntil
	}
	if s.O.ClaimedAt != "" && s.O.LeaseTTL > 0 {
		return s.O.ClaimedAt
	}
	return ""
}

// leasePassed is the condition that the lease of column value v (an
// expression of the lease column's type) has passed; "" without a lease.
func (s *Spec) leasePassed(v string) string {
	lc := s.LeaseColumn()
	switch {
	case lc == "":
		return ""
	case s.O.LeaseUntil != "":
		return v + " < " + s.bound(lc, ReadNow)
	default:
		return v + " < " + s.bound(lc, ReadNow+" - "+interval(s.O.LeaseTTL))
	}
}

// leaseExpiry is the expiry, as timestamptz, of the lease whose column
// value is v.
func (s *Spec) leaseExpiry(v string) string {
	lc := s.LeaseColumn()
	if s.O.LeaseUntil != "" {
		return s.tz(lc, v)
	}
	return s.tz(lc, v) + " + " + interval(s.O.LeaseTTL)
}

// factExprs are the SELECT expressions of a row's Facts, in Facts order:
// status, claim set, lease passed, attempted, unknown_when.
func (s *Spec) factExprs() []string {
	o := s.O
	st := "''::text"
	if o.Status != "" {
		st = "coalesce(" + col(o.Status) + "::text, " + s.nullStatus() + ")"
	}
	claim, passed := "false", "false"
	if cc := claimColumn(o); cc != "" {
		claim = col(cc) + " IS NOT NULL"
	}
	if p := s.leasePassed(col(s.LeaseColumn())); s.LeaseColumn() != "" {
		passed = "coalesce(" + p + ", false)"
	}
	attempted := "false"
	if o.Attempts != "" {
		attempted = "coalesce(" + col(o.Attempts) + " > " + s.attemptsOnInsert() + ", false)"
	}
	uw := "false"
	if o.UnknownWhen != "" {
		uw = "coalesce((" + o.UnknownWhen + "), false)"
	}
	return []string{st, claim, passed, attempted, uw}
}

// CanonicalStatus returns a configured status value as the query will
// read it back (status::text): an integer status in canonical decimal
// form, so that "01" and "1" match.
func CanonicalStatus(v string, intStatus bool) (string, error) {
	if !intStatus || v == config.NullStatusValue {
		return v, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return "", &statusError{value: v}
	}
	return strconv.FormatInt(n, 10), nil
}

type statusError struct{ value string }

func (e *statusError) Error() string {
	return "status value " + strconv.Quote(e.value) + " is not an integer, but the status column is"
}
