package pg

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// The fence: nothing a pool from PoolConfig runs ever commits, and
// nothing runs read-write, whatever its caller does.
//
// Statements the exporter runs through ReadOnly are safe by themselves: a
// transaction that began READ ONLY cannot turn read-write, and the
// rollback at its end also undoes what a read-only transaction may still
// do (set_config(..., false), large objects: PostgreSQL 15 lets lo_create
// run read-only). A caller that forgets ReadOnly is caught here, by the
// connection tracer, on the same connection before and after each
// statement or batch:
//
//   - a statement or batch sent outside a transaction runs inside BEGIN
//     READ ONLY ... ROLLBACK the guard wraps around it;
//   - a COMMIT (or END, PREPARE TRANSACTION) of the caller's transaction
//     is preceded by a ROLLBACK, so the caller's COMMIT finds no
//     transaction and keeps nothing;
//   - a BEGIN ... READ WRITE, or a BEGIN on a session whose default is no
//     longer read-only, closes the session instead; so does a string of
//     several statements holding transaction control (it could end the
//     transaction out of the guard's view), or a batch with transaction
//     control after its first statement;
//   - a pooled session no longer read-only by default is destroyed when
//     next acquired. PostgreSQL 14 and later report
//     default_transaction_read_only on every change (ParameterStatus), so
//     this costs no round trip; before 14 the acquire sends RESET ALL,
//     back to the read-only default the session was opened with.
//
// The wrapping costs two round trips per statement that a caller sends
// outside ReadOnly; through ReadOnly it costs nothing.

const readOnlyParam = "default_transaction_read_only"

// readOnlyDefault reports whether new transactions on the session start
// read-only. A server that does not report the parameter is trusted
// (RESET ALL on acquire restores it).
func readOnlyDefault(conn *pgx.Conn) bool {
	v := conn.PgConn().ParameterStatus(readOnlyParam)
	return v == "" || v == "on"
}

// firstWords returns the first two words of sql, lower case.
func firstWords(sql string) (string, string) {
	if len(sql) > 64 {
		sql = sql[:64] // the words that matter are short; spare a long query the copy
	}
	f := strings.Fields(strings.ToLower(sql))
	switch len(f) {
	case 0:
		return "", ""
	case 1:
		return f[0], ""
	}
	return f[0], f[1]
}

// transactionControl are the statements that begin or end a transaction.
var transactionControl = map[string]bool{"begin": true, "start": true, "commit": true, "end": true,
	"rollback": true, "abort": true, "prepare": true, "savepoint": true, "release": true}

// guard is the connection tracer that keeps every statement read-only and
// uncommitted. It wraps the tracer the DSN's config had, if any.
type guard struct {
	next pgx.QueryTracer
	// onRelease, when set, sees each session its pool takes back (before
	// the pool decides to keep it): the session budget closes it there
	// when other sessions wait for room (budget.go).
	onRelease func(*pgx.Conn)
	// acquiring, when set, counts the pool's Acquire calls in progress:
	// a session returned while one is waiting is kept for it.
	acquiring *atomic.Int64
}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (g guard) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if g.acquiring != nil {
		g.acquiring.Add(1)
	}
	return ctx
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (g guard) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {
	if g.acquiring != nil {
		g.acquiring.Add(-1)
	}
}

// TraceRelease implements pgxpool.ReleaseTracer. It runs in Release,
// before the pool looks at the session: a session closed here is
// destroyed, not kept idle.
func (g guard) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if g.onRelease != nil {
		g.onRelease(data.Conn)
	}
}

type wrappedKey struct{}

// control runs before sql goes out on conn; it returns ctx marked when it
// began a transaction around sql that the end of sql must roll back.
func (g guard) control(ctx context.Context, conn *pgx.Conn, sql string) context.Context {
	pc := conn.PgConn()
	if heads := config.StatementHeads(sql); len(heads) > 1 {
		for _, h := range heads {
			if transactionControl[h] {
				// It would end or begin a transaction in the middle of
				// the string, outside the guard's view.
				g.refuse(ctx, conn, "a string of several statements holds transaction control")
				return ctx
			}
		}
	}
	w1, w2 := firstWords(sql)
	if pc.TxStatus() != 'I' {
		if w1 == "commit" || w1 == "end" || (w1 == "prepare" && w2 == "transaction") {
			g.exec(ctx, conn, "ROLLBACK")
		}
		return ctx
	}
	switch w1 {
	case "begin", "start":
		if !readOnlyDefault(conn) || strings.Contains(strings.ToLower(sql), "read write") {
			g.refuse(ctx, conn, "a read-write transaction was asked for, or the session is no longer read-only by default")
		}
		return ctx
	case "commit", "end", "rollback", "abort":
		return ctx // no transaction: nothing to end
	}
	if !g.exec(ctx, conn, "BEGIN READ ONLY") {
		// Mostly a session that died or a caller that gave up: quietly
		// closed, the statement fails as it would have.
		g.close(ctx, conn)
		return ctx
	}
	return context.WithValue(ctx, wrappedKey{}, true)
}

