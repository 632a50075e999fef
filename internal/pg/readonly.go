package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Beginner is what ReadOnly needs: a pool, a pooled connection or a conn.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ReadOnly runs fn inside an explicit READ ONLY transaction and rolls it
// back afterwards. The session default (default_transaction_read_only) can
// be switched off by SQL the config supplies (a filter calling
// set_config); a transaction that began READ ONLY cannot be made read-write
// once its first query ran, so every statement of the exporter runs in
// one. Nothing is committed: a read-only transaction has nothing to keep.
//
// On a pool, a BEGIN that finds the session it was handed ended since
// its last use (pools do not ping, see noPings) is sent again on the
// next session; one opened for it fails for good.
func ReadOnly(ctx context.Context, b Beginner, fn func(pgx.Tx) error) error {
	pool, ok := b.(*pgxpool.Pool)
	if !ok {
		return readOnly(ctx, b, fn)
	}
	for {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("begin read-only transaction: %w", err)
		}
		conn := c.Conn()
		again := handedOutBefore(conn)
		began := false
		err = readOnly(ctx, c, func(tx pgx.Tx) error {
			began = true
			return fn(tx)
		})
		c.Release()
		if !began && again && endedBefore(ctx, conn, err) {
			continue
		}
		return err
	}
}

func readOnly(ctx context.Context, b Beginner, fn func(pgx.Tx) error) (err error) {
	tx, err := b.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin read-only transaction: %w", err)
	}
	defer func() {
		// Rollback of a read-only transaction discards nothing; its error
		// matters only when fn worked (a broken connection).
		rerr := tx.Rollback(context.WithoutCancel(ctx))
		if err == nil && rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = fmt.Errorf("end read-only transaction: %w", rerr)
		}
	}()
	return fn(tx)
}
