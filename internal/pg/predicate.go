package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Predicate is one SQL predicate from the configuration, named by its key
// path (outboxes.messages.filter).
type Predicate struct {
	Key string
	SQL string
}

// PreparePredicates has the server parse and type-check each predicate as
// the WHERE clause of a query on table (aliased t, as the collectors
// write it) without running it: a predicate that is not one boolean
// expression over the table's columns fails by its key. Each is prepared
// as the unnamed statement in its own read-only transaction (a failed
// statement ends a transaction), so nothing is kept or run.
func PreparePredicates(ctx context.Context, b Beginner, table string, preds ...Predicate) error {
	var errs []error
	for _, p := range preds {
		if p.SQL == "" {
			continue
		}
		sql := fmt.Sprintf("SELECT 1 FROM %s t WHERE (%s)", Table(table), p.SQL)
		err := ReadOnly(ctx, b, func(tx pgx.Tx) error {
			_, err := tx.Conn().PgConn().Prepare(ctx, "", sql, nil)
			return err
		})
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			errs = append(errs, fmt.Errorf("%s is not one boolean expression over %s: %s", p.Key, table, pgErr.Message))
		case err != nil:
			return fmt.Errorf("prepare %s: %w", p.Key, err)
		}
	}
	return errors.Join(errs...)
}
