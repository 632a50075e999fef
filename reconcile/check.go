package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// reconcileNeed is one table a reconcile job reads, the columns it reads
// and the column lists its range and point queries seek by. A sweep reads
// the columns of covers; an index leading with covers[0] that holds them
// all (as keys or INCLUDEd) lets it read the index alone (nil: unknown,
// as with an outbox filter).
type reconcileNeed struct {
	side     string
	database string
	table    string
	columns  []string
	indexes  [][]string
	covers   []string
	// roles says what each column must be: a key, a version or a time.
	roles map[string]columnRole
}

// columnRole is what a column a reconcile job reads is used as.
type columnRole int

const (
	roleKey columnRole = iota + 1
	roleVersion
	roleTime
)

// reconcileNeeds lists the tables job r reads and what each must hold.
func reconcileNeeds(r *config.ReconcileJob, cfg *config.Config) []reconcileNeed {
	a := r.Authority
	auth := reconcileNeed{side: "authority", database: a.Database, table: a.Table,
		columns: []string{a.Key, a.Version, a.CreatedAt}, indexes: [][]string{{a.Key}, {a.CreatedAt}},
		covers: []string{a.Key, a.Version, a.CreatedAt},
		roles:  map[string]columnRole{a.Key: roleKey, a.Version: roleVersion, a.CreatedAt: roleTime}}
	if a.UpdatedAt != "" {
		auth.columns = append(auth.columns, a.UpdatedAt)
		auth.covers = append(auth.covers, a.UpdatedAt)
		auth.roles[a.UpdatedAt] = roleTime
	}
	needs := []reconcileNeed{auth}
	if r.Outbox != nil {
		o := cfg.Outboxes[r.Outbox.Name]
		n := reconcileNeed{side: "outbox", database: o.Database, table: o.Table,
			columns: []string{r.Outbox.Key, r.Outbox.Version}, indexes: [][]string{{r.Outbox.Key, r.Outbox.Version}},
			roles: map[string]columnRole{r.Outbox.Key: roleKey, r.Outbox.Version: roleVersion}}
		if o.PublishedAt != "" {
			n.columns = append(n.columns, o.PublishedAt)
			n.roles[o.PublishedAt] = roleTime
		}
		// Reconcile reads every outbox row, whatever the filter.
		n.covers = []string{r.Outbox.Key, r.Outbox.Version}
		for _, c := range []string{o.Status, o.PublishedAt, o.DeadAt} {
			if c != "" {
				n.covers = append(n.covers, c)
			}
		}
		needs = append(needs, n)
	}
	if t := r.Target; t != nil {
		needs = append(needs, reconcileNeed{side: "target", database: t.Database, table: t.Table,
			columns: []string{t.Key, t.Version}, indexes: [][]string{{t.Key}}, covers: []string{t.Key, t.Version},
			roles: map[string]columnRole{t.Key: roleKey, t.Version: roleVersion}})
	}
	return needs
}

// hasLeadingIndex asks whether a valid, non-partial index leads with the
// columns $2 and holds the columns $3 among its keys and INCLUDEd ones.
const hasLeadingIndex = `
SELECT EXISTS (
  SELECT 1 FROM pg_index i
  WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indpred IS NULL
    AND ARRAY(SELECT a.attname::text
              FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              WHERE k.ord <= cardinality($2::text[])
              ORDER BY k.ord) = $2::text[]
    AND ARRAY(SELECT a.attname::text
              FROM unnest(i.indkey::int2[]) AS k(attnum)
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) @> $3::text[])`

