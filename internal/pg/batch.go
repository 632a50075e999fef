package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// How a collection sends its queries on a session, in as few round trips
// as the answers allow. Within a session budget smaller than the
// databases on a server, most sessions serve one round of a database's
// collections (rounds.go) and close: a statement prepared on its own
// (one round trip each) then costs time and saves nothing, and so does
// a BEGIN sent apart from the first queries.

// sentKey keys, in a session's custom data, the statements already sent
// on it once.
const sentKey = "outbox_exporter.sent"

// ReadOnlyBatch runs b as the first queries of a READ ONLY transaction
// that it begins in the same round trip, then more (which may send more
// batches in the transaction through SendBatch), and rolls the
// transaction back; more may be nil. Like ReadOnly, nothing is kept, and
// a session whose default is no longer read-only is refused by the fence
// before the BEGIN runs.
func ReadOnlyBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, more func(pgx.Tx) error) error {
	return readOnlyBatch(ctx, conn, b, more, nil)
}

// readOnlyBatch is ReadOnlyBatch; when last, asked at the transaction's
// end, reports that nothing more is sent on the session and that its
// pool closes it once given back, it is closed at once instead of
// rolled back: its end aborts the transaction, one round trip sooner.
func readOnlyBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, more func(pgx.Tx) error, last func() bool) (err error) {
	tb := &pgx.Batch{}
	tb.BeginTx(pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err := prepareSeen(ctx, conn, b); err != nil {
		return err
	}
	tb.QueuedQueries = append(tb.QueuedQueries, b.QueuedQueries...)
	br := conn.SendBatch(ctx, tb)
	tx := br.Tx()
	defer func() {
		if last != nil && last() {
			closeConn(conn)
			return
		}
		// Rollback of a read-only transaction discards nothing; its error
		// matters only when the queries worked (a broken connection).
		rerr := tx.Rollback(context.WithoutCancel(ctx))
		if err == nil && rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = fmt.Errorf("end read-only transaction: %w", rerr)
		}
	}()
	if err := br.Close(); err != nil {
		return err
	}
	if more == nil {
		return nil
	}
	return more(tx)
}

// SendBatch sends b in tx (a transaction of ReadOnly or ReadOnlyBatch)
// and reads all its results.
func SendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if err := prepareSeen(ctx, tx.Conn(), b); err != nil {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// prepareSeen prepares, as named statements whose plans the server keeps,
// the queries of b already sent once on conn, and marks the others sent.
// A query's first sending on a session goes unnamed, described with the
// batch's other new queries in one round trip; only a session that lives
// to send it again pays for preparing it (one round trip, once), and
// from then on the server plans it no more. The first sending plans it
// either way.
func prepareSeen(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) error {
	data := conn.PgConn().CustomData()
	sent, _ := data[sentKey].(map[string]bool)
	if sent == nil {
		sent = map[string]bool{}
		data[sentKey] = sent
	}
	var again []string
	for _, q := range b.QueuedQueries {
		if sent[q.SQL] && !isUnprepared(q) {
			again = append(again, q.SQL)
		}
	}
	for _, q := range b.QueuedQueries {
		if !isUnprepared(q) {
			sent[q.SQL] = true
		}
	}
	for _, sql := range again {
		if _, err := conn.Prepare(ctx, sql, sql); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	return nil
}

// Unprepared, as the first argument of a query queued on a batch, has
// SendBatch and ReadOnlyBatch send it unnamed however often it was sent
// before: a query whose text holds the values it reads changes with
// them, and each text prepared would stay on the session for its life;
// and a query that reads no table costs the server next to nothing to
// plan, so that preparing it (an exchange of its own on each new
// session) would cost more than it saves. Its description is still kept
// for the session's life: from its second sending it costs no exchange
// of its own. pgx drops it before sending (a query rewriter that
// rewrites nothing).
var Unprepared pgx.QueryRewriter = unprepared{}

type unprepared struct{}

func (unprepared) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	return sql, args, nil
}

func isUnprepared(q *pgx.QueuedQuery) bool {
	if len(q.Arguments) == 0 {
		return false
	}
	_, ok := q.Arguments[0].(unprepared)
	return ok
}
