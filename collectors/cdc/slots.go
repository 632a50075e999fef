// Package cdc watches outboxes published by change data capture: a
// connector such as Debezium streams the outbox table's changes from a
// logical replication slot, so the slot's confirmed position is the
// pipeline's pending backlog: the capture delay is a backlog like any
// other, only hidden behind the log position instead of in the table.
//
// The exporter only reads pg_replication_slots and the server's WAL
// position; it never creates, advances or drops a slot.
package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// WALStatuses are the values of pg_replication_slots.wal_status, in order
// of danger: lost means the WAL the slot needs is gone, so the connector
// can never resume from it and the events in that WAL are lost to it.
var WALStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// SlotRow is what pg_replication_slots says about one slot.
type SlotRow struct {
	Name string
	// Exists is false when no slot has the name.
	Exists   bool
	Type     string // "logical" or "physical"
	Plugin   string
	Database string
	Active   bool
	// WALStatus is empty when the server reports NULL (a slot that never
	// reserved WAL).
	WALStatus string
	// SafeWALSize is the WAL that can still be written before the slot is
	// lost; nil when max_slot_wal_keep_size is unlimited or it is lost.
	SafeWALSize *int64
	// ConfirmedFlush is nil for a physical slot.
	ConfirmedFlush *LSN
	// CatalogXmin is the slot's catalog_xmin, read with ConfirmedFlush
	// (the view copies a slot's fields at once): every transaction id
	// below it had ended before a position the slot has confirmed
	// (CommittedBefore). Nil when the server reports NULL.
	CatalogXmin *uint32
}

// Reading is one collection's view of the server: its clock and WAL
// position, read in the same statement as the slots.
type Reading struct {
	Now      Sample
	Slots    []SlotRow
	Recovery bool
	// CommitTimes is true when track_commit_timestamp is on: commits
	// carry a time (pg_xact_commit_timestamp).
	CommitTimes bool
}

// slotsQuery reads the named slots and, in the same statement, the
// server's clock and WAL position, so that lag is measured against the
// same instant the slots were read at. The position is where the next
// WAL record goes (pg_current_wal_insert_lsn), not what is written so
// far (pg_current_wal_lsn): a transaction committed asynchronously is
// visible before the WAL writer writes its commit, up to
// wal_writer_delay later, and a position read then must already be past
// it, or its rows would read confirmed. On a standby (PostgreSQL 16 can
// keep logical slots there) the position is the replayed one. Names not
// found come back with a NULL slot_type. pg_replication_slots is a
// function scan: the CTE reads it once, where a join against it would run
// it once per name.
const slotsQuery = `
WITH pos AS MATERIALIZED (
  SELECT clock_timestamp() AS at, pg_is_in_recovery() AS recovery,
         current_setting('track_commit_timestamp') = 'on' AS commit_times,
         (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)::text AS lsn
), s AS MATERIALIZED (
  SELECT slot_name, slot_type, plugin, database, active, wal_status, safe_wal_size, confirmed_flush_lsn::text AS confirmed,
         catalog_xmin::text AS catalog_xmin
  FROM pg_catalog.pg_replication_slots WHERE slot_name = ANY($1)
)
SELECT w.name, s.slot_type, s.plugin, s.database, coalesce(s.active, false),
       s.wal_status, s.safe_wal_size, s.confirmed, s.catalog_xmin, pos.at, pos.recovery, pos.commit_times, pos.lsn
FROM unnest($1::text[]) WITH ORDINALITY AS w(name, i) CROSS JOIN pos LEFT JOIN s ON s.slot_name = w.name
ORDER BY w.i
`

// ReadSlots reads the named slots in one read-only statement; Slots are
// in the order of names.
func ReadSlots(ctx context.Context, b pg.Beginner, names []string) (Reading, error) {
	var r Reading
	err := pg.ReadOnly(ctx, b, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, slotsQuery, pgx.QueryExecModeCacheStatement, names)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				s                       SlotRow
				typ, plugin, db, status *string
				confirmed, current      *string
				catalogXmin             *string
				at                      time.Time
			)
			if err := rows.Scan(&s.Name, &typ, &plugin, &db, &s.Active, &status, &s.SafeWALSize, &confirmed, &catalogXmin,
				&at, &r.Recovery, &r.CommitTimes, &current); err != nil {
				return err
			}
			if current == nil {
				return errors.New("the server reports no WAL position")
			}
			pos, err := ParseLSN(*current)
			if err != nil {
				return err
			}
			r.Now = Sample{At: at, LSN: pos}
			if typ != nil {
				s.Exists, s.Type = true, *typ
				s.Plugin, s.Database, s.WALStatus = deref(plugin), deref(db), deref(status)
			}
			if confirmed != nil {
				c, err := ParseLSN(*confirmed)
				if err != nil {
					return err
				}
				s.ConfirmedFlush = &c
			}
			if catalogXmin != nil {
				x, err := strconv.ParseUint(*catalogXmin, 10, 32)
				if err != nil {
					return fmt.Errorf("parse catalog_xmin of slot %q: %w", s.Name, err)
				}
				x32 := uint32(x)
				s.CatalogXmin = &x32
			}
			r.Slots = append(r.Slots, s)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(r.Slots) != len(names) {
			return fmt.Errorf("asked for %d slots, got %d rows", len(names), len(r.Slots))
		}
		return nil
	})
	if err != nil {
		return Reading{}, fmt.Errorf("read replication slots: %w", err)
	}
	return r, nil
}

// Checkpoint is the last checkpoint: at Before the server's position was
// at most Redo, and by Reached it was at least Redo.
type Checkpoint struct {
	Redo            LSN
	Before, Reached time.Time
}

// ReadCheckpoint reads the last checkpoint's start time and redo position
// from the control file: a true (time, position) pair older than anything
// the exporter sampled itself, so that right after a start a slot far
// behind reads as at least that far behind instead of 0.
func ReadCheckpoint(ctx context.Context, b pg.Beginner) (Checkpoint, error) {
	var (
		at  time.Time
		lsn string
	)
	err := pg.ReadOnly(ctx, b, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT checkpoint_time, redo_lsn::text FROM pg_catalog.pg_control_checkpoint()`).Scan(&at, &lsn)
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read the last checkpoint: %w", err)
	}
	pos, err := ParseLSN(lsn)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read the last checkpoint: %w", err)
	}
	// The server takes the checkpoint's time, in whole seconds truncated,
	// before it fixes the redo position: at that time the position was
	// at most redo_lsn, and by the end of that second it had reached it.
	before := at.Truncate(time.Second)
	return Checkpoint{Redo: pos, Before: before, Reached: before.Add(time.Second)}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
