package reconcile

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// A run over integer or uuid keys (a full sweep, or the key range of a
// window's rows) compares summaries of key ranges, not rows, as data-diff
// does but with an integer hash and a wide fan-out. A chunk of the key
// space, sized to chunk_time, is cut into buckets of about bucketRows
// rows, and each side summarises every bucket of the chunk in one query:
// a count and the sum of hashint8extended(key, version)
// (uuid_hash_extended for uuid keys), computed by the server over an
// index range per bucket (a LATERAL aggregate: cheaper than grouping the
// whole range, whose hash aggregate cost the server as much again). The
// authority's query also summarises the outbox rows of each bucket. A
// bucket is clean when
//
//   - the target's summary equals the authority's: the target holds exactly
//     the authority's keys at their versions, so nothing is missing, stale
//     or orphaned, whatever the outbox says; and
//   - for an outbox that keeps its rows, the outbox's summary equals the
//     authority's as well: every authority row's version has its outbox
//     row. An outbox that also keeps the rows of older versions differs
//     here; its buckets are summarised again with one row per key (its
//     highest version), and clean if that equals the authority's. When
//     most buckets of a chunk needed that, the next chunks' queries
//     summarise the outbox by latest version from the start.
//
// A bucket that differs is read row by row and merged like a streamed
// chunk (every finding re-checked by point look-up), or, if it holds many
// more rows than leafRows, cut into smaller buckets and summarised again.
// Rows too young to judge and unpublished events make their buckets
// differ; they are decided row by row, as in a streamed chunk. Only the
// summaries of clean buckets leave the servers: on 10M rows with 100 gaps
// this reads about 1% of the rows, in a third of the time of streaming
// them all (bench/reconcile.md).
const (
	defaultLeafRows = 1024
	// maxBuckets bounds the buckets of one summary query.
	maxBuckets = 4096
	// maxChunkWidth keeps key arithmetic within int64.
	maxChunkWidth = uint64(1) << 62
)

// summary is one side's count and hash sum of a bucket.
type summary struct {
	n   int64
	sum string
}

// bucket is one key range [lo, hi] of a chunk and what each side holds.
type bucket struct {
	lo, hi    int64
	authority summary
	judged    int64
	outbox    summary
	target    summary
}

func (b *bucket) rows() int64 { return max(b.authority.n, b.outbox.n, b.target.n) }

func (b *bucket) width() uint64 { return uint64(b.hi) - uint64(b.lo) + 1 }

// walkChecksum compares the key positions [lo, hi] in chunks: from the
// smallest to the largest key of either side for a full sweep, the key
// range of the window's rows for a windowed run.
func (r *runner) walkChecksum(ctx context.Context, lo, hi int64) error {
	// A chunk's width is in keys. Unique integer keys hold at most one row
	// per key, so the first chunk holds at most chunkRows rows; the width
	// then follows the time each chunk took and the density it found.
	width := uint64(max(r.chunkRows, 1))
	density := 1.0
	r.bucketRows = r.leafRows
	if r.p.hasOutbox && !r.p.deleteOnPublish {
		r.outboxMode = outboxAllRows
	}
	for cur := lo; ; {
		end := hi
		if uint64(hi)-uint64(cur) >= width {
			end = cur + int64(width-1)
		}
		span := uint64(end) - uint64(cur) + 1
		t := time.Now()
		st, err := r.checkRange(ctx, cur, end, bucketWidth(span, density, r.bucketRows))
		if err != nil {
			return err
		}
		r.res.Chunks++
		if end == hi {
			return nil
		}
		density = float64(st.rows) / float64(span)
		r.resizeBuckets(st)
		width = r.nextWidth(width, time.Since(t), density)
		if r.hooks.afterChunk != nil {
			r.hooks.afterChunk(r.res.Chunks - 1)
		}
		cur = end + 1
	}
}

// rangeStats is what the summaries of a range found.
type rangeStats struct {
	rows              int64 // the larger side of each bucket, summed
	nonEmpty, differs int   // buckets holding rows; those read row by row
}