// tableColumns lists a table's columns with their types (domains resolved
// to their base type) and NOT NULL.
const tableColumns = `
SELECT a.attname::text, format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END, NULL), a.attnotnull
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

// column is one column of a table as the catalog describes it.
type column struct {
	typ     string
	notNull bool
}

// keyClass is how reconcile compares keys of an SQL type: "integer",
// "uuid", "text", or "" for a type it cannot use as a key.
func keyClass(typ string) string {
	switch typ {
	case "smallint", "integer", "bigint":
		return "integer"
	case "uuid":
		return "uuid"
	case "text", "character varying", "character":
		return "text"
	}
	return ""
}

// checkColumn says what is wrong with a column for its role (problem) or
// worth knowing (hint).
func checkColumn(side, table, name string, role columnRole, c column) (problem, hint string) {
	where := fmt.Sprintf("%s table %s column %s", side, table, name)
	switch role {
	case roleKey:
		if keyClass(c.typ) == "" {
			return fmt.Sprintf("%s is %s: a key must be smallint, integer, bigint, text, varchar or uuid", where, c.typ), ""
		}
		if !c.notNull {
			return fmt.Sprintf("%s may be NULL: a NULL key cannot be compared and fails the run; make it NOT NULL (a primary key is)", where), ""
		}
	case roleVersion:
		if keyClass(c.typ) != "integer" {
			return fmt.Sprintf("%s is %s: a version must be smallint, integer or bigint", where, c.typ), ""
		}
		if !c.notNull {
			return "", fmt.Sprintf("%s may be NULL: a NULL version is compared as a value of its own, behind every integer", where)
		}
	case roleTime:
		switch c.typ {
		case "timestamp with time zone":
		case "timestamp without time zone", "date":
			return "", fmt.Sprintf("%s is %s: it is compared with the database's now() in the session's time zone; timestamptz avoids the ambiguity", where, c.typ)
		default:
			return fmt.Sprintf("%s is %s: a time column must be timestamptz, timestamp or date", where, c.typ), ""
		}
		if !c.notNull {
			return "", fmt.Sprintf("%s may be NULL: a row whose %s is NULL is never judged", where, name)
		}
	}
	return "", ""
}

// keysCompatible says what is wrong, if anything, with comparing the key
// types of the sides: the outbox is joined with the authority in SQL, so
// its key must be of the authority's kind; the target is compared in Go,
// where a uuid and a text key compare as text.
func keysCompatible(keys map[string]string) []string {
	var out []string
	a, ok := keys["authority"]
	if !ok {
		return nil
	}
	if o, ok := keys["outbox"]; ok && keyClass(o) != keyClass(a) {
		out = append(out, fmt.Sprintf("the outbox key is %s and the authority key %s: the outbox is joined with the authority by key, so they must both be integers, both uuid or both text", o, a))
	}
	if t, ok := keys["target"]; ok && (keyClass(t) == "integer") != (keyClass(a) == "integer") {
		out = append(out, fmt.Sprintf("the target key is %s and the authority key %s: an integer key cannot be compared with a non-integer one", t, a))
	}
	return out
}

// CheckReport is what check found for one reconcile job.
type CheckReport struct {
	Job string
	// Problems fail the check; Hints are advice that does not.
	Problems, Hints []string
	// Statements are the CREATE INDEX statements the job's queries want.
	Statements []string
}

// OK is whether the job's tables, columns and indexes all hold.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// Report is the report in the form every check prints.
func (r *CheckReport) Report() checktext.Report {
	items := make([]checktext.Item, len(r.Problems))
	for i, p := range r.Problems {
		items[i] = checktext.Item{What: p}
	}
	return checktext.Report{Heading: "reconcile " + r.Job, OK: r.OK(), Items: items, Notes: r.Hints, Statements: r.Statements}
}

// Check verifies job's tables, columns and the indexes its queries seek
// by, with the CREATE INDEX statements it wants. pools holds a pool for
// every database the job names. It only reads the catalog.
func Check(ctx context.Context, job string, cfg *config.Config, pools map[string]*pgxpool.Pool) *CheckReport {
	r := &CheckReport{Job: job}
	keys := map[string]string{}
	for _, n := range reconcileNeeds(cfg.Reconcile[job], cfg) {
		checkNeed(ctx, r, job, n, pools[n.database], keys)
	}
	r.Problems = append(r.Problems, keysCompatible(keys)...)
	return r
}

// checkNeed checks one table of the job: that it exists, its columns and
// their types, and its indexes; the key column's type goes into keys.
func checkNeed(ctx context.Context, r *CheckReport, job string, n reconcileNeed, pool *pgxpool.Pool, keys map[string]string) {
	have, err := readColumns(ctx, pool, n.table)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("%s table %s: %v", n.side, n.table, err))
		return
	}
	if len(have) == 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%s table %s does not exist (or this user may not see it)", n.side, n.table))
		return
	}
	for _, c := range n.columns {
		col, ok := have[c]
		if !ok {
			r.Problems = append(r.Problems, fmt.Sprintf("%s table %s has no column %s", n.side, n.table, c))
			continue
		}
		if n.roles[c] == roleKey {
			keys[n.side] = col.typ
		}
		problem, hint := checkColumn(n.side, n.table, c, n.roles[c], col)
		if problem != "" {
			r.Problems = append(r.Problems, problem)
		}
		if hint != "" {
			r.Hints = append(r.Hints, hint)
		}
	}
	for _, cols := range n.indexes {
		var exists bool
		if err := hasIndex(ctx, pool, n.table, cols, []string{}, &exists); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("%s table %s: look up indexes: %v", n.side, n.table, err))
			continue
		}
		if exists {
			continue
		}
		quoted := make([]string, len(cols))
		for i, c := range cols {
			quoted[i] = pg.Ident(c)
		}
		name := "outbox_exporter_" + job + "_" + n.side + "_" + strings.Join(cols, "_")
		r.Problems = append(r.Problems, fmt.Sprintf("%s table %s has no index leading with (%s)", n.side, n.table, strings.Join(cols, ", ")))
		r.Statements = append(r.Statements, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s);",
			pg.Ident(name), pg.Table(n.table), strings.Join(quoted, ", ")))
	}
	if h := coverHint(ctx, pool, n); h != "" {
		r.Hints = append(r.Hints, h)
	}
}

// coverHint says, when no index of n's table covers what a sweep reads,
// which one would: a sweep then reads the index alone instead of a heap
// page per row (0.4-0.6x the time in bench/reconcile.md). It is advice,
// not a failure; "" when covered, unknown or not answerable.
func coverHint(ctx context.Context, pool *pgxpool.Pool, n reconcileNeed) string {
	if len(n.covers) == 0 {
		return ""
	}
	var covered bool
	lead := n.indexes[0]
	if err := hasIndex(ctx, pool, n.table, lead, n.covers, &covered); err != nil || covered {
		return ""
	}
	include := n.covers[len(lead):]
	return fmt.Sprintf("a full sweep reads a heap page of %s %s for each row: an index on (%s) INCLUDE (%s) lets it read the index alone",
		n.side, n.table, strings.Join(lead, ", "), strings.Join(include, ", "))
}

// readColumns reads a table's columns, in a read-only transaction.
func readColumns(ctx context.Context, pool *pgxpool.Pool, table string) (map[string]column, error) {
	have := map[string]column{}
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, tableColumns, pg.Table(table))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var c column
			if err := rows.Scan(&name, &c.typ, &c.notNull); err != nil {
				return err
			}
			have[name] = c
		}
		return rows.Err()
	})
	return have, err
}

// hasIndex runs hasLeadingIndex in a read-only transaction.
func hasIndex(ctx context.Context, pool *pgxpool.Pool, table string, lead, holds []string, exists *bool) error {
	return pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, hasLeadingIndex, pg.Table(table), lead, holds).Scan(exists)
	})
}
