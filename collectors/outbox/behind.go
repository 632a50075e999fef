package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// An outbox published by change data capture (a connector streaming the
// table's inserts from a logical replication slot) keeps its rows until
// some cleanup deletes them: a kept row is pending only while the slot is
// behind its commit. Such an outbox is sampled like any other, with one
// more condition on its unpublished rows: committed after the time the
// slot has confirmed. A connector that falls behind hides a pending
// backlog behind its log position: the rows are in the table and look
// published, yet nobody downstream has seen them.

// DefaultBehindLookback bounds the scan for rows behind the slot: a row
// is looked at only if its created_at is at most this long before the
// slot's confirmed time. Missed are only rows whose transaction ran
// longer than this between setting created_at and committing.
const DefaultBehindLookback = time.Hour

// Confirmed is what the slot publishing an outbox has confirmed.
type Confirmed struct {
	// At is the server time the slot has confirmed up to: a row
	// committed after it is still pending.
	At time.Time
	// LowerBound is true when the slot's position is older than the
	// exporter's WAL history (outbox_cdc_slot_lag_lower_bound): At is
	// then later than the truth, so the rows behind it, and their
	// oldest age, are lower bounds of the pending ones.
	LowerBound bool
}

// ConfirmedSource tells an outbox's collector what its slot has
// confirmed. It fails when that is unknown (the slot's collector has not
// read the slot, or failed to): the outbox's collection then fails
// rather than read 0 pending, or count every kept row as pending.
type ConfirmedSource func(ctx context.Context) (Confirmed, error)

// IsBehind is the decision for one row of an outbox a connector publishes
// from the WAL: it is still pending when it was committed after the time
// the slot has confirmed. A row without a commit time (committed before
// track_commit_timestamp was on, or so long ago that its commit time was
// truncated) was committed before anything the slot can still be behind
// on. behindPredicate is its SQL form.
func IsBehind(committedAt *time.Time, confirmedAt time.Time) bool {
	return committedAt != nil && committedAt.After(confirmedAt)
}

// queueConfirmed queues ConfirmedQuery in b, first, so that every query
// after it in the transaction sees the confirmed time.
func queueConfirmed(b *pgx.Batch, c Confirmed) {
	b.Queue(outboxsql.ConfirmedQuery, c.At).QueryRow(func(row pgx.Row) error {
		var set, track string
		if err := row.Scan(&set, &track); err != nil {
			return fmt.Errorf("set the slot's confirmed time: %w", err)
		}
		if track != "on" {
			return fmt.Errorf("track_commit_timestamp is %s on the server: the rows still behind the slot cannot be told from the published ones (pg_xact_commit_timestamp needs track_commit_timestamp = on)", track)
		}
		return nil
	})
}