// resizeBuckets adapts the rows a bucket is cut for to how many buckets
// differ. Each differing bucket costs reading its rows; each bucket costs
// an index descent and an aggregate on each side. Keys in key order
// (serials, time-ordered ids) keep the rows not yet decided (too young to
// judge, not yet published) together in a few buckets; random keys (uuid
// v4) spread them over as many buckets as there are rows: smaller buckets
// then read fewer rows (bench/reconcile.md, uuid keys).
func (r *runner) resizeBuckets(st rangeStats) {
	switch minRows := max(1, r.leafRows/16); {
	case st.differs*16 > st.nonEmpty && r.bucketRows > minRows:
		r.bucketRows = max(minRows, r.bucketRows/2)
	case st.differs*64 < st.nonEmpty && r.bucketRows < r.leafRows:
		r.bucketRows = min(r.leafRows, r.bucketRows*2)
	}
}

// nextWidth resizes a chunk after one that took took: toward chunk_time,
// at most doubling or halving a step, at most maxBuckets buckets of
// bucketRows rows at the density seen, at least minRows keys.
func (r *runner) nextWidth(width uint64, took time.Duration, density float64) uint64 {
	scale := 2.0
	if took > 0 {
		scale = min(2, max(0.5, float64(r.chunkTime)/float64(took)))
	}
	w := float64(width) * scale
	if density > 0 {
		w = min(w, float64(maxBuckets*r.bucketRows)/density)
	}
	w = min(max(w, float64(r.minRows), 1), float64(maxChunkWidth))
	return uint64(w)
}

// bucketWidth cuts span keys into buckets of about leafRows rows at the
// given density, at most maxBuckets of them.
func bucketWidth(span uint64, density float64, leafRows int) uint64 {
	n := math.Ceil(float64(span) * density / float64(max(leafRows, 1)))
	n = min(max(n, 1), maxBuckets)
	return max(1, uint64(math.Ceil(float64(span)/n)))
}

// buckets cuts [lo, hi] into ranges of width keys (the last may be
// shorter).
func buckets(lo, hi int64, width uint64) []bucket {
	var out []bucket
	for cur := lo; ; {
		end := hi
		if uint64(hi)-uint64(cur) >= width {
			end = cur + int64(width-1)
		}
		out = append(out, bucket{lo: cur, hi: end})
		if end == hi {
			return out
		}
		cur = end + 1
	}
}

// checkRange decides [lo, hi] in buckets of width keys: clean by their
// summaries, read row by row, or cut smaller.
func (r *runner) checkRange(ctx context.Context, lo, hi int64, width uint64) (rangeStats, error) {
	var st rangeStats
	bs := buckets(lo, hi, width)
	mode := r.outboxMode
	if err := r.summarise(ctx, bs, mode); err != nil {
		return st, err
	}
	checkTarget := r.p.target != nil
	checkOutbox := mode != outboxSkip
	var outboxOnly, differ []int
	for i := range bs {
		b := &bs[i]
		st.rows += b.rows()
		if b.rows() > 0 {
			st.nonEmpty++
		}
		targetOK := !checkTarget || b.target == b.authority
		outboxOK := !checkOutbox || b.outbox == b.authority
		switch {
		case targetOK && outboxOK:
			r.res.RowsChecked += b.judged
		case targetOK && mode == outboxAllRows:
			outboxOnly = append(outboxOnly, i)
		default:
			differ = append(differ, i)
		}
	}
	if mode == outboxAllRows && len(outboxOnly) > len(bs)/2 {
		r.outboxMode = outboxLatest
	}
	if len(outboxOnly) > 0 {
		latest, err := r.outboxLatest(ctx, bs, outboxOnly)
		if err != nil {
			return st, err
		}
		for j, i := range outboxOnly {
			if latest[j] == bs[i].authority {
				r.res.RowsChecked += bs[i].judged
				continue
			}
			differ = append(differ, i)
		}
		// Keep key order, so that findings come out in it.
		slices.Sort(differ)
	}
	// Differing buckets are read row by row: adjacent ones as one range,
	// and the ranges of a chunk together, a streamed chunk's rows (at
	// most) a query on each side. A bucket much larger than leafRows is
	// cut smaller and summarised again instead.
	var batch []span
	var batchRows int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := r.readRanges(ctx, batch)
		batch, batchRows = batch[:0], 0
		return err
	}
	for _, i := range differ {
		b := &bs[i]
		n := b.rows()
		if n > int64(r.leafRows) && b.width() > 1 {
			sub := max(1, min(b.width()/2, uint64(float64(b.width())*float64(r.leafRows)/float64(n))))
			if _, err := r.checkRange(ctx, b.lo, b.hi, sub); err != nil {
				return st, err
			}
			continue
		}
		if len(batch) > 0 && batchRows+n > int64(r.maxRows) {
			if err := flush(); err != nil {
				return st, err
			}
		}
		if k := len(batch); k > 0 && batch[k-1].hi+1 == b.lo {
			batch[k-1].hi = b.hi
		} else {
			batch = append(batch, span{b.lo, b.hi})
		}
		batchRows += n
	}
	if err := flush(); err != nil {
		return st, err
	}
	st.differs = len(differ)
	return st, nil
}