// end rolls back the transaction control began around a statement.
func (g guard) end(ctx context.Context, conn *pgx.Conn) {
	if wrapped, _ := ctx.Value(wrappedKey{}).(bool); wrapped && conn.PgConn().TxStatus() != 'I' {
		if !g.exec(ctx, conn, "ROLLBACK") {
			g.close(ctx, conn) // the pool destroys it; nothing was committed
		}
	}
}

// exec sends a transaction-control statement on conn below pgx (and so
// below this tracer), under the caller's context: a caller that gave up
// gets its session closed instead, as pgx does on cancellation.
func (g guard) exec(ctx context.Context, conn *pgx.Conn, sql string) bool {
	if conn.PgConn().IsClosed() || conn.PgConn().IsBusy() {
		return false
	}
	_, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	return err == nil
}

// refuse closes the session and says why: whatever was about to run
// fails.
func (g guard) refuse(ctx context.Context, conn *pgx.Conn, why string) {
	slog.Default().Error("outbox_exporter: closing a database session instead of letting it write", "why", why,
		"application_name", ApplicationName)
	g.close(ctx, conn)
}

func (g guard) close(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = conn.PgConn().Close(cctx)
}

// TraceQueryStart implements pgx.QueryTracer.
func (g guard) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx = g.control(ctx, conn, data.SQL)
	if g.next != nil {
		return g.next.TraceQueryStart(ctx, conn, data)
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (g guard) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if g.next != nil {
		g.next.TraceQueryEnd(ctx, conn, data)
	}
	g.end(ctx, conn)
}

// TraceBatchStart implements pgx.BatchTracer.
func (g guard) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sql string
	if data.Batch != nil && len(data.Batch.QueuedQueries) > 0 {
		sql = data.Batch.QueuedQueries[0].SQL
		for _, q := range data.Batch.QueuedQueries[1:] {
			// Only the first statement is classified: one later in the
			// batch that ends or begins a transaction is refused.
			for _, h := range config.StatementHeads(q.SQL) {
				if transactionControl[h] {
					g.refuse(ctx, conn, "a batch holds transaction control after its first statement")
					return ctx
				}
			}
		}
	}
	ctx = g.control(ctx, conn, sql)
	if bt, ok := g.next.(pgx.BatchTracer); ok {
		return bt.TraceBatchStart(ctx, conn, data)
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (g guard) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if bt, ok := g.next.(pgx.BatchTracer); ok {
		bt.TraceBatchQuery(ctx, conn, data)
	}
}

// TraceBatchEnd implements pgx.BatchTracer.
func (g guard) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if bt, ok := g.next.(pgx.BatchTracer); ok {
		bt.TraceBatchEnd(ctx, conn, data)
	}
	g.end(ctx, conn)
}

// TraceCopyFromStart implements pgx.CopyFromTracer. COPY FROM writes: the
// exporter never sends one, and the guard wraps it like any statement, so
// it fails read-only.
func (g guard) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	ctx = g.control(ctx, conn, "copy")
	if ct, ok := g.next.(pgx.CopyFromTracer); ok {
		return ct.TraceCopyFromStart(ctx, conn, data)
	}
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (g guard) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	if ct, ok := g.next.(pgx.CopyFromTracer); ok {
		ct.TraceCopyFromEnd(ctx, conn, data)
	}
	g.end(ctx, conn)
}

// prepareConn hands out a pooled session only if it is still read-only
// by default; otherwise the pool destroys it and takes another. It runs on
// acquire, not on release: pgxpool runs AfterRelease in a goroutine, which
// returns sessions late and makes the pool open more of them.
func prepareConn(ctx context.Context, conn *pgx.Conn) (bool, error) {
	pc := conn.PgConn()
	switch pc.ParameterStatus(readOnlyParam) {
	case "on":
		return true, nil
	case "":
		// Not reported (PostgreSQL before 14): restore the session's
		// startup settings, read-only among them.
		_, err := pc.Exec(ctx, "RESET ALL").ReadAll()
		return err == nil, nil
	default:
		slog.Default().Error("outbox_exporter: a pooled session is no longer read-only by default; destroying it",
			"application_name", ApplicationName)
		return false, nil
	}
}

// fence installs the guard and the acquire check on a pool config.
func fence(pc *pgxpool.Config) {
	pc.ConnConfig.Tracer = guard{next: pc.ConnConfig.Tracer}
	pc.PrepareConn = prepareConn
}
