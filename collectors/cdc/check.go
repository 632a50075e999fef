package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// CheckItem is one thing check verified.
type CheckItem = checktext.Item

// CheckReport is what check found for one cdc entry.
type CheckReport struct {
	CDC   string
	Slot  string
	Items []CheckItem
	// Notes are what the exporter cannot see with this server's
	// settings; they do not fail the check.
	Notes []string
	// Statements are the CREATE INDEX statements the linked outbox's
	// reads behind the slot want.
	Statements []string
	OK         bool
}

func (r *CheckReport) add(ok bool, what, format string, args ...any) {
	r.Items = append(r.Items, CheckItem{What: what, OK: ok, Detail: fmt.Sprintf(format, args...)})
	if !ok {
		r.OK = false
	}
}

// Report is the report in the form every check prints.
func (r *CheckReport) Report() checktext.Report {
	return checktext.Report{Heading: fmt.Sprintf("cdc %s (slot %s)", r.CDC, r.Slot),
		OK: r.OK, Items: r.Items, Notes: r.Notes, Statements: r.Statements}
}

// Text renders the report for a person at a terminal.
func (r *CheckReport) Text() string { return r.Report().String() }

// serverFacts are the settings check reads besides the slot.
type serverFacts struct {
	user, database, walLevel, keepSize, commitTS string
	checkpoint                                   bool
}

// Check verifies that the role can read pg_replication_slots, that the
// slot exists and is logical, and says what the exporter cannot see with
// the server's settings. It only reads.
func Check(ctx context.Context, db pg.Beginner, name string, e *config.CDC, o *config.Outbox) (*CheckReport, error) {
	r := &CheckReport{CDC: name, Slot: e.Slot, OK: true}
	var f serverFacts
	err := pg.ReadOnly(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT current_user, current_database(), current_setting('wal_level'),
			current_setting('max_slot_wal_keep_size'), current_setting('track_commit_timestamp'),
			has_function_privilege('pg_catalog.pg_control_checkpoint()', 'EXECUTE')`).
			Scan(&f.user, &f.database, &f.walLevel, &f.keepSize, &f.commitTS, &f.checkpoint)
	})
	if err != nil {
		return nil, fmt.Errorf("check cdc %q: read server settings: %w", name, err)
	}
	reading, err := ReadSlots(ctx, db, []string{e.Slot})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		r.add(false, "read pg_replication_slots", "role %s may not (%s); grant it: GRANT SELECT ON pg_catalog.pg_replication_slots TO %s;",
			f.user, pgErr.Message, pg.Ident(f.user))
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check cdc %q: %w", name, err)
	}
	r.add(true, "read pg_replication_slots", "as %s", f.user)
	checkSlot(r, reading.Slots[0], f)
	if f.keepSize == "-1" {
		r.Notes = append(r.Notes, "max_slot_wal_keep_size is unlimited: a stopped connector keeps WAL until the disk fills, and wal_status never reaches lost")
	}
	if !f.checkpoint {
		r.Notes = append(r.Notes, fmt.Sprintf("role %s may not run pg_control_checkpoint(): after an exporter restart, lag seconds count only from its first collection (marked by outbox_cdc_slot_lag_lower_bound)", f.user))
	}
	if o != nil {
		if f.commitTS == "on" {
			r.add(true, "track_commit_timestamp", "on: rows of outbox %s committed after the slot's confirmed time are the pending ones", e.Outbox)
		} else {
			r.add(false, "track_commit_timestamp", "off: the exporter cannot see which rows of outbox %s are still behind the slot, nor their age: that outbox's collection fails, naming the setting, and only the slot's lag pages. Set track_commit_timestamp = on (needs a server restart; only commits after it carry a time)", e.Outbox)
		}
		if err := checkCreatedIndex(ctx, db, r, e.Outbox, o); err != nil {
			return nil, fmt.Errorf("check cdc %q: %w", name, err)
		}
	}
	return r, nil
}

// checkCreatedIndex verifies that an index of the outbox's table leads
// with created_at, without a predicate: the rows behind the slot are read
// as a range of created_at over the lookback before the confirmed time,
// and an index on the labels first (what the outbox's own check asks for)
// cannot serve that range.
func checkCreatedIndex(ctx context.Context, db pg.Beginner, r *CheckReport, outbox string, o *config.Outbox) error {
	var (
		exists bool
		index  *string
	)
	err := pg.ReadOnly(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
			(SELECT c.relname::text FROM pg_catalog.pg_index i
			   JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
			   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			  WHERE i.indrelid = to_regclass($1) AND a.attname = $2 AND i.indpred IS NULL AND i.indisvalid
			  ORDER BY 1 LIMIT 1)`, pg.Table(o.Table), o.CreatedAt).Scan(&exists, &index)
	})
	if err != nil {
		return fmt.Errorf("read the indexes of %s: %w", o.Table, err)
	}
	switch {
	case !exists:
		r.add(false, "index on created_at", "table %s of outbox %s does not exist", o.Table, outbox)
	case index == nil:
		r.add(false, "index on created_at", "no index of %s leads with %s: the rows behind the slot would be read by scanning the table at every collection",
			o.Table, o.CreatedAt)
		r.Statements = append(r.Statements, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s);",
			pg.Ident("outbox_exporter_"+outbox+"_behind"), pg.Table(o.Table), pg.Ident(o.CreatedAt)))
	default:
		r.add(true, "index on created_at", "%s: the rows behind the slot are a range of it", *index)
	}
	return nil
}

func checkSlot(r *CheckReport, s SlotRow, f serverFacts) {
	switch {
	case !s.Exists:
		hint := ""
		if f.walLevel != "logical" {
			hint = fmt.Sprintf("; wal_level is %s, a logical slot needs wal_level = logical", f.walLevel)
		}
		r.add(false, "slot exists", "no replication slot %q: the connector creates it when it first starts%s", s.Name, hint)
	case s.Type != "logical":
		r.add(false, "slot is logical", "slot %q is %s, not a logical slot a connector streams changes from", s.Name, s.Type)
	default:
		r.add(true, "slot is logical", "plugin %s on database %s, wal_status %s, active %v", s.Plugin, s.Database, orNone(s.WALStatus), s.Active)
		if s.Database != f.database {
			r.Notes = append(r.Notes, fmt.Sprintf("the slot decodes database %s, the exporter is connected to %s", s.Database, f.database))
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
