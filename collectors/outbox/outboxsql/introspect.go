package outboxsql

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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
