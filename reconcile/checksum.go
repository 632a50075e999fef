package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// With ChecksumFullSweeps, full sweeps of integer keys bisect by range
// checksums, as data-diff does but with an integer hash: each key range is
// summarised on both sides (a count and a sum of hashint8extended(key,
// version), computed by the servers); a range whose sides agree is clean
// without a row leaving the database; a range that differs is split
// splitWays ways until it holds at most leafRows rows, which are read and
// merged like any chunk. It needs far less exporter memory and CPU, but
// every differing range is summarised again at each level: with gaps
// spread over the key space that cost the servers more than streaming
// (bench/reconcile.md), so it is not the default.
const (
	splitWays       = 16
	defaultLeafRows = 4096
)

// rangeSum is one side's summary of a key range.
type rangeSum struct {
	judged, undecided, missingOutbox, decided int64
	sum                                       string
}

// walkChecksum sweeps the integer key space [lo, hi] in ranges sized to
// chunk_time.
func (r *runner) walkChecksum(ctx context.Context) error {
	lo, hi, ok, err := r.fullKeyRange(ctx)
	if err != nil || !ok {
		return err
	}
	step := int64(r.chunkRows)
	for cur := lo; ; {
		end := hi
		if uint64(hi)-uint64(cur) >= uint64(step) {
			end = cur + step - 1
		}
		t := time.Now()
		if err := r.checkRange(ctx, cur, end); err != nil {
			return err
		}
		r.res.Chunks++
		if end == hi {
			return nil
		}
		// Resize the step as a chunk's row count is: by the top-level
		// summary's time, at most doubling.
		r.resize(time.Since(t))
		step = int64(r.chunkRows)
		cur = end + 1
	}
}

// fullKeyRange is the smallest and largest key of the authority and the
// target together.
func (r *runner) fullKeyRange(ctx context.Context) (lo, hi int64, ok bool, err error) {
	type side struct {
		q  queryFunc
		sq string
	}
	sides := []side{{r.p.authority.Query, keyRangeQuery(r.p.aTable, r.p.aKey)}}
	if r.p.target != nil {
		sides = append(sides, side{r.p.target.Query, keyRangeQuery(r.p.tTable, r.p.tKey)})
	}
	for _, s := range sides {
		var mn, mx *int64
		rows, err := s.q(ctx, s.sq)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		for rows.Next() {
			if err := rows.Scan(&mn, &mx); err != nil {
				rows.Close()
				return 0, 0, false, fmt.Errorf("find the key range: %w", err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		if mn == nil {
			continue
		}
		if !ok || *mn < lo {
			lo = *mn
		}
		if !ok || *mx > hi {
			hi = *mx
		}
		ok = true
	}
	return lo, hi, ok, nil
}

// checkRange decides the key range [lo, hi]: clean by its summaries, or
// split, or read row by row.
func (r *runner) checkRange(ctx context.Context, lo, hi int64) error {
	var a rangeSum
	var tCount int64
	var tSum string
	readAuthority := func(ctx context.Context) error {
		q, args := r.p.rangeSumQuery(r.w, lo, hi)
		return pgx.BeginTxFunc(ctx, r.p.authority, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, mergePlanSettings); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, q, prepared(args)...).Scan(&a.judged, &a.undecided, &a.missingOutbox, &a.decided, &a.sum); err != nil {
				return fmt.Errorf("summarise authority keys %d..%d: %w", lo, hi, err)
			}
			return nil
		})
	}
	readTarget := func(ctx context.Context) error {
		if r.p.target == nil {
			return nil
		}
		q, args := r.p.targetSumQuery(lo, hi)
		if err := r.p.target.QueryRow(ctx, q, prepared(args)...).Scan(&tCount, &tSum); err != nil {
			return fmt.Errorf("summarise target keys %d..%d: %w", lo, hi, err)
		}
		return nil
	}
	if err := r.bothSides(ctx, readAuthority, readTarget); err != nil {
		return err
	}
	clean := a.missingOutbox == 0
	if r.p.target != nil {
		clean = a.undecided == 0 && a.decided == tCount && a.sum == tSum
	}
	if clean {
		r.res.RowsChecked += a.judged
		return nil
	}
	rows := a.decided + a.undecided + tCount
	width := uint64(hi) - uint64(lo) + 1 // 0: the whole int64 range
	if rows <= int64(r.leafRows) || (width < 2 && width != 0) {
		return r.leaf(ctx, lo, hi)
	}
	parts := uint64(splitWays)
	if width != 0 && width < parts {
		parts = width
	}
	part := width / parts
	if width == 0 {
		part = 1 << 60
	}
	for i := uint64(0); i < parts; i++ {
		sub := lo + int64(i*part)
		end := sub + int64(part) - 1
		if i == parts-1 {
			end = hi
		}
		if err := r.checkRange(ctx, sub, end); err != nil {
			return err
		}
	}
	return nil
}

// leaf reads the rows of [lo, hi] and merges them.
func (r *runner) leaf(ctx context.Context, lo, hi int64) error {
	from := bound{set: true, inclusive: true, k: key{i: lo}}
	to := bound{set: true, inclusive: true, k: key{i: hi}}
	var as []aRow
	var ts []tRow
	readAuthority := func(ctx context.Context) error {
		var err error
		// No page limit: rows committed since the summary belong here too.
		as, err = r.fetchAuthority(ctx, from, to, 1<<30, nil)
		return err
	}
	readTarget := func(ctx context.Context) error {
		if r.p.target == nil {
			return nil
		}
		var err error
		ts, err = r.fetchTarget(ctx, from, to)
		return err
	}
	if err := r.bothSides(ctx, readAuthority, readTarget); err != nil {
		return err
	}
	return r.compare(ctx, as, ts)
}

// bothSides reads the authority and the target side of one range: at once
// when they are in different databases, else one after the other (the
// authority first); the test hook runs in between.
func (r *runner) bothSides(ctx context.Context, readAuthority, readTarget func(context.Context) error) error {
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
