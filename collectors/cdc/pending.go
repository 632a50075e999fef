package cdc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// DefaultBehindLookback bounds the scan for rows behind the slot: a row
// is looked at only if its created_at is at most this long before the
// slot's confirmed time. Missed are only rows whose transaction ran
// longer than this between setting created_at and committing.
const DefaultBehindLookback = time.Hour

// IsBehind is the decision for one row of an outbox a connector publishes
// from the WAL: it is still pending when it was committed after the time
// the slot has confirmed. A row without a commit time (committed before
// track_commit_timestamp was on, or so long ago that its transaction id
// was frozen) was committed before anything the slot can still be
// behind on.
func IsBehind(committedAt *time.Time, confirmedAt time.Time) bool {
	return committedAt != nil && committedAt.After(confirmedAt)
}

// Behind is what the rows of an outbox say about the events still behind
// its slot.
type Behind struct {
	Pending int64
	// Oldest is the created_at of the oldest pending row; zero when none.
	Oldest time.Time
}

// OldestAge is the age of the oldest pending row at now; 0 when none.
func (b Behind) OldestAge(now time.Time) time.Duration {
	if b.Oldest.IsZero() || now.Before(b.Oldest) {
		return 0
	}
	return now.Sub(b.Oldest)
}

// behindQuery applies IsBehind in SQL: pg_xact_commit_timestamp(xmin) is
// the commit time of the transaction that wrote the row's current version
// (NULL without track_commit_timestamp). Its cost is a range scan of
// created_at over lookback and the commit timestamp lookup per row.
func behindQuery(o *config.Outbox) string {
	var b strings.Builder
	fmt.Fprintf(&b, `SELECT count(*), min(%s) FROM %s WHERE %s >= $2 AND pg_catalog.pg_xact_commit_timestamp(xmin) > $1`,
		pg.Ident(o.CreatedAt), pg.Table(o.Table), pg.Ident(o.CreatedAt))
	if o.Filter != "" {
		fmt.Fprintf(&b, " AND (%s)", o.Filter)
	}
	return b.String()
}

// RowsBehind counts the rows of outbox o committed after confirmedAt (the
// time the slot has confirmed, SlotState.ConfirmedAt) and finds the
// oldest. It needs track_commit_timestamp = on; without it every row reads
// as confirmed, which check reports. The judgement is exact to the slot
// history's resolution: a row committed within one collection interval
// of confirmedAt may fall either way.
func RowsBehind(ctx context.Context, db pg.Beginner, o *config.Outbox, confirmedAt time.Time, lookback time.Duration) (Behind, error) {
	var (
		out    Behind
		oldest *time.Time
	)
	err := pg.ReadOnly(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, behindQuery(o), confirmedAt, confirmedAt.Add(-lookback)).Scan(&out.Pending, &oldest)
	})
	if err != nil {
		return Behind{}, fmt.Errorf("rows of %s behind the slot: %w", o.Table, err)
	}
	if oldest != nil {
		out.Oldest = *oldest
	}
	return out, nil
}
