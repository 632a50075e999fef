package pg

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The fence: every session of a pool from PoolConfig refuses to run a
// statement outside a transaction unless the session is still read-only
// by default, whatever its caller does.
//
// Statements the exporter runs through ReadOnly are safe by themselves: a
// transaction that began READ ONLY cannot turn read-write, and the
// rollback at its end also undoes a set_config(..., false) made inside it.
// A statement run outside one (a caller that forgot ReadOnly) commits what
// it set: set_config('default_transaction_read_only', 'off', false) in a
// filter leaves the session read-write for the next statement. PostgreSQL
// 14 and later report default_transaction_read_only to the client on every
// change (ParameterStatus), so the fence costs no round trip:
//
//   - before each statement or batch sent outside a transaction, a session
//     whose default is no longer read-only is closed, so the statement
//     fails instead of running read-write;
//   - a session released in that state is destroyed, not pooled.
//
// A server that does not report the parameter (before 14) gets RESET ALL
// on every release instead, back to the read-only default the session was
// opened with.

const readOnlyParam = "default_transaction_read_only"

// sessionSafe reports whether a statement may run on conn now: inside a
// transaction (which began read-only, since the session was read-only
// when it began, or the BEGIN itself was refused), or on a session still
// read-only by default. A server that does not report the parameter is
// trusted between releases (RESET ALL restores it).
func sessionSafe(conn *pgx.Conn) bool {
	pc := conn.PgConn()
	if pc.TxStatus() != 'I' {
		return true
	}
	v := pc.ParameterStatus(readOnlyParam)
	return v == "" || v == "on"
}

// guard is the connection tracer that closes a session before it runs a
// statement read-write. It wraps the tracer the DSN's config had, if any.
type guard struct{ next pgx.QueryTracer }

func (g guard) refuse(ctx context.Context, conn *pgx.Conn, what string) {
	slog.Default().Error("outbox_exporter: a statement switched its session's default_transaction_read_only off; closing the session instead of running "+what+" read-write",
		"application_name", ApplicationName)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = conn.PgConn().Close(cctx)
}

// TraceQueryStart implements pgx.QueryTracer.
func (g guard) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !sessionSafe(conn) {
		g.refuse(ctx, conn, "a query")
	}
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
}

// TraceBatchStart implements pgx.BatchTracer.
func (g guard) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !sessionSafe(conn) {
		g.refuse(ctx, conn, "a batch")
	}
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
}

// TraceCopyFromStart implements pgx.CopyFromTracer. COPY FROM writes:
// the exporter never sends one, and a session that would run it
// read-write is closed like any other.
func (g guard) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if !sessionSafe(conn) {
		g.refuse(ctx, conn, "COPY FROM")
	}
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
}

// afterRelease keeps a released session only if it is still read-only
// by default.
func afterRelease(conn *pgx.Conn) bool {
	pc := conn.PgConn()
	switch pc.ParameterStatus(readOnlyParam) {
	case "on":
		return true
	case "":
		// Not reported (PostgreSQL before 14): restore the session's
		// startup settings, read-only among them. Release runs this in
		// its own goroutine, off the caller's path.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := pc.Exec(ctx, "RESET ALL").ReadAll()
		return err == nil
	default:
		slog.Default().Error("outbox_exporter: a released session is no longer read-only by default; destroying it",
			"application_name", ApplicationName)
		return false
	}
}

// fence installs the guard and the release check on a pool config.
func fence(pc *pgxpool.Config) {
	pc.ConnConfig.Tracer = guard{next: pc.ConnConfig.Tracer}
	pc.AfterRelease = afterRelease
}
