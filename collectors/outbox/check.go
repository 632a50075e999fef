package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// CheckItem is one thing check verified.
type CheckItem = checktext.Item

// CheckReport is what check found for one outbox.
type CheckReport struct {
	Outbox string      `json:"outbox"`
	Table  string      `json:"table"`
	Items  []CheckItem `json:"items"`
	// Statements are the CREATE INDEX statements the outbox's queries
	// want; check is not OK until they exist.
	Statements []string `json:"statements,omitempty"`
	// Notes are advice that does not make the report fail.
	Notes []string `json:"notes,omitempty"`
	OK    bool     `json:"ok"`
}

func (r *CheckReport) add(ok bool, what, format string, args ...any) {
	r.Items = append(r.Items, CheckItem{What: what, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

// Report is the report in the form every check prints.
func (r *CheckReport) Report() checktext.Report {
	return checktext.Report{Heading: fmt.Sprintf("outbox %s (table %s)", r.Outbox, r.Table),
		OK: r.OK, Items: r.Items, Notes: r.Notes, Statements: r.Statements}
}

// Text renders the report for a person at a terminal.
func (r *CheckReport) Text() string { return r.Report().String() }

// columnNeed is what a configured column must be.
type columnNeed struct {
	key, column string
	ok          func(outboxsql.Column) bool
	want        string
}

func anyType(outboxsql.Column) bool { return true }

func (o columnNeed) check(r *CheckReport, cols map[string]outboxsql.Column) {
	c, found := cols[o.column]
	what := fmt.Sprintf("column %s = %s", o.key, o.column)
	switch {
	case !found:
		r.add(false, what, "does not exist in %s", r.Table)
	case !o.ok(c):
		r.add(false, what, "is %s, want %s", c.Type, o.want)
	default:
		r.add(true, what, "%s", c.Type)
	}
}

// Check verifies outbox name on pool: the table exists, each configured
// column exists with a suitable type, and each query the configuration
// implies can be served by an index rather than reading the table's
// published history. It returns an error only when it could not ask the
// database; what it finds wrong is in the report.
//
// The plans are asked with EXPLAIN (never ANALYZE) inside a read-only
// transaction with enable_seqscan off: a small table is read sequentially
// whatever indexes it has, so the question asked is "can an index serve
// this query", which is what matters once the table is large.
func Check(ctx context.Context, pool *pgxpool.Pool, name string, o *config.Outbox) (*CheckReport, error) {
	r := &CheckReport{Outbox: name, Table: o.Table}
	var out *CheckReport
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		var err error
		out, err = checkTx(ctx, tx, r, name, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func checkTx(ctx context.Context, tx pgx.Tx, r *CheckReport, name string, o *config.Outbox) (*CheckReport, error) {
	cols, err := outboxsql.IntrospectOutbox(ctx, tx, o)
	if (errors.Is(err, outboxsql.ErrNoTable) || errors.Is(err, outboxsql.ErrOffsetsShape)) && o.OffsetsTable != "" {
		r.add(false, "table "+o.Table+" and offsets_table "+o.OffsetsTable, "%v (or this user may not see it)", err)
		return r, nil
	}
	if errors.Is(err, outboxsql.ErrNoTable) {
		r.add(false, "table "+o.Table, "does not exist (or this user may not see it)")
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check outbox %q: %w", name, err)
	}
	r.add(true, "table "+o.Table, "exists")
	o = presetItems(r, o, cols)
	noCreatedItem(r, o)

	needs := columnNeeds(o)
	needs = append(needs, orderNeeds(o)...)
	for _, n := range needs {
		n.check(r, cols)
	}
	for _, it := range r.Items {
		if !it.OK {
			return r, nil
		}
	}
	spec, err := outboxsql.NewSpec(name, o, cols)
	if err != nil {
		r.add(false, "status values", "%v", err)
		return r, nil
	}
	if err := timeZoneNotes(ctx, tx, r, spec); err != nil {
		return nil, fmt.Errorf("check outbox %q: %w", name, err)
	}
	if err := clockItems(ctx, tx, r, spec); err != nil {
		return nil, fmt.Errorf("check outbox %q: %w", name, err)
	}

	idx, err := tableIndexes(ctx, tx, o.Table)
	if err != nil {
		return nil, fmt.Errorf("check outbox %q: %w", name, err)
	}
	if planned, err := checkPlans(ctx, tx, r, spec, o, idx); err != nil || !planned {
		if err != nil {
			return nil, fmt.Errorf("check outbox %q: %w", name, err)
		}
		return r, nil
	}
	if err := unclassifiedNotes(ctx, tx, r, spec, idx); err != nil {
		return nil, fmt.Errorf("check outbox %q: %w", name, err)
	}
	notes, err := bloatNotes(ctx, tx, o.Table)
	if err != nil {
		return nil, fmt.Errorf("check outbox %q: %w", name, err)
	}
	r.Notes = append(r.Notes, notes...)
	r.Notes = append(r.Notes, labelLimitNotes(o, cols)...)
	r.OK = true
	for _, it := range r.Items {
		r.OK = r.OK && it.OK
	}
	return r, nil
}

// presetItems says which preset and schema generation an outbox with a
// preset matched, and returns the outbox as that generation reads it;
// when the table lacks columns the generation reads, it names them and
// the preset generation the table is closest to.
func presetItems(r *CheckReport, o *config.Outbox, cols map[string]outboxsql.Column) *config.Outbox {
	p := o.PresetUsed()
	if p == nil {
		return o
	}
	o, g := o.ForColumns(outboxsql.HasColumn(cols))
	var lacks []string
	for _, c := range g.Columns() {
		if _, ok := cols[c]; !ok {
			lacks = append(lacks, c)
		}
	}
	if len(lacks) == 0 {
		r.add(true, "preset "+p.Name, "schema %s (%s)", g.Name, p.Library)
		r.Notes = append(r.Notes, fmt.Sprintf("what %s %s cannot show: %s", p.Name, g.Name, g.Blind))
		return o
	}
	cp, cg, cm := config.ClosestPreset(outboxsql.HasColumn(cols))
	closest := fmt.Sprintf("closest: %s %s", cp.Name, cg.Name)
	if len(cm) > 0 {
		closest += ", lacking " + strings.Join(cm, ", ")
	}
	r.add(false, "preset "+p.Name, "the table matches no schema of it: schema %s lacks %s (%s)", g.Name, strings.Join(lacks, ", "), closest)
	return o
}

// columnNeeds are the configured columns and the types they must have.
func columnNeeds(o *config.Outbox) []columnNeed {
	ts := func(c outboxsql.Column) bool { return c.IsTimestamp() || o.EpochUnit != "" && c.IsInteger() }
	needs := []columnNeed{{"id", o.ID, anyType, ""}}
	if !o.NoCreatedAt() {
		needs = append(needs, columnNeed{"created_at", o.CreatedAt, ts, "timestamp or timestamptz (or an integer type, with epoch_unit)"})
	}
	for _, l := range o.Labels {
		needs = append(needs, columnNeed{"labels." + l.Name, l.Column, anyType, ""})
	}
	for _, n := range []columnNeed{
		{"status", o.Status, func(c outboxsql.Column) bool { return c.IsText() || c.IsInteger() || c.Type == "bool" }, "a text, enum, integer or boolean type"},
		{"published_at", o.PublishedAt, ts, "timestamp or timestamptz"},
		{"dead_at", o.DeadAt, ts, "timestamp or timestamptz"},
		{"lease_until", o.LeaseUntil, ts, "timestamp or timestamptz"},
		{"claimed_at", o.ClaimedAt, ts, "timestamp or timestamptz"},
		{"attempts", o.Attempts, func(c outboxsql.Column) bool { return c.IsInteger() }, "an integer type"},
		{"last_error", o.LastError, anyType, ""},
	} {
		if n.column != "" {
			needs = append(needs, n)
		}
	}
	return needs
}

// Bloated reports whether a partial index of size bytes holding about
// tuples entries was left large by a past backlog: PostgreSQL does not
// return an emptied index's pages, and scans of it stay several times
// slower (and its planner cost high enough to compile JIT) until it is
// rebuilt. A B-tree entry takes tens of bytes; above 100 MiB and 2000
// bytes per entry the index is over 20 times its size.
func Bloated(size int64, tuples float64) bool {
	if size < 100<<20 || tuples < 0 {
		return false
	}
	return float64(size) > 2000*max(tuples, 1)
}

// bloatNotes advises rebuilding the table's bloated partial indexes.
func bloatNotes(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname::text, pg_relation_size(c.oid), c.reltuples::float8 FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1) AND i.indpred IS NOT NULL ORDER BY 1`, pg.Table(table))
	if err != nil {
		return nil, fmt.Errorf("read index sizes of %s: %w", table, err)
	}
	defer rows.Close()
	var notes []string
	for rows.Next() {
		var (
			name   string
			size   int64
			tuples float64
		)
		if err := rows.Scan(&name, &size, &tuples); err != nil {
			return nil, fmt.Errorf("read index sizes of %s: %w", table, err)
		}
		if Bloated(size, tuples) {
			notes = append(notes, fmt.Sprintf("index %s is %d MiB for about %.0f entries, left large by a past backlog; "+
				"its scans are slower until it is rebuilt: REINDEX INDEX CONCURRENTLY %s;", name, size>>20, tuples, pg.Ident(name)))
		}
	}
	return notes, rows.Err()
}

// planNode is the part of EXPLAIN (FORMAT JSON) output check reads.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	Plans        []planNode `json:"Plans"`
}

func explain(ctx context.Context, tx pgx.Tx, q string, args ...any) (*planNode, error) {
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&raw); err != nil {
		return nil, err
	}
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) == 0 {
		return nil, fmt.Errorf("read plan: %v", err)
	}
	return &out[0].Plan, nil
}

// tableIndexes maps the table's index names to whether each is partial.
func tableIndexes(ctx context.Context, tx pgx.Tx, table string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname::text, i.indpred IS NOT NULL FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1) AND i.indisvalid`, pg.Table(table))
	if err != nil {
		return nil, fmt.Errorf("read indexes of %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		var partial bool
		if err := rows.Scan(&n, &partial); err != nil {
			return nil, fmt.Errorf("read indexes of %s: %w", table, err)
		}
		out[n] = partial
	}
	return out, rows.Err()
}

// judgePlan returns why a plan would read more than the rows it needs,
// or "" when it is served by an index. indexes maps the table's index
// names to whether each is partial. A scan of the table is fine through a
// partial index or with an index condition (for a delete-on-publish
// table, whose rows are all unpublished, through any index); a sequential
// scan never is.
func judgePlan(p *planNode, relname string, indexes map[string]bool, rule outboxsql.PlanRule, dop bool) string {
	var problems []string
	condFound := false
	var walk func(n *planNode)
	walk = func(n *planNode) {
		switch {
		case n.NodeType == "Seq Scan" && n.RelationName == relname:
			problems = append(problems, "reads the whole table (Seq Scan)")
		case n.IndexName != "":
			partial, ours := indexes[n.IndexName]
			if ours {
				if rule.CondOn != "" && strings.Contains(n.IndexCond, rule.CondOn) {
					condFound = true
				}
				if !partial && n.IndexCond == "" && !dop {
					problems = append(problems, "reads every entry of index "+n.IndexName)
				}
			}
		case rule.Ordered && (n.NodeType == "Sort" || n.NodeType == "Incremental Sort"):
			problems = append(problems, "sorts the rows instead of reading them in index order")
		}
		for i := range n.Plans {
			walk(&n.Plans[i])
		}
	}
	walk(p)
	if rule.CondOn != "" && !condFound {
		problems = append(problems, "has no index on "+rule.CondOn)
	}
	sort.Strings(problems)
	seen := map[string]bool{}
	uniq := problems[:0]
	for _, p := range problems {
		if !seen[p] {
			seen[p] = true
			uniq = append(uniq, p)
		}
	}
	return strings.Join(uniq, "; ")
}

// timeZoneNotes says, for each configured `timestamp without time zone`
// column, in which zone its values are read: time_zone, else the
// session's TimeZone, which check reads from the server.
func timeZoneNotes(ctx context.Context, tx pgx.Tx, r *CheckReport, s *outboxsql.Spec) error {
	o := s.O
	var zoned []string
	for _, c := range []string{o.CreatedAt, o.PublishedAt, o.DeadAt, o.LeaseUntil, o.ClaimedAt} {
		if c != "" && s.Zoned(c) && !slices.Contains(zoned, c) {
			zoned = append(zoned, c)
		}
	}
	if len(zoned) == 0 {
		if o.TimeZone != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("time_zone %s has no effect: no configured column is timestamp without time zone", o.TimeZone))
		}
		return nil
	}
	if o.TimeZone != "" {
		r.add(true, "time zone", "%s are timestamp without time zone, read as %s (time_zone)", strings.Join(zoned, ", "), o.TimeZone)
		return nil
	}
	var server string
	if err := tx.QueryRow(ctx, "SELECT current_setting('TimeZone')").Scan(&server); err != nil {
		return fmt.Errorf("read TimeZone: %w", err)
	}
	r.add(true, "time zone", "%s are timestamp without time zone, read as the session's TimeZone %s; "+
		"set time_zone if the writers store another zone (EF Core and Hibernate often write UTC)", strings.Join(zoned, ", "), server)
	return nil
}

// unclassifiedNotes lists the status values check found that the config
// names in no state, with their counts, read through the unclassified
// index (never a scan of the table: without the index it says so).
func unclassifiedNotes(ctx context.Context, tx pgx.Tx, r *CheckReport, s *outboxsql.Spec, idx map[string]bool) error {
	q := s.UnclassifiedStatusesQuery()
	if q == "" {
		return nil
	}
	if _, ok := idx[s.Indexes()["unclassified"].Name]; !ok {
		r.Notes = append(r.Notes, "status values named in no state were not looked for: they are read through index "+
			s.Indexes()["unclassified"].Name+", which does not exist yet")
		return nil
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("read unclassified statuses: %w", err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var st *string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return fmt.Errorf("read unclassified statuses: %w", err)
		}
		v := "NULL"
		if st != nil {
			v = strconv.Quote(strings.ToValidUTF8(*st, "\uFFFD"))
		}
		found = append(found, fmt.Sprintf("%s (%d rows)", v, n))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read unclassified statuses: %w", err)
	}
	if len(found) == 0 {
		r.add(true, "status values", "every row's status is named in the config")
		return nil
	}
	r.Notes = append(r.Notes, fmt.Sprintf("status values named in no state (counted as outbox_unclassified_events; among at most %d such rows): %s",
		outboxsql.MaxUnclassifiedRows, strings.Join(found, ", ")))
	return nil
}

// MaxIndexedLabelBytes is about the largest btree entry PostgreSQL
// accepts (a third of an 8 kB page, less the entry's header): an INSERT
// whose indexed values need more fails with "index row requires N bytes".
const MaxIndexedLabelBytes = 2700

// labelLimitNotes states the limit the indexes check asks for put on the
// writer: they hold the label columns, so once they exist a row whose
// label values (together, after compression) pass MaxIndexedLabelBytes
// can no longer be inserted. It is a note, not a failure: label values
// are usually short, and the writer may bound them itself.
func labelLimitNotes(o *config.Outbox, cols map[string]outboxsql.Column) []string {
	var unbounded []string
	for _, l := range o.Labels {
		if c, ok := cols[l.Column]; ok && (c.IsText() || c.Type == "bytea" || c.Type == "json" || c.Type == "jsonb") {
			unbounded = append(unbounded, l.Column)
		}
	}
	if len(unbounded) == 0 {
		return nil
	}
	checks := make([]string, len(unbounded))
	for i, c := range unbounded {
		checks[i] = fmt.Sprintf("octet_length(%s::text) <= 1000", pg.Ident(c))
	}
	return []string{fmt.Sprintf("the indexes hold the label columns %s: once they exist, PostgreSQL refuses an INSERT whose label values together need more than about %d bytes in an index entry (\"index row requires N bytes\"); the exporter cuts what it shows at max_label_length, but the writer must keep label values short, e.g. ALTER TABLE %s ADD CHECK (%s) NOT VALID",
		strings.Join(unbounded, ", "), MaxIndexedLabelBytes, pg.Table(o.Table), strings.Join(checks, " AND "))}
}

// noCreatedItem says what an outbox with no creation time cannot show.
func noCreatedItem(r *CheckReport, o *config.Outbox) {
	if !o.NoCreatedAt() {
		return
	}
	what := "no creation time: rows are counted by state, but the age of the oldest pending row, the rows past the deadline and the publish latency cannot be seen; those series are not exported"
	if o.Deadline > 0 {
		what += " (the deadline given is ignored)"
	}
	r.add(true, "created_at", "%s", what)
}
