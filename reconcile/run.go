package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// window is the part of the authority one run judges: rows created before
// cut (the database's now() minus grace) and, unless full, at or after
// from (now() minus window).
type window struct {
	full      bool
	now       time.Time
	cut, from time.Time
}

// Chunk sizing: a chunk starts at initialChunkRows and is resized after
// each one so that its slower side takes about chunk_time, within
// [minChunkRows, maxChunkRows], growing at most 2x a step.
const (
	initialChunkRows = 10_000
	minChunkRows     = 1_000
	maxChunkRows     = 100_000
	recheckBatch     = 1_000
	// maxPending bounds the findings a run holds for confirmation after
	// grace (confirm.go); those beyond are counted as unconfirmed.
	maxPending = 100_000
)

// scope is the key range a run decides: everything for a full sweep, the
// keys lo..hi of the window's authority rows for a windowed run.
type scope struct {
	full   bool
	lo, hi key
}

// strategy is one way of deciding every key of a scope: streaming every
// row of both sides (stream.go), or comparing summaries of buckets and
// reading only those that differ (summary.go). Both hand the rows they
// read to runner.compare.
type strategy interface {
	walk(ctx context.Context, s scope) error
}

// runner performs one run of one job.
type runner struct {
	p *plan
	w *window
	// kt and tt are the authority's and the target's key types; keys of
	// a uuid and a text side are carried and compared as text.
	kt, tt   keyType
	sortKeys bool
	res      *Result
	max      int

	chunkRows, minRows, maxRows int
	chunkTime                   time.Duration
	// aBuf and tBuf are reused, so that a sweep allocates its row
	// buffers once.
	aBuf  []aRow
	tBuf  []tRow
	hooks hooks
	// leafRows is the most rows a differing bucket may hold to be read
	// row by row rather than cut smaller (summary.go).
	leafRows int
	// stream makes runs stream every row instead of comparing summaries.
	stream bool
	// summaries is true when the key types allow range summaries.
	summaries bool
	// confirmInRun makes the run confirm findings no column dates itself,
	// after grace, in pending; otherwise they are held across runs: prior
	// is what earlier runs held, held what this one holds (confirm.go).
	confirmInRun bool
	inRun        inRunRules
	pending      []pendingFinding
	prior, held  map[heldID]time.Time
	// clock is the held findings' clock (HeldClock), nil for the wall
	// clock; skew is added to it by hooks.skipWaits.
	clock func() time.Time
	skew  time.Duration
	// logger says when a run waits to confirm findings.
	logger *slog.Logger
}

// hooks let tests act while a run is in progress.
type hooks struct {
	// afterChunk, when set, runs between chunks.
	afterChunk func(chunk int)
	// betweenSides, when set, runs after a range's authority side was read
	// and before its target side is, and makes the sides be read one after
	// the other.
	betweenSides func(chunk int)
	// onRun, when set, runs as a run starts (true) and ends (false).
	onRun func(start bool)
	// stall, when set, runs first with the run's context.
	stall func(ctx context.Context)
	// beforeConfirm, when set, runs before pending findings are read
	// again after grace.
	beforeConfirm func()
	// skipWaits makes the wait for grace advance the run's clock instead
	// of sleeping: tests of the rules would otherwise wait minutes; the
	// wait itself is a timer (confirm.go).
	skipWaits bool
}

func (r *runner) run(ctx context.Context) error {
	if r.hooks.onRun != nil {
		r.hooks.onRun(true)
		defer r.hooks.onRun(false)
	}
	if r.hooks.stall != nil {
		r.hooks.stall(ctx)
	}
	err := pg.ReadOnly(ctx, r.p.authority, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT now()").Scan(&r.w.now)
	})
	if err != nil {
		return fmt.Errorf("read the authority database's clock: %w", err)
	}
	r.w.cut = r.w.now.Add(-r.p.job.Grace)
	r.w.from = r.w.now.Add(-r.p.job.Window)
	if err := r.detectKeys(ctx); err != nil {
		return err
	}
	sc := scope{full: r.w.full}
	if !sc.full {
		found, err := r.windowKeys(ctx, &sc.lo, &sc.hi)
		if err != nil || !found {
			return err
		}
	}
	var st strategy = &streamed{r: r}
	if r.summaries && !r.stream {
		st = &summarised{r: r}
	}
	if err := st.walk(ctx, sc); err != nil {
		return err
	}
	return r.confirmPending(ctx)
}

// detectKeys reads the key columns' types.
func (r *runner) detectKeys(ctx context.Context) error {
	kt, err := columnType(ctx, r.p.authority, "SELECT "+r.p.aKey+" FROM "+r.p.aTable+" LIMIT 0")
	if err != nil {
		return fmt.Errorf("read authority key type: %w", err)
	}
	r.kt, r.tt = kt, kt
	if r.p.target != nil {
		if r.tt, err = columnType(ctx, r.p.target, "SELECT "+r.p.tKey+" FROM "+r.p.tTable+" LIMIT 0"); err != nil {
			return fmt.Errorf("read target key type: %w", err)
		}
	}
	if (r.tt == keyInt) != (kt == keyInt) {
		return fmt.Errorf("authority and target keys cannot be compared: one is an integer, the other is not")
	}
	// Text keys are ordered by collation, which Go cannot reproduce: each
	// chunk is sorted in Go before the merge. Range summaries need keys
	// cut by arithmetic, of one type on both sides (summary.go).
	r.sortKeys = kt == keyText || r.tt == keyText
	r.summaries = kt != keyText && kt == r.tt
	return nil
}

func columnType(ctx context.Context, pool pg.Beginner, sql string) (keyType, error) {
	var oid uint32
	err := pg.ReadOnly(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql)
		if err != nil {
			return err
		}
		oid = rows.FieldDescriptions()[0].DataTypeOID
		rows.Close()
		return rows.Err()
	})
	if err != nil {
		return 0, err
	}
	return keyTypeOf(oid)
}

func (r *runner) windowKeys(ctx context.Context, kmin, kmax *key) (bool, error) {
	q, args := r.p.windowKeysQuery(r.w, r.kt)
	found := false
	err := query(ctx, r.p.authority, false, q, args, func(rows pgx.Rows) error {
		for rows.Next() {
			raw := rows.RawValues()
			if raw[0] == nil {
				break
			}
			fds := rows.FieldDescriptions()
			var err error
			if *kmin, err = decodeKey(r.kt, fds[0], raw[0]); err != nil {
				return err
			}
			if *kmax, err = decodeKey(r.kt, fds[1], raw[1]); err != nil {
				return err
			}
			found = true
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("find the window's key range: %w", err)
	}
	return found, nil
}

// bothSides runs the reads of the two sides of one range: at once when
// they are in different databases, else one after the other, the
// authority's first, leaving the pool's other sessions to the collectors;
// the test hook runs in between.
func (r *runner) bothSides(ctx context.Context, readAuthority, readTarget func(context.Context) error) error {
	if r.p.target == nil {
		return readAuthority(ctx)
	}
	if h := r.hooks.betweenSides; h != nil || r.p.target == r.p.authority {
		if err := readAuthority(ctx); err != nil {
			return err
		}
		if h != nil {
			h(r.res.Chunks)
		}
		return readTarget(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return readAuthority(gctx) })
	g.Go(func() error { return readTarget(gctx) })
	return g.Wait()
}

// errBusy is returned by Run while a run of the same job is in progress.
var errBusy = errors.New("a run of this job is already in progress")