// Buckets are cut by arithmetic on int64 positions. An integer key is its
// own position. A uuid's position is its first eight bytes, read as an
// unsigned big-endian number with the top bit flipped, so that int64
// order is uuid order: the positions [p, q] stand for the uuids from p's
// eight bytes followed by zeros to q's followed by ones. A bucket one
// position wide may hold several uuids that share their first eight
// bytes; it is read row by row.

// position is a key's position.
func (r *runner) position(k key) (int64, error) {
	if r.kt == keyInt {
		return k.i, nil
	}
	b, err := hex.DecodeString(strings.ReplaceAll(k.s, "-", ""))
	if err != nil || len(b) != 16 {
		return 0, fmt.Errorf("uuid %q", k.s)
	}
	return int64(binary.BigEndian.Uint64(b) ^ 1<<63), nil
}

// keyAt is the smallest key at position p (first) or the largest (!first).
func (r *runner) keyAt(p int64, first bool) key {
	if r.kt == keyInt {
		return key{i: p}
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(p)^1<<63)
	if !first {
		binary.BigEndian.PutUint64(b[8:], math.MaxUint64)
	}
	return key{s: formatUUID(b[:])}
}

// bounds are the ends of the buckets idx (all when nil) as query
// arguments.
func (r *runner) bounds(bs []bucket, idx []int) (los, his any) {
	var spans []span
	if idx == nil {
		spans = make([]span, len(bs))
		for i, b := range bs {
			spans[i] = span{b.lo, b.hi}
		}
	} else {
		spans = make([]span, len(idx))
		for j, i := range idx {
			spans[j] = span{bs[i].lo, bs[i].hi}
		}
	}
	return r.spanArgs(spans)
}

// spanArgs are the ends of ranges of positions as query arguments: the
// smallest and the largest key of each.
func (r *runner) spanArgs(spans []span) (los, his any) {
	if r.kt == keyInt {
		l, h := make([]int64, len(spans)), make([]int64, len(spans))
		for i, s := range spans {
			l[i], h[i] = s.lo, s.hi
		}
		return l, h
	}
	l, h := make([]string, len(spans)), make([]string, len(spans))
	for i, s := range spans {
		l[i], h[i] = r.keyAt(s.lo, true).s, r.keyAt(s.hi, false).s
	}
	return l, h
}

// summarise fills the summaries of every bucket: the authority's (with
// the outbox's) and the target's, from their databases at once.
func (r *runner) summarise(ctx context.Context, bs []bucket, mode outboxSummary) error {
	los, his := r.bounds(bs, nil)
	checkOutbox := mode != outboxSkip
	readAuthority := func(ctx context.Context) error {
		q := r.p.authorityBucketQuery(mode, r.kt, !r.w.full)
		args := []any{los, his, r.w.cut}
		if !r.w.full {
			args = append(args, r.w.from)
		}
		rows, err := r.p.authority.Query(ctx, q, prepared(args)...)
		if err != nil {
			return fmt.Errorf("summarise authority keys %d..%d: %w", bs[0].lo, bs[len(bs)-1].hi, err)
		}
		vals := []any{new(int64), new(int64), new(string)}
		if checkOutbox {
			vals = append(vals, new(int64), new(string))
		}
		err = scanSummaries(rows, len(bs), func(i int, vals []any) {
			b := &bs[i]
			b.authority = summary{n: *vals[0].(*int64), sum: *vals[2].(*string)}
			b.judged = *vals[1].(*int64)
			if checkOutbox {
				b.outbox = summary{n: *vals[3].(*int64), sum: *vals[4].(*string)}
			}
		}, vals...)
		if err != nil {
			return fmt.Errorf("summarise authority keys %d..%d: %w", bs[0].lo, bs[len(bs)-1].hi, err)
		}
		return nil
	}
	readTarget := func(ctx context.Context) error {
		if r.p.target == nil {
			return nil
		}
		rows, err := r.p.target.Query(ctx, r.p.targetBucketQuery(r.kt), prepared([]any{los, his})...)
		if err != nil {
			return fmt.Errorf("summarise target keys %d..%d: %w", bs[0].lo, bs[len(bs)-1].hi, err)
		}
		err = scanSummaries(rows, len(bs), func(i int, vals []any) {
			bs[i].target = summary{n: *vals[0].(*int64), sum: *vals[1].(*string)}
		}, new(int64), new(string))
		if err != nil {
			return fmt.Errorf("summarise target keys %d..%d: %w", bs[0].lo, bs[len(bs)-1].hi, err)
		}
		return nil
	}
	return r.bothSides(ctx, readAuthority, readTarget)
}

