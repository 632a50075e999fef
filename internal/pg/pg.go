// Package pg opens the exporter's read-only PostgreSQL pools and quotes
// identifiers taken from the configuration.
package pg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// ApplicationName is set on every session, so a DBA can find the exporter
// in pg_stat_activity.
const ApplicationName = "outbox_exporter"

// PoolConfig turns a configured database into a pgxpool configuration:
// at most MaxConnections sessions, each read-only, with statement_timeout
// and lock_timeout set as run-time parameters of the connection, so that
// they hold before the first statement runs, and fenced (fence.go): a
// session whose statements switched read-only off runs nothing more.
func PoolConfig(db *config.Database) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(db.DSN.Reveal())
	if err != nil {
		// pgx's parse errors may quote the DSN; never pass them on.
		return nil, fmt.Errorf("parse dsn %s: invalid connection string", config.RedactDSN(db.DSN.Reveal()))
	}
	pc.MaxConns = int32(db.MaxConnections)
	pc.MinConns = 0
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.HealthCheckPeriod = 30 * time.Second
	rp := pc.ConnConfig.RuntimeParams
	rp["application_name"] = ApplicationName
	rp["default_transaction_read_only"] = "on"
	// The config's predicates are checked with standard-conforming string
	// rules (config.CheckPredicate); the server must read them the same
	// way, or 'a\'' ) OR (true' would end its string where the check's
	// did not.
	rp["standard_conforming_strings"] = "on"
	rp["statement_timeout"] = fmt.Sprint(db.StatementTimeout.Milliseconds())
	rp["lock_timeout"] = fmt.Sprint(db.LockTimeout.Milliseconds())
	// JIT compiles a plan whose cost looks high (a bloated partial index
	// after a backlog drained) and costs more than the query itself.
	rp["jit"] = "off"
	rp["idle_in_transaction_session_timeout"] = fmt.Sprint((db.StatementTimeout * 2).Milliseconds())
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > db.StatementTimeout {
		pc.ConnConfig.ConnectTimeout = db.StatementTimeout
	}
	// Ad-hoc statements (check, the page's stuck rows) cache only their
	// descriptions, which survives DDL on the table; the hot queries that
	// benefit from a server-side plan (the outbox sampler's, reconcile's)
	// prepare themselves per connection or ask for the statement cache.
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	noPings(pc)
	fence(pc)
	return pc, nil
}

// freshKey marks, in a session's custom data, a session not yet handed
// out by its pool.
const freshKey = "outbox_exporter.fresh"

// noPings marks each new session fresh and has the pool hand out every
// session without a ping: a ping is one more transaction on the server
// per session handed out (pgx pings those idle over a second, which is
// every session at every scrape). A session the server ended since its
// last use (a restart, pg_terminate_backend) is found instead by the
// first exchange of the transaction it was handed out for, which is then
// sent again on the next session (ReadOnly, Rounds): a database's
// collections, sent together in one round on one session, do not all
// fail once more after the database is back.
func noPings(pc *pgxpool.Config) {
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		c.PgConn().CustomData()[freshKey] = true
		return nil
	}
	pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
}

// handedOutBefore reports whether conn was handed out by its pool before
// this use, and marks it so.
func handedOutBefore(conn *pgx.Conn) bool {
	d := conn.PgConn().CustomData()
	if d[freshKey] == nil {
		return true
	}
	delete(d, freshKey)
	return false
}

// endedBefore reports whether err, from the first exchange on conn, says
// that the session had ended before: the exchange ended the session with
// a connection-level error (a FATAL message of the server, a network
// error), and not because ctx ended. What was sent on it is read-only, so
// sending it again on another session repeats nothing.
func endedBefore(ctx context.Context, conn *pgx.Conn, err error) bool {
	if err == nil || ctx.Err() != nil || !conn.IsClosed() {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Severity == "FATAL" || strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Open creates a pool for db. It does not connect: the first query does,
// so an exporter starts while its database is down and recovers by itself.
func Open(ctx context.Context, db *config.Database) (*pgxpool.Pool, error) {
	pc, err := PoolConfig(db)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open pool %s: %w", config.RedactDSN(db.DSN.Reveal()), err)
	}
	return pool, nil
}

// Table quotes a validated "schema.table" or "table" name.
func Table(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// Ident quotes one validated identifier.
func Ident(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

// Literal quotes a string as an SQL literal. It is for values that must be
// inlined so that the planner can match partial-index predicates (status
// values from the configuration); never for input from a request.
func Literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
