package reconcile

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// aRow is one authority row with the outbox state of its current version.
type aRow struct {
	k      key
	v      ver
	judged bool
	outbox OutboxState
	// pub is when that outbox row was published: pubYoung, pubOld or
	// pubUndated (plan.go).
	pub uint8
}

// tRow is one target key: its highest version and how many rows hold it.
type tRow struct {
	k key
	v ver
	n int
}

// mergePlanSettings make a chunk's join a merge join of index scans, in
// this transaction only: no hash join (whose plan spilled to disk on large
// ranges), no nested loop, no parallel workers, no JIT compilation (which
// costs more than a chunk's query saves).
const mergePlanSettings = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_nestloop = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off; SET LOCAL plan_cache_mode = force_generic_plan"

// prepared runs a query as a prepared statement, cached on the session:
// a sweep runs the same few statements hundreds of times, and planning
// each anew cost the server more than executing it.
func prepared(args []any) []any {
	return append([]any{pgx.QueryExecModeCacheStatement}, args...)
}

// query runs one statement in a read-only transaction (with the
// merge-plan settings if merge) and hands its rows to scan.
func query(ctx context.Context, pool *pgxpool.Pool, merge bool, q string, args []any, scan func(pgx.Rows) error) error {
	return pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		if merge {
			if _, err := tx.Exec(ctx, mergePlanSettings); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, q, prepared(args)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		if err := scan(rows); err != nil {
			return err
		}
		return rows.Err()
	})
}

// queryAuthority runs an authority query (joined with the outbox) and
// decodes its rows into buf; merge as for query (range reads, not point
// look-ups, whose join wants a nested loop).
func (r *runner) queryAuthority(ctx context.Context, merge bool, q string, args []any, buf []aRow) ([]aRow, error) {
	out := buf
	err := query(ctx, r.p.authority, merge, q, args, func(rows pgx.Rows) error {
		var err error
		out, err = r.scanAuthority(rows, buf)
		return err
	})
	return out, err
}

// scanAuthority decodes authority rows from their raw values: the columns
// are few and fixed, and this is the hot loop of a streamed sweep.
func (r *runner) scanAuthority(rows pgx.Rows, out []aRow) ([]aRow, error) {
	fds := rows.FieldDescriptions()
	for rows.Next() {
		raw := rows.RawValues()
		k, err := decodeKey(r.kt, fds[0], raw[0])
		if err != nil {
			return nil, fmt.Errorf("authority key: %w", err)
		}
		row := aRow{k: k, judged: decodeBool(fds[2], raw[2])}
		if row.v, err = decodeVersion(fds[1], raw[1]); err != nil {
			return nil, fmt.Errorf("authority version of key %s (the version column must be an integer): %w", k.render(r.kt), err)
		}
		if r.p.hasOutbox {
			st, err := decodeInt(fds[3], raw[3])
			if err != nil {
				return nil, fmt.Errorf("outbox state of key %s: %w", k.render(r.kt), err)
			}
			pub, err := decodeInt(fds[4], raw[4])
			if err != nil {
				return nil, fmt.Errorf("outbox publication of key %s: %w", k.render(r.kt), err)
			}
			row.outbox, row.pub = OutboxState(st), uint8(pub)
		}
		// Several outbox rows for one key and version come as several
		// rows; keep one, the most advanced state.
		if n := len(out); n > 0 && out[n-1].k == k {
			if rank(row.outbox) > rank(out[n-1].outbox) {
				out[n-1].outbox, out[n-1].pub = row.outbox, row.pub
			}
			continue
		}
		out = append(out, row)
	}
	return out, nil
}

// rank orders outbox states of duplicate rows: published wins, then dead.
func rank(s OutboxState) int {
	switch s {
	case OutboxPublished:
		return 3
	case OutboxDead:
		return 2
	case OutboxUnpublished:
		return 1
	}
	return 0
}

// queryTarget runs a target query and decodes its rows into the reused
// target buffer.
func (r *runner) queryTarget(ctx context.Context, q string, args []any) ([]tRow, error) {
	out := r.tBuf[:0]
	err := query(ctx, r.p.target, false, q, args, func(rows pgx.Rows) error {
		var err error
		out, err = r.scanTarget(rows, out)
		return err
	})
	if err != nil {
		return nil, err
	}
	r.tBuf = out
	return out, nil
}

// scanTarget decodes target rows in key order. A target without a unique
// key may hold a key more than once: one tRow counts them and keeps the
// highest version. Rows of one key arrive together (the queries order by
// key, and equal keys are adjacent in any order).
func (r *runner) scanTarget(rows pgx.Rows, out []tRow) ([]tRow, error) {
	fds := rows.FieldDescriptions()
	for rows.Next() {
		raw := rows.RawValues()
		k, err := decodeKey(r.tt, fds[0], raw[0])
		if err != nil {
			return nil, fmt.Errorf("target key: %w", err)
		}
		v, err := decodeVersion(fds[1], raw[1])
		if err != nil {
			return nil, fmt.Errorf("target version of key %s (the version column must be an integer): %w", k.render(r.tt), err)
		}
		out = appendTarget(out, tRow{k: k, v: v, n: 1})
	}
	return out, nil
}

// appendTarget appends t, or folds it into the last row if of one key.
func appendTarget(out []tRow, t tRow) []tRow {
	if n := len(out); n > 0 && out[n-1].k == t.k {
		last := &out[n-1]
		last.n += t.n
		if compareVersions(t.v.n, t.v.null, last.v.n, last.v.null) > 0 {
			last.v = t.v
		}
		return out
	}
	return append(out, t)
}
