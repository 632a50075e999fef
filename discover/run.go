package discover

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Scan connects to db, reads its catalog in a read-only transaction and
// matches its tables. The error names the database, never its DSN.
func Scan(ctx context.Context, name string, db *config.Database) (Database, error) {
	pool, err := pg.Open(ctx, db)
	if err != nil {
		return Database{}, fmt.Errorf("database %s (%s): %w", name, config.RedactDSN(db.DSN.Reveal()), err)
	}
	defer pool.Close()
	var tables []Table
	err = pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		var err error
		tables, err = Catalog(ctx, tx)
		return err
	})
	if err != nil {
		return Database{}, fmt.Errorf("database %s (%s): %w", name, config.RedactDSN(db.DSN.Reveal()), err)
	}
	found, misses := Match(tables)
	return Database{Name: name, Found: found, Misses: misses}, nil
}
