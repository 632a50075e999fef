package leader

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
type pgSession struct{ conn *pgx.Conn }

// tryLockSQL takes the locks it can. The pool's fence runs it inside a
// read-only transaction it rolls back; a session-level advisory lock
// outlives the rollback.
const tryLockSQL = `SELECT pg_try_advisory_lock(k) FROM unnest($1::int8[]) WITH ORDINALITY AS t(k, i) ORDER BY i`

func (s *pgSession) TryLock(ctx context.Context, keys []int64) ([]bool, error) {
	if len(keys) == 0 {
		var one int
		if err := s.conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		return nil, nil
	}
	rows, err := s.conn.Query(ctx, tryLockSQL, keys)
	if err != nil {
		return nil, fmt.Errorf("pg_try_advisory_lock: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return nil, fmt.Errorf("pg_try_advisory_lock: %w", err)
	}
	return got, nil
}

// holdersSQL lists the advisory locks of this database that other sessions
// hold on a bigint key (objsubid 1: the key's high half in classid, its
// low half in objid), with the holder's application_name, which
// pg_stat_activity shows to every role.
const holdersSQL = `SELECT l.classid::int8, l.objid::int8, coalesce(a.application_name, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

func (s *pgSession) Holders(ctx context.Context) (map[int64]string, error) {
	rows, err := s.conn.Query(ctx, holdersSQL)
	if err != nil {
		return nil, fmt.Errorf("pg_locks: %w", err)
	}
	out := map[int64]string{}
	var hi, lo int64
	var app string
	_, err = pgx.ForEachRow(rows, []any{&hi, &lo, &app}, func() error {
		out[int64(uint64(hi)<<32|uint64(lo))] = app
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pg_locks: %w", err)
	}
	return out, nil
}

func (s *pgSession) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.conn.Close(ctx)
}
