// Package discover finds the outbox tables of a database from its catalog
// alone (never a row: no payload is read) and writes a configuration for
// them: a table shaped as a known library's (internal/config's presets) is
// written as `preset: NAME`, one shaped as an outbox by its names and
// types as hand-written keys, each with the indexes `check` will ask for.
//
// Catalog reads (I/O) are apart from the matching and the rendering, which
// are pure and tested without a database.
package discover

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// Table is one table as the catalog describes it.
type Table struct {
	Schema, Name string
	Cols         map[string]outboxsql.Column
}

// QualifiedName is schema.name, as the configuration's table key takes it.
func (t Table) QualifiedName() string { return t.Schema + "." + t.Name }

// catalogSQL lists every column of every ordinary or partitioned table
// the session can see, outside the system schemas; partitions are left
// out (their parent stands for them).
const catalogSQL = `
SELECT n.nspname::text, c.relname::text, a.attname::text, t.typname::text, t.typcategory::text, a.attnotnull
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type d ON d.oid = a.atttypid
JOIN pg_type t ON t.oid = CASE WHEN d.typtype = 'd' THEN d.typbasetype ELSE d.oid END
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
ORDER BY 1, 2, a.attnum`

// Catalog reads the tables of the database q is connected to.
func Catalog(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]Table, error) {
	rows, err := q.Query(ctx, catalogSQL)
	if err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	defer rows.Close()
	var out []Table
	for rows.Next() {
		var schema, table string
		var c outboxsql.Column
		if err := rows.Scan(&schema, &table, &c.Name, &c.Type, &c.Category, &c.NotNull); err != nil {
			return nil, fmt.Errorf("read the catalog: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].Schema != schema || out[n-1].Name != table {
			out = append(out, Table{Schema: schema, Name: table, Cols: map[string]outboxsql.Column{}})
		}
		out[len(out)-1].Cols[c.Name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	return out, nil
}
