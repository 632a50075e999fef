package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// A slot older than the exporter's WAL history (right after a start, a
// slot behind the last checkpoint) has no time the history can give:
// the position's time is only known to be before the oldest sample. The
// slot's catalog_xmin gives a time on the other side.
//
// Logical decoding moves a slot's catalog_xmin forward only from a
// running-transactions record it has decoded, and only once the client
// has confirmed a position at or past that record; at slot creation it
// is the oldest transaction still running, before the slot's first
// confirmed position. Either way every transaction id below catalog_xmin
// had ended before a position at or before confirmed_flush_lsn was
// written, and a commit takes its timestamp before it writes its commit
// record. So with track_commit_timestamp on, the latest commit time of
// any transaction below catalog_xmin is a time at which the server's
// position had not yet left the slot's confirmed one: the lag measured
// from it is never under the truth, and the rows committed after it
// include every row the slot has not confirmed. The bound is only as
// tight as catalog_xmin is recent: the connector's confirms move it, a
// quiet database or a slow connector leave it behind, never wrong.

// CommitWindow is how many transaction ids just below catalog_xmin
// CommittedBefore looks at: ids that aborted, or committed before
// track_commit_timestamp was on, have no commit time and are passed
// over.
const CommitWindow = 128

// committedBeforeQuery is the latest commit time of the transaction ids
// $2 below $1, counting back around the 32-bit wraparound and skipping
// the ids that are never a transaction's (0 to 2). An id whose commit
// time is not kept (aborted, too old, before the setting) reads NULL.
const committedBeforeQuery = `
SELECT max(pg_catalog.pg_xact_commit_timestamp(x::text::xid))
FROM (SELECT ($1::bigint - k + 4294967296) % 4294967296 AS x FROM generate_series(1, $2::int) AS k) AS w
WHERE x >= 3
`

// CommittedBefore returns the latest commit time among the transaction
// ids in the window below catalogXmin: a time before the server's
// position left the confirmed position of the slot catalogXmin was read
// with. ok is false when no id in the window has a commit time. It
// needs track_commit_timestamp = on; the server refuses otherwise.
func CommittedBefore(ctx context.Context, b pg.Beginner, catalogXmin uint32, window int) (at time.Time, ok bool, err error) {
	var t *time.Time
	err = pg.ReadOnly(ctx, b, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, committedBeforeQuery, int64(catalogXmin), window).Scan(&t)
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the commit times below the slot's catalog_xmin: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return *t, true, nil
}

// commitBound remembers one slot's last answer from CommittedBefore: the
// commit times below a catalog_xmin never change, so the query runs again
// only when catalog_xmin moves.
type commitBound struct {
	xmin uint32
	at   time.Time
	ok   bool
}
