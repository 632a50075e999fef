package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// An outbox published by change data capture (a connector streaming the
// table's inserts from a logical replication slot) keeps its rows until
// some cleanup deletes them: a kept row is pending only while the slot is
// behind its commit. Such an outbox is sampled like any other, with one
// more condition on its unpublished rows: committed after the time the
// slot has confirmed (seed 004: capture delay is a pending backlog hidden
// behind the log position).

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

// confirmedSetting carries the confirmed time into every query of a
// sample: set (transaction-local) by confirmedQuery in the sample's
// read-only transaction. A setting rather than a parameter, so that the
// many state-shaped queries keep their own parameters and stay one
// prepared statement each; the planner reads its value as a stable
// expression, so the created_at range is estimated like a constant.
const confirmedSetting = "outbox_exporter.slot_confirmed_at"

// confirmedQuery sets confirmedSetting to $1 for the transaction and
// reads track_commit_timestamp, without which pg_xact_commit_timestamp
// fails on any row and an empty range would read 0 pending.
const confirmedQuery = `SELECT pg_catalog.set_config('` + confirmedSetting + `', $1::timestamptz::text, true), pg_catalog.current_setting('track_commit_timestamp')`

// behindPredicate is IsBehind in SQL, with the range of created_at that
// an index on it (or on labels..., created_at) serves: the commit time of
// the transaction that wrote the row's current version,
// pg_xact_commit_timestamp(xmin), after the confirmed time, and a
// created_at within the lookback before it. "" for an outbox not
// published by a slot.
func (s *Spec) behindPredicate() string {
	if s.behind <= 0 {
		return ""
	}
	at := "pg_catalog.current_setting('" + confirmedSetting + "')::timestamptz"
	c := s.O.CreatedAt
	return col(c) + " >= " + s.bound(c, at+" - "+interval(s.behind)) +
		" AND pg_catalog.pg_xact_commit_timestamp(t.xmin) > " + at
}

// unpublished is the condition of the rows the collector counts as
// unpublished: UnpublishedPredicate, and behind the slot for an outbox
// published by one.
func (s *Spec) unpublished() string {
	return and(s.UnpublishedPredicate(), s.behindPredicate())
}

// queueConfirmed queues confirmedQuery in b, first, so that every query
// after it in the transaction sees the confirmed time.
func queueConfirmed(b *pgx.Batch, c Confirmed) {
	b.Queue(confirmedQuery, c.At).QueryRow(func(row pgx.Row) error {
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
