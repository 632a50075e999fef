package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// PGDialer opens lease sessions on db's server (pg.OpenLeaseSession),
// named for identity, with t's keepalives, each counted against budgets
// (nil: not counted).
func PGDialer(db *config.Database, identity string, t Timing, budgets *pg.Budgets) Dialer {
	return func(ctx context.Context) (Session, error) {
		conn, err := pg.OpenLeaseSession(ctx, db, AppName(identity), t.Keepalive(), budgets)
		if err != nil {
			return nil, err
		}
		return &pgSession{conn: conn}, nil
	}
}

// pgSession is a Session on one pgx connection.
type pgSession struct {
	conn *pgx.Conn
	// open is the read-only transaction a try of some locks left open,
	// so that a wait sent right after it (a standby's, awaitHeld) goes in
	// the same transaction: a standby then costs the server one
	// transaction per Wait, not two. Any other call, or End, ends it
	// first. Session-level advisory locks outlive the transaction's end.
	open pgx.Tx
}

// End ends the transaction a try left open, if any (Run calls it before
// each pause, so that no session idles in a transaction).
func (s *pgSession) End(ctx context.Context) error {
	if s.open == nil {
		return nil
	}
	tx := s.open
	s.open = nil
	if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("end the try's transaction: %w", err)
	}
	return nil
}

// tryLockSQL takes the locks it can and, for each it could not, names
// the session holding it, in one statement (one transaction: a standby's
// try costs the server one small read-only transaction per retry). A key
// splits in pg_locks into its high half (classid) and low half (objid),
// objsubid 1 marking a bigint key; pg_stat_activity shows every role the
// holder's application_name. A lock not taken whose holder is gone by
// the time pg_locks is read has no row: the next try takes it.
const tryLockSQL = `WITH t AS MATERIALIZED (
  SELECT k, i, pg_try_advisory_lock(k) AS taken FROM unnest($1::int8[]) WITH ORDINALITY AS u(k, i))
SELECT t.taken, h.app IS NOT NULL, coalesce(h.app, '')
FROM t LEFT JOIN LATERAL (
  SELECT coalesce(a.application_name, '') AS app
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE NOT t.taken AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid::int8 = (t.k >> 32) & 4294967295 AND l.objid::int8 = t.k & 4294967295
  LIMIT 1) h ON true
ORDER BY t.i`

func (s *pgSession) TryLock(ctx context.Context, keys []int64) ([]Try, error) {
	if err := s.End(ctx); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		var one int
		if err := s.conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		return nil, nil
	}
	tx, err := s.conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("pg_try_advisory_lock: %w", err)
	}
	s.open = tx
	rows, err := tx.Query(ctx, tryLockSQL, keys)
	if err != nil {
		return nil, fmt.Errorf("pg_try_advisory_lock: %w", err)
	}
	var out []Try
	var tr Try
	_, err = pgx.ForEachRow(rows, []any{&tr.Taken, &tr.Held, &tr.Holder}, func() error {
		out = append(out, tr)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pg_try_advisory_lock: %w", err)
	}
	return out, nil
}

// lockNotAvailable is the SQLSTATE of a lock wait ended by lock_timeout.
const lockNotAvailable = "55P03"

// Wait takes the lock of key, waiting for it at most wait: one statement
// that the server answers the moment the lock is freed (the holder's
// session ended or freed it). The statement's limits are raised for this
// one transaction only (set_config(..., true) before it in the same
// batch), so the session's own limits stay those of its checks.
func (s *pgSession) Wait(ctx context.Context, key int64, wait time.Duration) (bool, error) {
	ms := wait.Milliseconds()
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
		fmt.Sprint(ms), fmt.Sprint(ms+time.Second.Milliseconds()))
	b.Queue(`SELECT pg_advisory_lock($1)`, key)
	var err error
	if tx := s.open; tx != nil {
		// In the try's transaction, which ends with the wait.
		err = tx.SendBatch(ctx, b).Close()
		if eerr := s.End(context.WithoutCancel(ctx)); err == nil && eerr != nil {
			err = eerr
		}
	} else {
		err = s.conn.SendBatch(ctx, b).Close()
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == lockNotAvailable {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pg_advisory_lock: %w", err)
	}
	return true, nil
}

func (s *pgSession) Close() {
	s.open = nil // ends with the session
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.conn.Close(ctx)
}

// Unlock frees the locks of keys (each held once by this session: a
// session takes a lock only when it does not hold it).
func (s *pgSession) Unlock(ctx context.Context, keys []int64) error {
	if err := s.End(ctx); err != nil {
		return err
	}
	if _, err := s.conn.Exec(ctx, `SELECT pg_advisory_unlock(k) FROM unnest($1::int8[]) AS u(k)`, keys); err != nil {
		return fmt.Errorf("pg_advisory_unlock: %w", err)
	}
	return nil
}
