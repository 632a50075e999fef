package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

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
}

func reconcileNeeds(job string, r *config.ReconcileJob, cfg *config.Config) []reconcileNeed {
	a := r.Authority
	needs := []reconcileNeed{{side: "authority", database: a.Database, table: a.Table,
		columns: []string{a.Key, a.Version, a.CreatedAt}, indexes: [][]string{{a.Key}, {a.CreatedAt}},
		covers: []string{a.Key, a.Version, a.CreatedAt}}}
	if r.Outbox != nil {
		o := cfg.Outboxes[r.Outbox.Name]
		n := reconcileNeed{side: "outbox", database: o.Database, table: o.Table,
			columns: []string{r.Outbox.Key, r.Outbox.Version}, indexes: [][]string{{r.Outbox.Key, r.Outbox.Version}}}
		if o.Filter == "" {
			n.covers = []string{r.Outbox.Key, r.Outbox.Version}
			for _, c := range []string{o.Status, o.PublishedAt, o.DeadAt, o.CreatedAt} {
				if c != "" {
					n.covers = append(n.covers, c)
				}
			}
		}
		needs = append(needs, n)
	}
	if t := r.Target; t != nil {
		needs = append(needs, reconcileNeed{side: "target", database: t.Database, table: t.Table,
			columns: []string{t.Key, t.Version}, indexes: [][]string{{t.Key}}, covers: []string{t.Key, t.Version}})
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

const tableColumns = `
SELECT a.attname::text FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

// checkReconcile verifies each reconcile job's tables, columns and the
// indexes its queries seek by, printing the CREATE INDEX statements it
// wants. It reports whether everything holds.
func checkReconcile(ctx context.Context, w io.Writer, cfg *config.Config, pools map[string]*pgxpool.Pool) bool {
	ok := true
	for _, job := range slices.Sorted(maps.Keys(cfg.Reconcile)) {
		var problems, statements, hints []string
		for _, n := range reconcileNeeds(job, cfg.Reconcile[job], cfg) {
			pool := pools[n.database]
			rows, err := pool.Query(ctx, tableColumns, pg.Table(n.table))
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s table %s: %v", n.side, n.table, err))
				continue
			}
			have := map[string]bool{}
			for rows.Next() {
				var c string
				if err := rows.Scan(&c); err == nil {
					have[c] = true
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				problems = append(problems, fmt.Sprintf("%s table %s: %v", n.side, n.table, err))
				continue
			}
			if len(have) == 0 {
				problems = append(problems, fmt.Sprintf("%s table %s does not exist (or this user may not see it)", n.side, n.table))
				continue
			}
			for _, c := range n.columns {
				if !have[c] {
					problems = append(problems, fmt.Sprintf("%s table %s has no column %s", n.side, n.table, c))
				}
			}
			for _, cols := range n.indexes {
				var exists bool
				if err := pool.QueryRow(ctx, hasLeadingIndex, pg.Table(n.table), cols, []string{}).Scan(&exists); err != nil {
					problems = append(problems, fmt.Sprintf("%s table %s: look up indexes: %v", n.side, n.table, err))
					continue
				}
				if !exists {
					quoted := make([]string, len(cols))
					for i, c := range cols {
						quoted[i] = pg.Ident(c)
					}
					name := "outbox_exporter_" + job + "_" + n.side + "_" + strings.Join(cols, "_")
					problems = append(problems, fmt.Sprintf("%s table %s has no index leading with (%s)", n.side, n.table, strings.Join(cols, ", ")))
					statements = append(statements, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s);",
						pg.Ident(name), pg.Table(n.table), strings.Join(quoted, ", ")))
				}
			}
			if h := coverHint(ctx, pool, n); h != "" {
				hints = append(hints, h)
			}
		}
		if len(problems) == 0 {
			fmt.Fprintf(w, "reconcile %s: OK\n", job)
			for _, h := range hints {
				fmt.Fprintf(w, "  HINT %s\n", h)
			}
			continue
		}
		ok = false
		fmt.Fprintf(w, "reconcile %s: NOT OK\n", job)
		for _, p := range problems {
			fmt.Fprintf(w, "  FAIL %s\n", p)
		}
		if len(statements) > 0 {
			fmt.Fprintln(w, "  create these indexes (they do not block writes):")
			for _, s := range statements {
				fmt.Fprintf(w, "    %s\n", s)
			}
		}
		for _, h := range hints {
			fmt.Fprintf(w, "  HINT %s\n", h)
		}
	}
	return ok
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
	if err := pool.QueryRow(ctx, hasLeadingIndex, pg.Table(n.table), lead, n.covers).Scan(&covered); err != nil || covered {
		return ""
	}
	include := n.covers[len(lead):]
	return fmt.Sprintf("a full sweep reads a heap page of %s %s for each row: an index on (%s) INCLUDE (%s) lets it read the index alone",
		n.side, n.table, strings.Join(lead, ", "), strings.Join(include, ", "))
}