// outboxLatest summarises the outbox of the buckets idx with one row per
// key, its highest version.
func (r *runner) outboxLatest(ctx context.Context, bs []bucket, idx []int) ([]summary, error) {
	los, his := r.bounds(bs, idx)
	out := make([]summary, len(idx))
	rows, err := r.p.authority.Query(ctx, r.p.outboxLatestQuery(r.kt), prepared([]any{los, his})...)
	if err == nil {
		err = scanSummaries(rows, len(idx), func(i int, vals []any) {
			out[i] = summary{n: *vals[0].(*int64), sum: *vals[1].(*string)}
		}, new(int64), new(string))
	}
	if err != nil {
		return nil, fmt.Errorf("summarise outbox keys by their latest version: %w", err)
	}
	return out, nil
}

// scanSummaries reads rows of (ordinal, values...) into set, checking
// that every one of n buckets came back once.
func scanSummaries(rows pgx.Rows, n int, set func(i int, vals []any), vals ...any) error {
	defer rows.Close()
	seen := 0
	var ord int64
	dest := append([]any{&ord}, vals...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if ord < 1 || ord > int64(n) {
			return fmt.Errorf("summary for bucket %d of %d", ord, n)
		}
		set(int(ord-1), vals)
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != n {
		return fmt.Errorf("%d summaries for %d buckets", seen, n)
	}
	return nil
}

// fullKeyRange is the smallest and largest key position of the authority
// and the target together.
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
		var first, last *string
		rows, err := s.q(ctx, s.sq)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		for rows.Next() {
			if err := rows.Scan(&first, &last); err != nil {
				rows.Close()
				return 0, 0, false, fmt.Errorf("find the key range: %w", err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		if first == nil {
			continue
		}
		mn, err := r.parsePosition(*first)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		mx, err := r.parsePosition(*last)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find the key range: %w", err)
		}
		if !ok || mn < lo {
			lo = mn
		}
		if !ok || mx > hi {
			hi = mx
		}
		ok = true
	}
	return lo, hi, ok, nil
}

// parsePosition is the position of a key in its text form.
func (r *runner) parsePosition(s string) (int64, error) {
	if r.kt == keyInt {
		return strconv.ParseInt(s, 10, 64)
	}
	return r.position(key{s: s})
}

// span is a range of positions [lo, hi].
type span struct{ lo, hi int64 }

// readRanges reads the rows of the ranges of positions given, in one query
// on each side, and merges them.
func (r *runner) readRanges(ctx context.Context, spans []span) error {
	los, his := r.spanArgs(spans)
	var as []aRow
	var ts []tRow
	readAuthority := func(ctx context.Context) error {
		q, args := r.p.authorityRangesQuery(r.w, r.kt, los, his)
		var err error
		if as, err = r.queryAuthority(ctx, q, args, r.aBuf[:0]); err != nil {
			return fmt.Errorf("read authority rows of %d ranges: %w", len(spans), err)
		}
		r.aBuf = as
		return nil
	}
	readTarget := func(ctx context.Context) error {
		if r.p.target == nil {
			return nil
		}
		var err error
		if ts, err = r.queryTarget(ctx, r.p.targetRangesQuery(r.kt), []any{los, his}); err != nil {
			return fmt.Errorf("read target rows of %d ranges: %w", len(spans), err)
		}
		return nil
	}
	if err := r.bothSides(ctx, readAuthority, readTarget); err != nil {
		return err
	}
	r.res.RangesRead += len(spans)
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
